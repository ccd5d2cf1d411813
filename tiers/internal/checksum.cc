#include "tiers/internal/checksum.h"

#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
// Debian's libxxhash builds the dispatcher in. Over bytes just read from the
// disk it runs at memory's speed (~8 GB/s: 0.25 ms of a 2 MiB read), so a
// lone large read checksums each part as it lands (SsdStore::Read).
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define KVTIER_XXH3_64 XXH3_64bits_dispatch
#define KVTIER_XXH3_64_UPDATE XXH3_64bits_update_dispatch
#else
#define XXH_INLINE_ALL
#include <xxhash.h>
#define KVTIER_XXH3_64 XXH3_64bits
#define KVTIER_XXH3_64_UPDATE XXH3_64bits_update
#endif

#include <new>

namespace kvtier::tiers::internal {

uint64_t BlockChecksum(std::span<const std::byte> bytes) {
  return KVTIER_XXH3_64(bytes.data(), bytes.size());
}

struct BlockChecksumStream::State {
  XXH3_state_t* xxh;
};

BlockChecksumStream::BlockChecksumStream() : state_(new State{XXH3_createState()}) {
  if (state_->xxh == nullptr) {
    delete state_;
    throw std::bad_alloc();
  }
  XXH3_64bits_reset(state_->xxh);
}

BlockChecksumStream::~BlockChecksumStream() {
  XXH3_freeState(state_->xxh);
  delete state_;
}

void BlockChecksumStream::Update(std::span<const std::byte> bytes) {
  KVTIER_XXH3_64_UPDATE(state_->xxh, bytes.data(), bytes.size());
}

uint64_t BlockChecksumStream::Digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace kvtier::tiers::internal

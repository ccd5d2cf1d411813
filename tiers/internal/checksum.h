// The checksum every stored block carries (the ssd tier's records, the
// remote tier's values): XXH3-64 of the payload, with libxxhash's runtime
// dispatch where the library has it (AVX2 where the CPU has it: ~20 GB/s
// against ~10 GB/s for the SSE2 code a baseline x86-64 build inlines). The
// values are XXH3-64's either way, so stored checksums stay valid across
// machines and builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::tiers::internal {

uint64_t BlockChecksum(std::span<const std::byte> bytes);

// BlockChecksum of bytes fed in parts, in order: the same value as one call
// over all of them (XXH3's streaming form), so that a reader can checksum
// each part of a block as it lands while the next is still being read.
class BlockChecksumStream {
 public:
  BlockChecksumStream();
  ~BlockChecksumStream();
  BlockChecksumStream(const BlockChecksumStream&) = delete;
  BlockChecksumStream& operator=(const BlockChecksumStream&) = delete;

  void Update(std::span<const std::byte> bytes);
  uint64_t Digest() const;

 private:
  struct State;
  State* state_;
};

}  // namespace kvtier::tiers::internal

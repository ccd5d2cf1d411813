#include "prefix_index/key_hasher.h"

#include <bit>
#include <cassert>
#include <cstring>

#define XXH_INLINE_ALL  // 2-3x faster than the shared library on 1 KiB+ inputs
#include <xxhash.h>

namespace kvtier::prefix_index {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the key format is little-endian; a big-endian port must byte-swap");
static_assert(KeyHasher::kXxhSecretBytes >= XXH3_SECRET_SIZE_MIN);

// Domain separation constants: changing them changes every key.
constexpr uint64_t kSecretDerivationSeed = 0x6b76746965722d31ULL;  // "kvtier-1"
constexpr char kRootLabel[] = "kvtier/root/v1";

// Hash inputs of up to this many tokens are assembled on the stack.
constexpr size_t kStackTokens = 1024;

BlockKey FromXxh(XXH128_hash_t h) { return BlockKey{h.high64, h.low64}; }

}  // namespace

Result<KeyHasher> KeyHasher::Create(std::span<const std::byte> secret, uint32_t block_tokens) {
  if (secret.size() < kMinSecretBytes) {
    return InvalidArgumentError("namespace secret must be at least 16 bytes");
  }
  if (block_tokens == 0) return InvalidArgumentError("block_tokens must be at least 1");
  // XXH3's secret must look random; derive it from the namespace secret with
  // the stable one-shot API (XXH3_generateSecret is not covered by xxHash's
  // stability promise, so keys could drift between library versions).
  std::array<std::byte, kXxhSecretBytes> derived;
  for (size_t i = 0; i < kXxhSecretBytes / 16; ++i) {
    XXH128_hash_t h =
        XXH3_128bits_withSeed(secret.data(), secret.size(), kSecretDerivationSeed + i);
    std::memcpy(derived.data() + 16 * i, &h.low64, 8);
    std::memcpy(derived.data() + 16 * i + 8, &h.high64, 8);
  }
  return KeyHasher(derived, block_tokens);
}

KeyHasher::KeyHasher(const std::array<std::byte, kXxhSecretBytes>& secret, uint32_t block_tokens)
    : secret_(secret), block_tokens_(block_tokens) {
  root_ = FromXxh(
      XXH3_128bits_withSecret(kRootLabel, sizeof(kRootLabel) - 1, secret_.data(), secret_.size()));
}

// The hash input: parent (16 bytes) || tokens || extra, assembled in one
// contiguous buffer because the one-shot hash is much faster than the
// streaming API on inputs this short.
class KeyHasher::InputBuffer {
 public:
  InputBuffer(size_t token_bytes, std::span<const std::byte> extra)
      : token_bytes_(token_bytes), len_(16 + token_bytes + extra.size()) {
    if (len_ > sizeof(stack_)) {
      heap_.resize(len_);
      buf_ = heap_.data();
    }
    if (!extra.empty()) std::memcpy(buf_ + 16 + token_bytes_, extra.data(), extra.size());
  }

  BlockKey Hash(const BlockKey& parent, const TokenId* tokens, const std::byte* secret,
                size_t secret_size) {
    std::memcpy(buf_, &parent.lo, 8);
    std::memcpy(buf_ + 8, &parent.hi, 8);
    std::memcpy(buf_ + 16, tokens, token_bytes_);
    return FromXxh(XXH3_128bits_withSecret(buf_, len_, secret, secret_size));
  }

 private:
  const size_t token_bytes_;
  const size_t len_;
  std::byte stack_[16 + kStackTokens * sizeof(TokenId) + 64];
  std::vector<std::byte> heap_;
  std::byte* buf_ = stack_;
};

BlockKey KeyHasher::KeyOf(const BlockKey& parent, std::span<const TokenId> tokens,
                          std::span<const std::byte> extra) const {
  assert(tokens.size() == block_tokens_);
  InputBuffer input(tokens.size() * sizeof(TokenId), extra);
  return input.Hash(parent, tokens.data(), secret_.data(), secret_.size());
}

void KeyHasher::AppendChain(const BlockKey& parent, std::span<const TokenId> tokens,
                            std::span<const std::byte> extra, std::vector<BlockKey>* out) const {
  const size_t blocks = tokens.size() / block_tokens_;
  out->reserve(out->size() + blocks);
  // One buffer for the whole chain: only the parent and the tokens change.
  InputBuffer input(block_tokens_ * sizeof(TokenId), extra);
  BlockKey key = parent;
  for (size_t i = 0; i < blocks; ++i) {
    key = input.Hash(key, tokens.data() + i * block_tokens_, secret_.data(), secret_.size());
    out->push_back(key);
  }
}

std::vector<BlockKey> KeyHasher::Chain(std::span<const TokenId> tokens,
                                       std::span<const std::byte> extra) const {
  std::vector<BlockKey> out;
  AppendChain(root_, tokens, extra, &out);
  return out;
}

}  // namespace kvtier::prefix_index

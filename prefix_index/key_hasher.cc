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

BlockKey KeyHasher::KeyOf(const BlockKey& parent, std::span<const TokenId> tokens,
                          std::span<const std::byte> extra) const {
  assert(tokens.size() == block_tokens_);
  const size_t token_bytes = tokens.size() * sizeof(TokenId);
  const size_t len = 16 + token_bytes + extra.size();
  // One contiguous input: the one-shot hash is faster than the streaming API
  // and the copy costs a fraction of the hash.
  std::byte stack[16 + kStackTokens * sizeof(TokenId) + 64];
  std::vector<std::byte> heap;
  std::byte* buf = stack;
  if (len > sizeof(stack)) {
    heap.resize(len);
    buf = heap.data();
  }
  std::memcpy(buf, &parent.lo, 8);
  std::memcpy(buf + 8, &parent.hi, 8);
  std::memcpy(buf + 16, tokens.data(), token_bytes);
  if (!extra.empty()) std::memcpy(buf + 16 + token_bytes, extra.data(), extra.size());
  return FromXxh(XXH3_128bits_withSecret(buf, len, secret_.data(), secret_.size()));
}

void KeyHasher::AppendChain(const BlockKey& parent, std::span<const TokenId> tokens,
                            std::span<const std::byte> extra, std::vector<BlockKey>* out) const {
  const size_t blocks = tokens.size() / block_tokens_;
  out->reserve(out->size() + blocks);
  BlockKey key = parent;
  for (size_t i = 0; i < blocks; ++i) {
    key = KeyOf(key, tokens.subspan(i * block_tokens_, block_tokens_), extra);
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

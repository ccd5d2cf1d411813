// KeyHasher: computes the chained, keyed block keys of a prompt (DESIGN.md §1).
//
//   key[i] = XXH3-128(secret = S, parent_lo || parent_hi || tokens[i] || extra)
//
// where parent is key[i-1] (the namespace root for i = 0), the parent halves
// are little-endian uint64, the block's token ids little-endian uint32, and
// `extra` optional bytes that must also match (a LoRA id, an image hash).
// S is a 192-byte XXH3 secret derived from the namespace secret, so keys of
// different namespaces are unrelated and cannot be crafted without it.
// Only full blocks get keys. The format is pinned by known vectors in
// tests/prefix_index/key_hasher_test.cc: changing it invalidates every key
// stored on disk.
//
// Thread-safety: immutable after Create(); share freely.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "prefix_index/block_key.h"

namespace kvtier::prefix_index {

using TokenId = uint32_t;

class KeyHasher {
 public:
  static constexpr size_t kMinSecretBytes = 16;
  static constexpr size_t kXxhSecretBytes = 192;

  // `secret`: the namespace's secret, at least kMinSecretBytes.
  // `block_tokens`: tokens per block, at least 1.
  static Result<KeyHasher> Create(std::span<const std::byte> secret, uint32_t block_tokens);

  uint32_t block_tokens() const { return block_tokens_; }
  // key[-1]: the parent of a prompt's first block.
  const BlockKey& root() const { return root_; }

  // The key of one block. REQUIRES: tokens.size() == block_tokens().
  BlockKey KeyOf(const BlockKey& parent, std::span<const TokenId> tokens,
                 std::span<const std::byte> extra = {}) const;

  // Appends to `out` the keys of the full blocks of `tokens`, continuing the
  // chain after `parent` (root() at a prompt's start). A partial last block
  // gets no key. `extra` applies to every block.
  void AppendChain(const BlockKey& parent, std::span<const TokenId> tokens,
                   std::span<const std::byte> extra, std::vector<BlockKey>* out) const;
  std::vector<BlockKey> Chain(std::span<const TokenId> tokens,
                              std::span<const std::byte> extra = {}) const;

 private:
  class InputBuffer;
  KeyHasher(const std::array<std::byte, kXxhSecretBytes>& secret, uint32_t block_tokens);

  alignas(64) std::array<std::byte, kXxhSecretBytes> secret_;
  uint32_t block_tokens_;
  BlockKey root_;
};

}  // namespace kvtier::prefix_index

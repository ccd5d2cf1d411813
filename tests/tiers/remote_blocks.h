// Test blocks for the remote tier's tests: a small layout and a block's
// payload following from its key, so a block read back can be checked
// byte for byte without keeping what was written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/layout.h"
#include "prefix_index/block_key.h"

namespace kvtier::tiers::internal {

// 2 layers, 2 KV heads of 16, fp16: 128 bytes per token of block.
inline Layout SmallLayout(uint32_t block_tokens = 4) {  // 4 tokens: 512-byte blocks
  Layout l;
  l.layers = 2;
  l.kv_heads = 2;
  l.head_dim = 16;
  l.dtype = DType::kFloat16;
  l.block_tokens = block_tokens;
  return l;
}

inline std::vector<std::byte> Payload(const prefix_index::BlockKey& key, size_t bytes) {
  std::vector<std::byte> out(bytes);
  uint64_t x = key.hi ^ key.lo;
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<std::byte>(x >> 56);
  }
  return out;
}

}  // namespace kvtier::tiers::internal

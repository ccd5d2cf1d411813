// Helpers shared by the engine tests: small tiers, chains of keys, and
// per-key byte patterns.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/cache_engine.h"

namespace kvtier::engine::testing {

// 1 layer, 1 KV head, head_dim 64, fp16, 16 tokens: 4 KiB blocks.
inline Layout SmallLayout() { return Layout{1, 1, 64, DType::kFloat16, 16}; }

inline std::unique_ptr<CacheEngine> MakeEngine(uint64_t device_blocks, uint64_t host_blocks,
                                               uint64_t block_bytes = 4096,
                                               const Clock* clock = &SystemClock()) {
  std::unique_ptr<Tier> device;
  if (device_blocks > 0) {
    auto d = tiers::NewEmulatedDeviceTier({device_blocks * block_bytes, 16 * block_bytes});
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    device = std::move(d).value();
  }
  auto h = tiers::NewHostTier({host_blocks * block_bytes, 16 * block_bytes});
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  EngineOptions options;
  options.clock = clock;
  auto e = CacheEngine::Create(options, std::move(device), std::move(h).value());
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

// A chain of n distinct keys; `stem` separates chains.
inline std::vector<BlockKey> Chain(uint64_t stem, size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(BlockKey{stem, i + 1});
  return keys;
}

// The bytes a test writes for `key`: a pattern no other key shares.
inline void Fill(std::span<std::byte> bytes, const BlockKey& key) {
  uint64_t x = key.hi * 0x9e3779b97f4a7c15ULL ^ key.lo;
  for (size_t i = 0; i < bytes.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(bytes.data() + i, &x, std::min<size_t>(8, bytes.size() - i));
  }
}

inline bool Matches(std::span<const std::byte> bytes, const BlockKey& key) {
  std::vector<std::byte> want(bytes.size());
  Fill(want, key);
  return std::memcmp(want.data(), bytes.data(), bytes.size()) == 0;
}

// Allocates, fills and commits `keys` in `tier`; returns how many were written.
inline size_t Put(CacheEngine& engine, NamespaceId ns, std::span<const BlockKey> keys,
                  TierKind tier = TierKind::kHost) {
  auto a = engine.Allocate(ns, std::nullopt, keys, tier);
  if (!a.ok()) return 0;
  for (size_t i = 0; i < a->size(); ++i) {
    if (a->state(i) == WriteState::kAllocated) Fill(a->Bytes(i), keys[i]);
  }
  const size_t n = a->allocated();
  EXPECT_TRUE(a->Commit().ok());
  return n;
}

}  // namespace kvtier::engine::testing

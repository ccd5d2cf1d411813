// MiniCaches (eviction/internal/mini_caches.h): the adaptive policy's
// miniature caches on the sampled keys, and their scores.
#include "eviction/internal/mini_caches.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/hash.h"
#include "eviction/internal/adaptive_candidates.h"

namespace kvtier::eviction::internal {
namespace {

// Candidates made as the adaptive policy makes them.
MiniCaches Make(const std::vector<std::string>& names, const Clock& clock) {
  Result<AdaptiveCandidates> made = MakeAdaptiveCandidates(names, clock);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return MiniCaches(names, std::move(made->policies), made->filters, std::move(made->owned));
}

// A chain of `n` keys, distinct for each `seed`.
std::vector<uint64_t> Chain(uint64_t seed, size_t n) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(Mix64(seed * 1000 + i));
  return keys;
}

// Every key sampled at the start (stride 1): a chain asked twice is all
// hits the second time for every candidate, and scored alike (no lead).
TEST(MiniCachesTest, AChainAskedAgainIsHitByEveryCandidate) {
  ManualClock clock;
  MiniCaches m = Make({"lru", "s3fifo"}, clock);
  EXPECT_EQ(m.stride(), 1u);
  const std::vector<uint64_t> chain = Chain(1, 10);
  EXPECT_EQ(m.Request(chain, SIZE_MAX, 0), 10u);
  EXPECT_EQ(m[0].last, 0);
  EXPECT_EQ(m.Request(chain, SIZE_MAX, 0), 10u);
  EXPECT_EQ(m[0].last, 10);
  EXPECT_EQ(m[1].last, 10);
  EXPECT_EQ(m[1].lead, 0);
  m.Decay(10, 1e9);
  m.Decay(10, 1e9);
  EXPECT_EQ(m.sampled_refs(), 20u);
  EXPECT_NEAR(m.refs(), 20, 1e-6);
}

// Where the caches hold less than the traffic, the candidates differ and
// the lead says by how much: LRU cycling through more than it holds hits
// nothing, while the filtered variant refuses the third chain at its first
// sighting and hits the other two the next time.
TEST(MiniCachesTest, LeadsCountHitsOverTheFollowedCandidate) {
  ManualClock clock;
  MiniCaches m = Make({"lru", "lru/seen"}, clock);
  m.SizeFilters(64);
  double lru_hits = 0, filtered_hits = 0;
  for (int round = 0; round < 20; ++round) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {  // 3 chains of 4 keys, room for 8
      m.Request(Chain(seed, 4), 8, 0);
      lru_hits += m[0].last;
      filtered_hits += m[1].last;
    }
  }
  EXPECT_EQ(lru_hits, 0);
  EXPECT_GT(filtered_hits, 0);
  EXPECT_NEAR(m[1].lead, filtered_hits - lru_hits, 1e-9);  // (no decay asked)
  m.RestartLeads();
  EXPECT_EQ(m[1].lead, 0);
  m.RestartScores();
  EXPECT_EQ(m[1].hits, 0);
  EXPECT_EQ(m.refs(), 0);
}

// A larger stride keeps, in each cache, exactly the keys still sampled, and
// scales the scores with the rate.
TEST(MiniCachesTest, RestrideKeepsTheKeysStillSampled) {
  ManualClock clock;
  MiniCaches m = Make({"lru", "leaf-lru"}, clock);
  const std::vector<uint64_t> chain = Chain(7, 64);
  m.Request(chain, SIZE_MAX, 0);
  m.Decay(64, 1e9);
  m.Restride(4);
  EXPECT_EQ(m.stride(), 4u);
  EXPECT_NEAR(m.refs(), 16, 1e-6);
  size_t still = 0;
  for (uint64_t k : chain) {
    const bool sampled = m.Sampled(k);
    still += sampled;
    EXPECT_EQ(m[0].Holds(k), sampled);
    EXPECT_EQ(m[1].Holds(k), sampled);
  }
  ASSERT_GT(still, 0u);
  EXPECT_EQ(m.Request(chain, SIZE_MAX, 0), still);
  EXPECT_EQ(m[0].last, static_cast<double>(still));  // all of them hit
}

// The probe serves the last chain again with a block more, in caches with
// room for the chain alone, and reports how much of the chain each
// candidate then holds: LRU evicts the block before the one it writes
// under (the leaf is pinned as the write's parent), and the leaf with it;
// leaf-first LRU has no unpinned leaf to evict and skips the write.
TEST(MiniCachesTest, TheProbeTellsWhatEachCandidateKeeps) {
  ManualClock clock;
  MiniCaches m = Make({"lru", "leaf-lru"}, clock);
  const std::vector<uint64_t> chain = Chain(3, 6);
  m.Request(chain, SIZE_MAX, 0);
  const std::vector<size_t> kept = m.Probe(6);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], 4u);
  EXPECT_EQ(kept[1], 6u);
  for (size_t i = 0; i < 2; ++i) {
    size_t held = 0;
    for (uint64_t k : chain) held += m[i].Holds(k);
    EXPECT_EQ(held, kept[i]) << i;
  }
}

}  // namespace
}  // namespace kvtier::eviction::internal

// MiniCaches (eviction/internal/mini_caches.h): the adaptive policy's
// miniature caches on the sampled keys, and their scores.
#include "eviction/internal/mini_caches.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
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
// scales the scores with the rate: in caches already running, and in the
// prelude (the caches made after it hold the same).
TEST(MiniCachesTest, RestrideKeepsTheKeysStillSampled) {
  for (const bool started : {true, false}) {
    SCOPED_TRACE(started ? "started" : "in the prelude");
    ManualClock clock;
    MiniCaches m = Make({"lru", "leaf-lru", "s3fifo"}, clock);
    if (started) m.Start();
    const std::vector<uint64_t> chain = Chain(7, 64);
    m.Request(chain, SIZE_MAX, 0);
    m.Decay(64, 1e9);
    m.Restride(4);
    EXPECT_EQ(m.stride(), 4u);
    EXPECT_NEAR(m.refs(), 16, 1e-6);
    EXPECT_EQ(m.started(), started);
    m.Start();
    size_t still = 0;
    for (uint64_t k : chain) {
      const bool sampled = m.Sampled(k);
      still += sampled;
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(m[i].Holds(k), sampled) << i;
    }
    ASSERT_GT(still, 0u);
    EXPECT_EQ(m.Request(chain, SIZE_MAX, 0), still);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(m[i].last, static_cast<double>(still)) << i;
  }
}

// The prelude (internal/mini_caches.h): LRU and leaf-first LRU (and their
// filtered variants) are not run until the tier first evicts, then made
// from it. Made so, each holds what running it all along would have held,
// in the same order: cut to any size, each keeps the same keys, and the
// requests after score the same. S3-FIFO runs throughout in both.
TEST(MiniCachesTest, CachesMadeFromThePreludeMatchCachesRunAllAlong) {
  const std::vector<std::string> names = {"lru", "leaf-lru", "s3fifo", "lru/seen", "leaf-lru/seen"};
  ManualClock clock;
  MiniCaches live = Make(names, clock);
  MiniCaches deferred = Make(names, clock);
  live.Start();
  ASSERT_FALSE(deferred.started());
  live.SizeFilters(4096);
  deferred.SizeFilters(4096);
  // Sessions whose chains grow, come back shorter and branch: requests
  // that hit a prefix and write the rest, as the engine serves them.
  std::mt19937_64 rng(11);
  std::vector<std::vector<uint64_t>> sessions(12);
  std::vector<uint64_t> keys;
  auto request = [&](size_t capacity) {
    std::vector<uint64_t>& s = sessions[rng() % sessions.size()];
    const size_t keep = s.empty() ? 0 : rng() % (s.size() + 1);
    if (rng() % 4 == 0) s.resize(keep);  // a branch: a new turn after an earlier one
    for (size_t n = 1 + rng() % 6; n > 0; --n) {
      s.push_back(rng());
      keys.push_back(s.back());
    }
    const std::vector<uint64_t> chain(
        s.begin(), s.begin() + static_cast<ptrdiff_t>(rng() % 3 == 0 ? keep : s.size()));
    if (chain.empty()) return;
    EXPECT_EQ(live.Request(chain, capacity, 0), deferred.Request(chain, capacity, 0));
    for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(live[i].last, deferred[i].last) << names[i];
  };
  for (int r = 0; r < 400; ++r) request(SIZE_MAX);
  EXPECT_FALSE(deferred.started());
  // Cut to smaller and smaller sizes, by each candidate's own victims.
  for (size_t capacity : {size_t{1000}, size_t{400}, size_t{150}}) {
    live.Trim(capacity);
    deferred.Trim(capacity);
    EXPECT_TRUE(deferred.started());
    for (size_t i = 0; i < names.size(); ++i) {
      size_t held = 0;
      for (uint64_t k : keys) {
        ASSERT_EQ(live[i].Holds(k), deferred[i].Holds(k)) << names[i] << " at " << capacity;
        held += live[i].Holds(k);
      }
      EXPECT_LE(held, capacity) << names[i];
    }
  }
  // And they go on alike.
  for (int r = 0; r < 300; ++r) request(150);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(live[i].hits, deferred[i].hits) << names[i];
    for (uint64_t k : keys) ASSERT_EQ(live[i].Holds(k), deferred[i].Holds(k)) << names[i];
  }
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

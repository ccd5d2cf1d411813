// The learned policy: its model fits what it is shown, the policy learns
// from its own evictions what LRU cannot see, and a model moves from a
// miniature cache's instance to the tier's (Inherit). The contract
// (pinned never a victim, ...) is policy_contract_test's.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/hash.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/reuse_model.h"
#include "policy_test_util.h"

namespace kvtier::eviction {
namespace {

using internal::Features;
using internal::LogBin;
using internal::ReuseModel;
using internal::ReuseSample;
using testing::Meta;

TEST(LogBinTest, HalfOctaves) {
  EXPECT_EQ(LogBin(0), 0);
  EXPECT_EQ(LogBin(1), 1);
  EXPECT_EQ(LogBin(2), 3);
  EXPECT_EQ(LogBin(3), 4);
  EXPECT_EQ(LogBin(4), 5);
  EXPECT_EQ(LogBin(6), 6);
  EXPECT_EQ(LogBin(8), 7);
  EXPECT_EQ(LogBin(uint64_t{1} << 40), internal::kMaxBin);
  for (uint64_t u = 1; u < 100'000; ++u) EXPECT_LE(LogBin(u), LogBin(u + 1)) << u;
}

TEST(ReuseModelTest, FitsAnInteractionOfTwoFeatures) {
  // y is 8 where feature 1 is above 10 and feature 3 is 0, else 1: a split
  // on each, which no single feature's trend shows.
  std::vector<ReuseSample> samples;
  uint64_t state = 7;
  for (int i = 0; i < 4000; ++i) {
    ReuseSample s;
    for (auto& f : s.x) f = static_cast<uint8_t>(SplitMix64(&state) % 32);
    s.x[3] = static_cast<uint8_t>(SplitMix64(&state) % 2);
    s.y = s.x[1] > 10 && s.x[3] == 0 ? 8.0f : 1.0f;
    samples.push_back(s);
  }
  ReuseModel model;
  EXPECT_FALSE(model.trained());
  model.Fit(samples);
  ASSERT_TRUE(model.trained());
  Features far{5, 20, 5, 0, 5}, near1{5, 3, 5, 0, 5}, near2{5, 20, 5, 1, 5};
  EXPECT_GT(model.Predict(far), 6.0f);
  EXPECT_LT(model.Predict(near1), 3.0f);
  EXPECT_LT(model.Predict(near2), 3.0f);
}

// A cache of `capacity` blocks run by `policy` over `keys` (each a block's
// fingerprint, accessed in order): its hits, counted from access `from`.
uint64_t Hits(EvictionPolicy& policy, const std::vector<uint64_t>& keys, size_t capacity,
              size_t from) {
  std::unordered_map<uint64_t, BlockId> held;
  std::unordered_map<BlockId, uint64_t> key_of;
  std::vector<BlockId> free_ids;
  BlockId next_id = 0;
  uint64_t hits = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    BlockMeta m = Meta();
    m.fingerprint = keys[i];
    if (auto it = held.find(keys[i]); it != held.end()) {
      policy.Touch(it->second, m);
      if (i >= from) ++hits;
      continue;
    }
    while (held.size() >= capacity) {
      const std::optional<BlockId> v = policy.Victim();
      if (!v) ADD_FAILURE() << "no victim in a full cache";
      policy.Erase(*v);
      held.erase(key_of[*v]);
      free_ids.push_back(*v);
    }
    BlockId id = next_id;
    if (free_ids.empty()) {
      ++next_id;
    } else {
      id = free_ids.back();
      free_ids.pop_back();
    }
    policy.Insert(id, m);
    held[keys[i]] = id;
    key_of[id] = keys[i];
  }
  return hits;
}

// 80 hot blocks taken in turn, each followed by a block never seen again:
// every hot block comes back after 160 accesses, beyond a 100-block LRU's
// reach; OPT keeps the hot ones and hits on every one of them.
std::vector<uint64_t> HotLoopAndScan(size_t steps) {
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < steps; ++i) {
    keys.push_back(1 + i % 80);
    keys.push_back(1'000'000 + i);
  }
  return keys;
}

TEST(LearnedPolicyTest, LearnsToKeepWhatComesBackWhereLruKeepsNothing) {
  const std::vector<uint64_t> keys = HotLoopAndScan(30'000);
  const size_t from = keys.size() / 2, hot_refs = (keys.size() - from) / 2;
  std::unique_ptr<EvictionPolicy> lru = NewLruPolicy();
  std::unique_ptr<EvictionPolicy> learned = NewLearnedPolicy();
  const uint64_t lru_hits = Hits(*lru, keys, 100, from);
  const uint64_t learned_hits = Hits(*learned, keys, 100, from);
  EXPECT_EQ(lru_hits, 0u);
  // Sampled: 16 drawn of 100 miss the one-off blocks now and then.
  EXPECT_GT(learned_hits, hot_refs / 2) << "of " << hot_refs;
}

TEST(LearnedPolicyTest, UntrainedItIsSampledLru) {
  // Fewer evictions than one fit needs: the oldest of each draw goes, so
  // the most recent blocks stay.
  LearnedOptions options;
  options.sample = 64;
  std::unique_ptr<EvictionPolicy> p = NewLearnedPolicy(options);
  for (BlockId id = 0; id < 32; ++id) p->Insert(id, Meta());
  for (int i = 0; i < 8; ++i) {
    const std::optional<BlockId> v = p->Victim();
    ASSERT_TRUE(v);
    EXPECT_LT(*v, 16u) << "a block among the 16 most recent went first";
    p->Erase(*v);
  }
}

TEST(LearnedPolicyTest, InheritTakesTheSimulatedInstancesModel) {
  const std::vector<uint64_t> keys = HotLoopAndScan(30'000);
  std::unique_ptr<EvictionPolicy> trained = NewLearnedPolicy();
  Hits(*trained, keys, 100, keys.size());
  // A fresh instance given the trained one's model keeps the hot blocks
  // from its first evictions; one left to learn loses them at first.
  std::unique_ptr<EvictionPolicy> heir = NewLearnedPolicy();
  heir->Inherit(*trained);
  std::unique_ptr<EvictionPolicy> fresh = NewLearnedPolicy();
  const std::vector<uint64_t> start(keys.begin(), keys.begin() + 2'000);
  EXPECT_GT(Hits(*heir, start, 100, 0), Hits(*fresh, start, 100, 0) + 200);
  // Through leaf first too.
  std::unique_ptr<EvictionPolicy> leaf_trained = NewLeafFirst(NewLearnedPolicy());
  Hits(*leaf_trained, keys, 100, keys.size());
  std::unique_ptr<EvictionPolicy> leaf_heir = NewLeafFirst(NewLearnedPolicy());
  leaf_heir->Inherit(*leaf_trained);
  std::unique_ptr<EvictionPolicy> leaf_fresh = NewLeafFirst(NewLearnedPolicy());
  EXPECT_GT(Hits(*leaf_heir, start, 100, 0), Hits(*leaf_fresh, start, 100, 0) + 200);
}

}  // namespace
}  // namespace kvtier::eviction

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "eviction/eviction_policy.h"
#include "policy_test_util.h"

namespace kvtier::eviction {
namespace {

using testing::Drain;
using testing::Meta;

BlockMeta Children(uint32_t n, bool pinned = false) {
  BlockMeta m = Meta(pinned);
  m.children_in_tier = n;
  return m;
}

TEST(LeafFirstTest, NameShowsTheInnerPolicy) {
  EXPECT_EQ(NewLeafFirst(NewLruPolicy())->name(), "leaf-lru");
  ManualClock clock;
  EXPECT_EQ(NewLeafFirst(NewPriorityPolicy(clock))->name(), "leaf-priority");
}

// A chain 0 <- 1 <- 2 inserted parent first, as the engine does: LRU alone
// would evict the parent 0 first; leaf first evicts from the tail up.
TEST(LeafFirstTest, NeverEvictsAParentWithAChildInTheTier) {
  auto p = NewLeafFirst(NewLruPolicy());
  p->Insert(0, Meta());
  p->Insert(1, Meta());
  p->Update(0, Children(1));
  p->Insert(2, Meta());
  p->Update(1, Children(1));
  p->Insert(3, Meta());  // an unrelated leaf, newer than the chain
  EXPECT_EQ(*p->Victim(), 2u);
  p->Erase(2);
  p->Update(1, Children(0));  // a leaf again: rejoins LRU as most recent
  EXPECT_EQ(*p->Victim(), 3u);
  p->Erase(3);
  EXPECT_EQ(*p->Victim(), 1u);
  p->Erase(1);
  p->Update(0, Children(0));
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{0}));
}

TEST(LeafFirstTest, ParentsOfPinnedLeavesAreNoVictims) {
  auto p = NewLeafFirst(NewLruPolicy());
  p->Insert(0, Children(1));
  p->Insert(1, Meta(/*pinned=*/true));
  EXPECT_FALSE(p->Victim().has_value());
  p->Touch(0, Children(1));  // a hit on a parent does not make it a candidate
  EXPECT_FALSE(p->Victim().has_value());
  p->Update(1, Meta(false));
  EXPECT_EQ(*p->Victim(), 1u);
}

// Random prefix forests under every leaf-first policy: a victim is always
// an unpinned leaf, and there is one whenever an unpinned leaf exists.
class LeafFirstRandomTest : public ::testing::TestWithParam<std::string_view> {};

TEST_P(LeafFirstRandomTest, VictimIsAnUnpinnedLeafWhileOneExists) {
  ManualClock clock;
  auto made = NewPolicy(GetParam(), clock);
  ASSERT_TRUE(made.ok());
  EvictionPolicy& p = **made;
  constexpr BlockId kIds = 64;
  std::mt19937 rng(3);
  // Block i's parent is i / 2 (0 is a root); a block enters only after its
  // parent, as in the engine, and its parent's count follows.
  std::vector<bool> tracked(kIds, false), pinned(kIds, false);
  std::vector<uint32_t> children(kIds, 0);
  auto meta = [&](BlockId id) {
    BlockMeta m = Children(children[id], pinned[id]);
    m.priority = static_cast<uint8_t>(id % 101);
    return m;
  };
  auto set_children = [&](BlockId id, int delta) {
    if (id == 0) return;
    const BlockId parent = id / 2;
    children[parent] = static_cast<uint32_t>(static_cast<int>(children[parent]) + delta);
    p.Update(parent, meta(parent));
  };
  for (int step = 0; step < 20'000; ++step) {
    const BlockId id = static_cast<BlockId>(rng() % kIds);
    switch (rng() % 4) {
      case 0:
        if (!tracked[id] && (id == 0 || tracked[id / 2])) {
          tracked[id] = true;
          pinned[id] = rng() % 4 == 0;
          p.Insert(id, meta(id));
          set_children(id, +1);
        }
        break;
      case 1:
        if (tracked[id]) {
          pinned[id] = rng() % 4 == 0;
          p.Touch(id, meta(id));
        }
        break;
      default: {
        clock.Advance(kNsPerMs);
        const auto v = p.Victim();
        bool any = false;
        for (BlockId b = 0; b < kIds; ++b) any = any || (tracked[b] && !pinned[b] && !children[b]);
        ASSERT_EQ(v.has_value(), any) << "step " << step;
        if (!v) break;
        ASSERT_TRUE(tracked[*v] && !pinned[*v]);
        ASSERT_EQ(children[*v], 0u) << "parent " << *v << " named at step " << step;
        p.Erase(*v);
        tracked[*v] = false;
        set_children(*v, -1);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LeafPolicies, LeafFirstRandomTest,
                         ::testing::Values("leaf-lru", "leaf-lfu", "leaf-s3fifo", "leaf-priority"),
                         [](const auto& p) {
                           std::string name(p.param);
                           return name.substr(name.find('-') + 1);
                         });

}  // namespace
}  // namespace kvtier::eviction

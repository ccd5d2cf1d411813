#include <gtest/gtest.h>

#include "eviction/eviction_policy.h"
#include "policy_test_util.h"

namespace kvtier::eviction {
namespace {

using testing::Drain;
using testing::Meta;

TEST(LruPolicyTest, EvictsInInsertionOrderWithoutAccesses) {
  auto p = NewLruPolicy();
  for (BlockId id : {4u, 1u, 3u, 2u}) p->Insert(id, Meta());
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{4, 1, 3, 2}));
}

TEST(LruPolicyTest, TouchMakesABlockMostRecent) {
  auto p = NewLruPolicy();
  for (BlockId id = 0; id < 4; ++id) p->Insert(id, Meta());
  p->Touch(0, Meta());
  p->Touch(2, Meta());
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{1, 3, 0, 2}));
}

TEST(LruPolicyTest, UnpinnedBlockReturnsAsMostRecent) {
  auto p = NewLruPolicy();
  for (BlockId id = 0; id < 3; ++id) p->Insert(id, Meta());
  p->Update(0, Meta(true));  // pinned: out of the running
  EXPECT_EQ(*p->Victim(), 1u);
  p->Update(0, Meta(false));  // a pin is a use
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{1, 2, 0}));
}

TEST(LruPolicyTest, UpdateWithoutPinChangeKeepsOrder) {
  auto p = NewLruPolicy();
  for (BlockId id = 0; id < 3; ++id) p->Insert(id, Meta());
  BlockMeta m = Meta();
  m.children_in_tier = 2;
  p->Update(0, m);  // metadata changes that LRU ignores do not reorder
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{0, 1, 2}));
}

}  // namespace
}  // namespace kvtier::eviction

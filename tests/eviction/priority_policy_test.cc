#include <gtest/gtest.h>

#include <vector>

#include "eviction/eviction_policy.h"
#include "policy_test_util.h"

namespace kvtier::eviction {
namespace {

using testing::Drain;
using testing::Meta;

BlockMeta Prio(uint8_t priority, TimeNs expires_at = kNoExpiry, bool pinned = false) {
  BlockMeta m = Meta(pinned);
  m.priority = priority;
  m.priority_expires_at = expires_at;
  return m;
}

class PriorityPolicyTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  std::unique_ptr<EvictionPolicy> p_ = NewPriorityPolicy(clock_);
};

TEST_F(PriorityPolicyTest, LowestPriorityGoesFirst) {
  p_->Insert(0, Prio(90));
  p_->Insert(1, Prio(10));
  p_->Insert(2, Prio(35));
  p_->Insert(3, Prio(100));
  p_->Insert(4, Prio(0));
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{4, 1, 2, 0, 3}));
}

TEST_F(PriorityPolicyTest, LeastRecentlyUsedFirstWithinAPriority) {
  for (BlockId id = 0; id < 4; ++id) p_->Insert(id, Prio(50));
  p_->Insert(4, Prio(20));
  p_->Touch(0, Prio(50));
  p_->Touch(4, Prio(20));  // a touch does not lift a low priority
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{4, 1, 2, 3, 0}));
}

TEST_F(PriorityPolicyTest, ExpiredPriorityFallsBackToTheDefault) {
  const TimeNs soon = 5 * kNsPerSec;
  p_->Insert(0, Prio(90, soon));  // high for five seconds
  p_->Insert(1, Prio(10, soon));  // low for five seconds
  p_->Insert(2, Prio(50));        // no expiry
  p_->Insert(3, Prio(35));
  EXPECT_EQ(*p_->Victim(), 1u);
  clock_.Advance(soon);
  // 0 and 1 now count 35, joining 3's level after it (most recent end), in
  // the order they expired (same time: by id); 2 keeps its 50.
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{3, 0, 1, 2}));
}

TEST_F(PriorityPolicyTest, AlreadyExpiredPriorityCountsAsDefault) {
  clock_.Advance(kNsPerSec);
  p_->Insert(0, Prio(10, kNsPerSec));  // expired on arrival
  p_->Insert(1, Prio(20));
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{1, 0}));
}

TEST_F(PriorityPolicyTest, UpdateMovesABlockToItsNewPriority) {
  p_->Insert(0, Prio(50));
  p_->Insert(1, Prio(50));
  p_->Insert(2, Prio(60));
  p_->Update(0, Prio(70));                 // raised: 1 then 2 go before it
  p_->Update(1, Prio(50, 3 * kNsPerSec));  // same level: keeps its place
  EXPECT_EQ(*p_->Victim(), 1u);
  clock_.Advance(3 * kNsPerSec);
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{1, 2, 0}));
}

TEST_F(PriorityPolicyTest, ExpiryOfAPinnedBlockAppliesWhenUnpinned) {
  p_->Insert(0, Prio(90, kNsPerSec, /*pinned=*/true));
  p_->Insert(1, Prio(60));
  clock_.Advance(2 * kNsPerSec);
  EXPECT_EQ(*p_->Victim(), 1u);
  p_->Update(0, Prio(90, kNsPerSec));  // unpinned after its priority expired
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{0, 1}));
}

TEST_F(PriorityPolicyTest, RemovingAnExpiryKeepsThePriority) {
  p_->Insert(0, Prio(80, kNsPerSec));
  p_->Insert(1, Prio(60));
  p_->Update(0, Prio(80));  // the duration was lifted
  clock_.Advance(2 * kNsPerSec);
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{1, 0}));
}

}  // namespace
}  // namespace kvtier::eviction

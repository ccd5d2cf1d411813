#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "eviction/eviction_policy.h"
#include "policy_test_util.h"

namespace kvtier::eviction {
namespace {

using testing::Drain;
using testing::Meta;

constexpr TimeNs kHalfLife = 10 * kNsPerSec;

class LfuPolicyTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  std::unique_ptr<EvictionPolicy> p_ = NewLfuPolicy(clock_, LfuOptions{.half_life = kHalfLife});
};

TEST_F(LfuPolicyTest, KeepsAHotBlockOverNewerColdOnes) {
  p_->Insert(0, Meta());
  for (int i = 0; i < 4; ++i) p_->Touch(0, Meta());
  clock_.Advance(kNsPerSec);  // a tenth of a half-life: heat mostly kept
  for (BlockId id = 1; id <= 3; ++id) p_->Insert(id, Meta());
  // LRU would evict 0 first; LFU evicts the cold ones, oldest first.
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{1, 2, 3, 0}));
}

TEST_F(LfuPolicyTest, ForgetsOldHeatAfterAging) {
  p_->Insert(0, Meta());
  for (int i = 0; i < 7; ++i) p_->Touch(0, Meta());  // count 8
  clock_.Advance(4 * kHalfLife);                     // decays to 8/16
  p_->Insert(1, Meta());                             // count 1
  EXPECT_EQ(*p_->Victim(), 0u);
  // Heat can be regained: two touches now give 0.5 + 2 > 1.
  p_->Touch(0, Meta());
  p_->Touch(0, Meta());
  EXPECT_EQ(*p_->Victim(), 1u);
}

TEST_F(LfuPolicyTest, EqualCountsGoLeastRecentlyUsedFirst) {
  for (BlockId id = 0; id < 4; ++id) p_->Insert(id, Meta());
  p_->Touch(2, Meta());
  p_->Touch(0, Meta());
  // Counts 2,1,2,1 at the same instant: 1 and 3 by insertion, then 2, 0.
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{1, 3, 2, 0}));
}

TEST_F(LfuPolicyTest, PinnedKeepsItsCountAndComesBack) {
  p_->Insert(0, Meta());
  p_->Touch(0, Meta(/*pinned=*/true));  // count 2, pinned
  p_->Insert(1, Meta());
  EXPECT_EQ(*p_->Victim(), 1u);
  p_->Insert(2, Meta());
  p_->Update(0, Meta(false));
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{1, 2, 0}));
}

// The weights are rescaled every 256 half-lives; the order survives it.
TEST_F(LfuPolicyTest, OrderSurvivesRescaling) {
  p_->Insert(0, Meta());
  p_->Insert(1, Meta());
  p_->Touch(1, Meta());
  for (int step = 0; step < 3; ++step) {
    clock_.Advance(200 * kHalfLife);
    p_->Touch(1, Meta());
    p_->Touch(1, Meta());
  }
  p_->Insert(2, Meta());
  p_->Insert(3, Meta());
  p_->Touch(3, Meta());
  // 0 is ancient; 2 has count 1, 1 has 2, 3 has 2 but is more recent.
  EXPECT_EQ(Drain(*p_), (std::vector<BlockId>{0, 2, 1, 3}));
}

// Against a direct computation of every decayed count: the victim's count
// is the smallest (to rounding).
TEST(LfuPolicyModelTest, VictimHasTheLowestDecayedCount) {
  ManualClock clock;
  auto p = NewLfuPolicy(clock, LfuOptions{.half_life = kNsPerSec});
  std::mt19937 rng(11);
  constexpr BlockId kIds = 200;
  std::vector<std::vector<TimeNs>> accesses(kIds);
  std::vector<bool> tracked(kIds, false);
  auto count = [&](BlockId id) {
    double c = 0;
    for (TimeNs t : accesses[id]) {
      c += std::exp2(-static_cast<double>(clock.Now() - t) / static_cast<double>(kNsPerSec));
    }
    return c;
  };
  for (int step = 0; step < 20'000; ++step) {
    const BlockId id = static_cast<BlockId>(rng() % kIds);
    switch (rng() % 4) {
      case 0:
        if (!tracked[id]) {
          p->Insert(id, Meta());
          tracked[id] = true;
          accesses[id] = {clock.Now()};
        }
        break;
      case 1:
        if (tracked[id]) {
          p->Touch(id, Meta());
          accesses[id].push_back(clock.Now());
        }
        break;
      case 2:
        clock.Advance(static_cast<TimeNs>(rng() % (kNsPerSec / 2)));
        break;
      default:
        if (auto v = p->Victim()) {
          ASSERT_TRUE(tracked[*v]);
          const double victim = count(*v);
          for (BlockId o = 0; o < kIds; ++o) {
            if (tracked[o]) {
              ASSERT_LE(victim, count(o) * (1 + 1e-9)) << "step " << step;
            }
          }
          p->Erase(*v);
          tracked[*v] = false;
        }
    }
  }
}

}  // namespace
}  // namespace kvtier::eviction

#include "common/spin_governor.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

constexpr int64_t kWindow = SpinGovernor::kWindowNs;

// A governor fed by hand: each Step() is one window in which the thread
// waited `fraction` of the time to be run.
class Fed {
 public:
  Fed() : governor_([] { return SpinGovernor::Sample{0, 0}; }) {}
  void Step(double fraction) {
    wall_ += kWindow;
    delay_ += static_cast<int64_t>(fraction * static_cast<double>(kWindow));
    governor_.Observe({wall_, delay_});
  }
  SpinGovernor& governor() { return governor_; }

 private:
  SpinGovernor governor_;
  int64_t wall_ = 0;
  int64_t delay_ = 0;
};

TEST(SpinGovernorTest, SpinsWhileTheThreadIsRunAtOnce) {
  Fed fed;
  for (int i = 0; i < 50; ++i) fed.Step(0.002);
  EXPECT_TRUE(fed.governor().spinning());
  EXPECT_EQ(fed.governor().backoffs(), 0u);
}

TEST(SpinGovernorTest, StopsSpinningWhenTheThreadWaitsForItsCore) {
  Fed fed;
  fed.Step(0.0);
  fed.Step(0.30);  // a third of the window runnable but not run
  EXPECT_FALSE(fed.governor().spinning());
  EXPECT_EQ(fed.governor().backoffs(), 1u);
  // Still shared (the wait is smaller once it no longer spins): stays off.
  for (int i = 0; i < 30; ++i) fed.Step(0.02);
  EXPECT_FALSE(fed.governor().spinning());
  EXPECT_EQ(fed.governor().backoffs(), 1u);
}

TEST(SpinGovernorTest, SpinsAgainOnlyAfterASecondOfQuiet) {
  Fed fed;
  fed.Step(0.5);
  ASSERT_FALSE(fed.governor().spinning());
  const int windows_per_hold = static_cast<int>(SpinGovernor::kHoldNs / kWindow);
  for (int i = 0; i < windows_per_hold - 1; ++i) {
    fed.Step(0.0);
    EXPECT_FALSE(fed.governor().spinning()) << "window " << i;
  }
  fed.Step(0.02);  // one busy window restarts the hold
  for (int i = 0; i < windows_per_hold - 1; ++i) fed.Step(0.0);
  EXPECT_FALSE(fed.governor().spinning());
  fed.Step(0.0);
  EXPECT_TRUE(fed.governor().spinning());
}

TEST(SpinGovernorTest, ReadingsCloserThanAWindowAreIgnored) {
  SpinGovernor g([] { return SpinGovernor::Sample{0, 0}; });
  g.Observe({kWindow / 2, kWindow / 2});  // would read as 100 % waited
  EXPECT_TRUE(g.spinning());
}

}  // namespace
}  // namespace kvtier

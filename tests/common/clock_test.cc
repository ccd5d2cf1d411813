#include "common/clock.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(ClockTest, SystemClockIsMonotonic) {
  const Clock& c = SystemClock();
  TimeNs prev = c.Now();
  for (int i = 0; i < 1000; ++i) {
    const TimeNs now = c.Now();
    EXPECT_GE(now, prev);
    prev = now;
  }
}

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock c(100);
  EXPECT_EQ(c.Now(), 100);
  EXPECT_EQ(c.Now(), 100);
  c.Advance(5 * kNsPerSec);
  EXPECT_EQ(c.Now(), 100 + 5 * kNsPerSec);
}

}  // namespace
}  // namespace kvtier

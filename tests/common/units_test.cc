#include "common/units.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(UnitsTest, ParsesPlainAndUnitBytes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64MiB"), 64 * kMiB);
  EXPECT_EQ(*ParseBytes("64 MiB"), 64 * kMiB);
  EXPECT_EQ(*ParseBytes("1.5GiB"), 3 * kGiB / 2);
  EXPECT_EQ(*ParseBytes("2GB"), 2'000'000'000u);
  EXPECT_EQ(*ParseBytes("512K"), 512 * kKiB);
  EXPECT_EQ(*ParseBytes("0"), 0u);
}

TEST(UnitsTest, RejectsWhatIsNotAByteCount) {
  for (const char* bad : {"", "MiB", "12 parsecs", "1..2GiB", "-5", "1e999", "99999999999TiB"}) {
    EXPECT_EQ(ParseBytes(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(UnitsTest, FormatsWithThreeSignificantDigits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(kGiB), "1.00 GiB");
  EXPECT_EQ(FormatBytes(64 * kMiB), "64.0 MiB");
  EXPECT_EQ(FormatBytes(300 * kMiB), "300 MiB");
}

}  // namespace
}  // namespace kvtier

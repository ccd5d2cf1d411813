#include "common/hash.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

// The first outputs of the splitmix64 stream seeded with 0, as published
// with the reference implementation (Vigna, prng.di.unimi.it/splitmix64.c).
TEST(HashTest, SplitMix64MatchesTheReferenceStream) {
  uint64_t state = 0;
  EXPECT_EQ(SplitMix64(&state), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(SplitMix64(&state), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(SplitMix64(&state), 0x06c45d188009454fULL);
  EXPECT_EQ(state, 3 * kGoldenGamma);
}

TEST(HashTest, Mix64SpreadsOneBitOverTheWord) {
  static_assert(Mix64(0) == 0);  // the finalizer alone fixes 0
  for (int bit = 0; bit < 64; ++bit) {
    const uint64_t flipped = Mix64(uint64_t{1} << bit) ^ Mix64(0);
    EXPECT_GT(__builtin_popcountll(flipped), 16) << bit;
    EXPECT_LT(__builtin_popcountll(flipped), 48) << bit;
  }
}

}  // namespace
}  // namespace kvtier

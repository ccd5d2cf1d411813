// The host's fp16/bf16 converters, against known bit patterns and, for every
// one of the 65536 inputs, the round-to-nearest-even rule itself; and the
// kernels' fast division, against the / and % operators.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kernels/internal/chunks.h"
#include "kernels/kernels.h"

namespace kvtier::kernels {
namespace {

float Bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(HalfTest, KnownPatterns) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.5f), 0x3800);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);    // largest finite
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);  // just below the tie
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);    // tie -> even = inf
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);             // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);             // tie -> even = 0
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);             // above the tie
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);             // 1.5 ulp tie -> even 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even
  EXPECT_EQ(FloatToHalf(Bits(0x3f800001)), 0x3c00);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(FloatToHalf(3.14159265f), 0x4248);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(FloatToHalf(Bits(0x7f800001)) & 0x7e00, 0x7e00);  // signaling -> quiet

  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(std::bit_cast<uint32_t>(HalfToFloat(0x8000)), 0x80000000u);
}

TEST(HalfTest, EveryHalfRoundTripsAndEveryMidpointTiesToEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = HalfToFloat(bits);
    if (std::isnan(f)) {
      EXPECT_EQ(FloatToHalf(f), bits | 0x0200) << h;  // quieted, payload kept
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), bits) << h;
    // Between this half and the next one up in magnitude (finite ones only).
    if ((h & 0x7fff) >= 0x7bff) continue;
    const float next = HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = (f + next) / 2;  // exact: fp32 has 13 more bits
    const uint16_t even = (h & 1) == 0 ? bits : static_cast<uint16_t>(h + 1);
    ASSERT_EQ(FloatToHalf(mid), even) << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, f)), bits) << h;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, next)), static_cast<uint16_t>(h + 1)) << h;
  }
}

TEST(BFloat16Test, KnownPatterns) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(Bits(0x3f808001)), 0x3f81);                 // above the tie
  EXPECT_EQ(FloatToBFloat16(3.14159265f), 0x4049);
  EXPECT_EQ(FloatToBFloat16(Bits(0x7f7fffff)), 0x7f80);  // rounds up into inf
  EXPECT_EQ(FloatToBFloat16(Bits(0x7f7f7fff)), 0x7f7f);  // largest finite stays
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(Bits(0x00000001)), 0x0000);  // fp32 subnormal -> 0
  EXPECT_EQ(FloatToBFloat16(Bits(0x7f800001)), 0x7fc0);  // signaling NaN -> quiet
  EXPECT_EQ(FloatToBFloat16(Bits(0xffc00000)), 0xffc0);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0x0001), Bits(0x00010000));
}

TEST(BFloat16Test, EveryBFloat16RoundTripsAndEveryMidpointTiesToEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = BFloat16ToFloat(bits);
    if (std::isnan(f)) {
      EXPECT_EQ(FloatToBFloat16(f), bits | 0x0040) << h;
      continue;
    }
    ASSERT_EQ(FloatToBFloat16(f), bits) << h;
    if ((h & 0x7fff) >= 0x7f7f) continue;
    const float next = BFloat16ToFloat(static_cast<uint16_t>(h + 1));
    // Adjacent in magnitude, so the midpoint's bits are the mean of theirs.
    const float mid = Bits(static_cast<uint32_t>(
        (uint64_t{std::bit_cast<uint32_t>(f)} + std::bit_cast<uint32_t>(next)) / 2));
    const uint16_t even = (h & 1) == 0 ? bits : static_cast<uint16_t>(h + 1);
    ASSERT_EQ(FloatToBFloat16(mid), even) << h;
    ASSERT_EQ(FloatToBFloat16(std::nextafter(mid, f)), bits) << h;
    ASSERT_EQ(FloatToBFloat16(std::nextafter(mid, next)), static_cast<uint16_t>(h + 1)) << h;
  }
}

TEST(FastDivmodTest, MatchesDivisionAndRemainder) {
  std::mt19937 rng(3);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (uint32_t d : {4095u, 4096u, 4097u, 65535u, 65536u, 1000003u, 0x40000000u, 0x7fffffffu}) {
    divisors.push_back(d);
  }
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % 0x7fffffffu));
  for (uint32_t d : divisors) {
    const internal::FastDivmod fd(d);
    auto check = [&](uint32_t n) {
      uint32_t q = 0;
      uint32_t r = 0;
      fd.DivMod(n, &q, &r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    };
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 0x7fffffffu, 0x7ffffffeu}) {
      if (n <= 0x7fffffffu) check(n);
    }
    for (int i = 0; i < 2000; ++i) check(static_cast<uint32_t>(rng() % 0x80000000u));
  }
}

}  // namespace
}  // namespace kvtier::kernels

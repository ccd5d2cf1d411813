// common/fp8.h: the two fp8 formats bit for bit, and the block codecs —
// round trips within the formats' bound, the vector code equal to the
// scalar code byte for byte, and bad blocks refused.
#include "common/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/half.h"

namespace kvtier {
namespace {

constexpr DType kFormats[] = {DType::kFp8E4M3, DType::kFp8E5M2};

// The nearest code by brute force over all finite codes; a tie goes to the
// even code (its lowest mantissa bit clear), as IEEE rounding does.
uint8_t Nearest(float v, DType t) {
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < 256; ++c) {
    const float d = Fp8ToFloat(static_cast<uint8_t>(c), t);
    if (!std::isfinite(d) || std::signbit(d) != std::signbit(v)) continue;
    const double err = std::fabs(static_cast<double>(d) - v);
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8Test, KnownValuesOfBothFormats) {
  const DType e4 = DType::kFp8E4M3, e5 = DType::kFp8E5M2;
  EXPECT_EQ(FloatToFp8(1.0f, e4), 0x38);
  EXPECT_EQ(FloatToFp8(-1.0f, e4), 0xb8);
  EXPECT_EQ(FloatToFp8(448.0f, e4), 0x7e);
  EXPECT_EQ(FloatToFp8(1e9f, e4), 0x7e);  // saturated, as __NV_SATFINITE
  EXPECT_EQ(FloatToFp8(-INFINITY, e4), 0xfe);
  EXPECT_EQ(FloatToFp8(NAN, e4) & 0x7f, 0x7f);
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0f, -9), e4), 0x01);   // smallest subnormal
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0f, -10), e4), 0x00);  // a tie: to even, zero
  EXPECT_EQ(FloatToFp8(std::ldexp(3.0f, -10), e4), 0x02);  // a tie: to even, two
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0f, -6), e4), 0x08);   // smallest normal
  EXPECT_EQ(FloatToFp8(-0.0f, e4), 0x80);
  EXPECT_EQ(FloatToFp8(1.0f, e5), 0x3c);
  EXPECT_EQ(FloatToFp8(57344.0f, e5), 0x7b);
  EXPECT_EQ(FloatToFp8(1e9f, e5), 0x7b);
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0f, -16), e5), 0x01);
  EXPECT_EQ(Fp8MaxFinite(e4), 448.0f);
  EXPECT_EQ(Fp8MaxFinite(e5), 57344.0f);
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7f, e4)));
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0xff, e4)));
  EXPECT_EQ(Fp8ToFloat(0x7c, e5), INFINITY);
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7d, e5)));
  EXPECT_EQ(Fp8ToFloat(0x7e, e4), 448.0f);
  EXPECT_EQ(Fp8ToFloat(0x01, e4), std::ldexp(1.0f, -9));
}

TEST(Fp8Test, EveryFiniteCodeRoundTripsAndValuesRoundToTheNearest) {
  std::mt19937 rng(7);
  for (DType t : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float v = Fp8ToFloat(static_cast<uint8_t>(c), t);
      if (std::isfinite(v)) {
        EXPECT_EQ(FloatToFp8(v, t), c) << DTypeName(t) << " " << c;
      }
    }
    // Random magnitudes over the whole range, and every midpoint (a tie).
    std::uniform_real_distribution<float> exponent(-20.0f, 17.0f);
    for (int i = 0; i < 20000; ++i) {
      const float v = std::exp2(exponent(rng)) * ((rng() & 1) != 0 ? -1.0f : 1.0f);
      if (std::fabs(v) >= Fp8MaxFinite(t)) continue;
      ASSERT_EQ(FloatToFp8(v, t), Nearest(v, t)) << DTypeName(t) << " " << v;
    }
    for (int c = 0; c < 0x7f; ++c) {
      const float lo = Fp8ToFloat(static_cast<uint8_t>(c), t);
      const float hi = Fp8ToFloat(static_cast<uint8_t>(c + 1), t);
      if (!std::isfinite(hi)) break;
      const float mid = (lo + hi) / 2;  // exact: one more bit than the format
      EXPECT_EQ(FloatToFp8(mid, t), (c & 1) == 0 ? c : c + 1) << DTypeName(t) << " " << c;
    }
  }
}

TEST(Fp8Test, AnFp8LayoutCarriesItsScales) {
  const Layout fp16{4, 8, 128, DType::kFloat16, 16};
  const Layout fp8 = Fp8LayoutOf(fp16, DType::kFp8E4M3);
  EXPECT_EQ(fp8.ValueBytes(), fp16.ValueBytes() / 2);
  EXPECT_EQ(fp8.ScaleBytes(), 2u * 4 * 8 * 4);
  EXPECT_EQ(fp8.BlockBytes(), fp8.ValueBytes() + fp8.ScaleBytes());
  EXPECT_EQ(fp16.ScaleBytes(), 0u);
  EXPECT_EQ(fp16.BlockBytes(), fp16.ValueBytes());
}

// A block of `layout` (fp16 or bf16) whose slices have very different
// magnitudes (per-head scales matter), with subnormal-range values too.
std::vector<std::byte> RandomBlock(const Layout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = layout.ValueBytes() / 2;
  std::vector<std::byte> block(layout.BlockBytes());
  for (size_t i = 0; i < n; ++i) {
    const size_t head = (i / layout.head_dim) % layout.kv_heads;
    const float magnitude = std::ldexp(1.0f, static_cast<int>(head % 5) * 3 - 6);
    float v = normal(rng) * magnitude;
    if (i % 97 == 0) v *= 1e-4f;  // near the bottom of the slice's range
    const uint16_t bits = layout.dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
    std::memcpy(block.data() + 2 * i, &bits, 2);
  }
  return block;
}

float Widen(const std::vector<std::byte>& b, size_t i, DType t) {
  uint16_t bits;
  std::memcpy(&bits, b.data() + 2 * i, 2);
  return t == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}

TEST(Fp8Test, ABlockComesBackWithinTheFormatsBound) {
  for (DType wide : {DType::kFloat16, DType::kBFloat16}) {
    for (DType t : kFormats) {
      const Layout layout{3, 6, 72, wide, 16};  // 72: rows end in a partial vector
      const std::vector<std::byte> in = RandomBlock(layout, 11);
      std::vector<std::byte> q(Fp8LayoutOf(layout, t).BlockBytes());
      std::vector<std::byte> back(layout.BlockBytes());
      ASSERT_TRUE(QuantizeBlock(layout, t, in, q).ok());
      ASSERT_TRUE(DequantizeBlock(Fp8LayoutOf(layout, t), wide, q, back).ok());
      // Per element: half a step of the fp8 grid relative to the value
      // (2^-4 for e4m3's 3 mantissa bits, 2^-3 for e5m2's 2), or half the
      // smallest subnormal step of the slice's scale below the normal range,
      // plus the rounding to the 16-bit type on the way back (relative, or
      // half of fp16's smallest subnormal step in its subnormal range).
      const int man = t == DType::kFp8E4M3 ? 3 : 2;
      const int min_exp = t == DType::kFp8E4M3 ? -6 : -14;
      const double narrow_rel =
          wide == DType::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const double narrow_abs = wide == DType::kFloat16 ? std::ldexp(1.0, -25) : 0;
      const size_t per_row = layout.head_dim;
      double worst = 0;
      for (size_t i = 0; i < layout.ValueBytes() / 2; ++i) {
        const size_t row = i / per_row;
        const size_t head = row % layout.kv_heads;
        const size_t slice = row / (layout.kv_heads * layout.block_tokens);
        float scale;
        std::memcpy(
            &scale,
            q.data() + Fp8LayoutOf(layout, t).ValueBytes() + 4 * (slice * layout.kv_heads + head),
            4);
        const double x = Widen(in, i, wide), y = Widen(back, i, wide);
        const double bound = std::fabs(x) * (std::ldexp(1.0, -(man + 1)) + narrow_rel) +
                             scale * std::ldexp(1.0, min_exp - man - 1) * (1 + narrow_rel) +
                             narrow_abs;
        ASSERT_LE(std::fabs(y - x), bound) << DTypeName(wide) << "->" << DTypeName(t) << " " << i;
        // In the format's normal range the error is relative, at most half a step.
        if (std::fabs(x) >= scale * std::ldexp(1.0, min_exp) && std::fabs(x) > 1e-4) {
          worst = std::max(worst, std::fabs(y - x) / std::fabs(x));
        }
      }
      EXPECT_LE(worst, std::ldexp(1.0, -(man + 1)) + narrow_rel);
    }
  }
}

TEST(Fp8Test, TheVectorCodeGivesTheScalarCodesBytes) {
  if (std::string(Fp8CodecPath()) == "scalar") GTEST_SKIP() << "this CPU has no AVX2 and F16C";
  for (DType wide : {DType::kFloat16, DType::kBFloat16}) {
    for (DType t : kFormats) {
      for (uint32_t head_dim : {8u, 13u, 64u, 128u}) {
        const Layout layout{2, 4, head_dim, wide, 16};
        const std::vector<std::byte> in = RandomBlock(layout, head_dim);
        const Layout fp8 = Fp8LayoutOf(layout, t);
        std::vector<std::byte> vq(fp8.BlockBytes()), sq(fp8.BlockBytes());
        std::vector<std::byte> vb(layout.BlockBytes()), sb(layout.BlockBytes());
        ASSERT_TRUE(QuantizeBlock(layout, t, in, vq).ok());
        ASSERT_TRUE(DequantizeBlock(fp8, wide, vq, vb).ok());
        SetFp8CodecScalarForTesting(true);
        ASSERT_TRUE(QuantizeBlock(layout, t, in, sq).ok());
        ASSERT_TRUE(DequantizeBlock(fp8, wide, sq, sb).ok());
        SetFp8CodecScalarForTesting(false);
        EXPECT_EQ(vq, sq) << DTypeName(wide) << " " << DTypeName(t) << " d=" << head_dim;
        EXPECT_EQ(vb, sb) << DTypeName(wide) << " " << DTypeName(t) << " d=" << head_dim;
      }
    }
  }
}

TEST(Fp8Test, NanAndInfinityAreRefusedNamingTheSlice) {
  for (bool scalar : {false, true}) {
    SetFp8CodecScalarForTesting(scalar);
    const Layout layout{2, 4, 64, DType::kFloat16, 16};
    for (uint16_t poison : {uint16_t{0x7c00}, uint16_t{0xfc00}, uint16_t{0x7e00}}) {
      std::vector<std::byte> in = RandomBlock(layout, 3);
      // Layer 1, V, token 5, head 2, dim 17.
      const size_t at = ((((1 * 2 + 1) * 16 + 5) * 4 + 2) * 64 + 17);
      std::memcpy(in.data() + 2 * at, &poison, 2);
      std::vector<std::byte> q(Fp8LayoutOf(layout, DType::kFp8E4M3).BlockBytes());
      const Status s = QuantizeBlock(layout, DType::kFp8E4M3, in, q);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("layer 1 V head 2"), std::string::npos) << s.ToString();
    }
    // An fp8 block with a NaN code, or a scale that is not positive and finite.
    const Layout fp8 = Fp8LayoutOf(layout, DType::kFp8E5M2);
    std::vector<std::byte> q(fp8.BlockBytes());
    ASSERT_TRUE(QuantizeBlock(layout, DType::kFp8E5M2, RandomBlock(layout, 4), q).ok());
    std::vector<std::byte> back(layout.BlockBytes());
    std::vector<std::byte> nan_code = q;
    nan_code[100] = std::byte{0x7e};
    EXPECT_EQ(DequantizeBlock(fp8, DType::kFloat16, nan_code, back).code(),
              StatusCode::kInvalidArgument);
    for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
      std::vector<std::byte> bad_scale = q;
      std::memcpy(bad_scale.data() + fp8.ValueBytes() + 4 * 5, &bad, 4);
      const Status s = DequantizeBlock(fp8, DType::kFloat16, bad_scale, back);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find("scale of layer 0 V head 1"), std::string::npos) << s.ToString();
    }
    // Wrong sizes and dtypes.
    EXPECT_EQ(QuantizeBlock(layout, DType::kFp8E4M3, RandomBlock(layout, 5),
                            std::span(q).first(q.size() - 1))
                  .code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(QuantizeBlock(fp8, DType::kFp8E4M3, q, q).code(), StatusCode::kInvalidArgument);
    SetFp8CodecScalarForTesting(false);
  }
}

TEST(Fp8Test, AnAllZeroSliceKeepsScaleOneAndComesBackZero) {
  const Layout layout{1, 2, 16, DType::kBFloat16, 4};
  std::vector<std::byte> in(layout.BlockBytes());
  const Layout fp8 = Fp8LayoutOf(layout, DType::kFp8E4M3);
  std::vector<std::byte> q(fp8.BlockBytes()), back(layout.BlockBytes(), std::byte{0xff});
  ASSERT_TRUE(QuantizeBlock(layout, DType::kFp8E4M3, in, q).ok());
  float scale;
  std::memcpy(&scale, q.data() + fp8.ValueBytes(), 4);
  EXPECT_EQ(scale, 1.0f);
  ASSERT_TRUE(DequantizeBlock(fp8, DType::kBFloat16, q, back).ok());
  EXPECT_EQ(back, in);
}

// An MLA latent block: one plane per layer, so one scale per layer, each
// the amax of that layer's latents; the bytes are those of a K/V layout of
// half the layers, whose planes sit where the latent layers do.
TEST(Fp8Test, ALatentBlockHasAScalePerLayerAndRoundTrips) {
  for (bool scalar : {false, true}) {
    SetFp8CodecScalarForTesting(scalar);
    for (DType wide : {DType::kFloat16, DType::kBFloat16}) {
      const Layout latent{4, 1, 576, wide, 16, KvKind::kLatent};  // 512 + 64 rope dims
      const Layout fp8 = Fp8LayoutOf(latent, DType::kFp8E4M3);
      EXPECT_EQ(fp8.kind, KvKind::kLatent);
      EXPECT_EQ(fp8.ScaleBytes(), 4u * 4);
      EXPECT_EQ(fp8.BlockBytes(), 4u * 16 * 576 + 4 * 4);
      ASSERT_TRUE(CheckQuantize(latent, Quantize::kFp8E4M3).ok());
      EXPECT_EQ(StoredLayout(latent, Quantize::kFp8E4M3), fp8);

      const std::vector<std::byte> in = RandomBlock(latent, 21);
      std::vector<std::byte> q(fp8.BlockBytes()), back(latent.BlockBytes());
      ASSERT_TRUE(QuantizeBlock(latent, DType::kFp8E4M3, in, q).ok());
      const size_t per_layer = size_t{16} * 576;
      for (size_t layer = 0; layer < 4; ++layer) {
        float amax = 0;
        for (size_t i = 0; i < per_layer; ++i) {
          amax = std::max(amax, std::fabs(Widen(in, layer * per_layer + i, wide)));
        }
        float scale;
        std::memcpy(&scale, q.data() + fp8.ValueBytes() + 4 * layer, 4);
        EXPECT_EQ(scale, amax / Fp8MaxFinite(DType::kFp8E4M3)) << layer;
      }
      ASSERT_TRUE(DequantizeBlock(fp8, wide, q, back).ok());
      const double narrow_rel =
          wide == DType::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      for (size_t i = 0; i < latent.ValueBytes() / 2; ++i) {
        float scale;
        std::memcpy(&scale, q.data() + fp8.ValueBytes() + 4 * (i / per_layer), 4);
        const double x = Widen(in, i, wide), y = Widen(back, i, wide);
        const double bound = std::fabs(x) * (std::ldexp(1.0, -4) + narrow_rel) +
                             scale * std::ldexp(1.0, -10) * (1 + narrow_rel) + std::ldexp(1.0, -25);
        ASSERT_LE(std::fabs(y - x), bound) << DTypeName(wide) << " " << i;
      }

      const Layout kv{2, 1, 576, wide, 16};
      ASSERT_EQ(kv.BlockBytes(), latent.BlockBytes());
      std::vector<std::byte> kv_q(Fp8LayoutOf(kv, DType::kFp8E4M3).BlockBytes());
      ASSERT_TRUE(QuantizeBlock(kv, DType::kFp8E4M3, in, kv_q).ok());
      EXPECT_EQ(kv_q, q);

      // A NaN is named by its layer, as a latent.
      std::vector<std::byte> poisoned = in;
      const uint16_t nan = wide == DType::kFloat16 ? 0x7e00 : 0x7fc0;
      std::memcpy(poisoned.data() + 2 * (2 * per_layer + 100), &nan, 2);
      const Status s = QuantizeBlock(latent, DType::kFp8E4M3, poisoned, q);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("layer 2 latent head 0"), std::string::npos) << s.ToString();
    }
    SetFp8CodecScalarForTesting(false);
  }
}

}  // namespace
}  // namespace kvtier

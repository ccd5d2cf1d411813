// Helpers of the quantize-on-demote tests: blocks of real-valued K/V (finite
// fp16 or bf16 values whose magnitude differs per slice, as activations'
// do), and the element-by-element bound a restored block must keep.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>

#include "common/fp8.h"
#include "common/half.h"
#include "common/layout.h"
#include "prefix_index/block_key.h"

namespace kvtier::engine::testing {

// 2 layers, 2 KV heads, head_dim 64, 16 tokens: 16 KiB in fp16/bf16, and
// 8 KiB + 32 bytes of scales in fp8 (a 12 KiB slot on the ssd).
inline Layout ValueLayout(DType dtype = DType::kFloat16) { return Layout{2, 2, 64, dtype, 16}; }

inline uint16_t ToBits(float v, DType dtype) {
  return dtype == DType::kBFloat16 ? FloatToBFloat16(v) : FloatToHalf(v);
}
inline float FromBits(uint16_t bits, DType dtype) {
  return dtype == DType::kBFloat16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
}

// The slice (layer * 2 + kv) * kv_heads + head of value `i` of a block.
inline uint64_t SliceOf(const Layout& l, uint64_t i) {
  const uint64_t per_token = uint64_t{l.kv_heads} * l.head_dim;
  const uint64_t layer_kv = i / (per_token * l.block_tokens);
  const uint64_t head = (i / l.head_dim) % l.kv_heads;
  return layer_kv * l.kv_heads + head;
}

// The values `key` stands for: normal, with a scale per slice from 2^-6 to
// 2^6, a few outliers, and exact zeros.
inline void FillValues(std::span<std::byte> bytes, const Layout& l, const BlockKey& key) {
  std::mt19937_64 rng(key.hi * 0x9e3779b97f4a7c15ULL ^ key.lo);
  std::normal_distribution<float> normal;
  const uint64_t n = l.ValueBytes() / 2;
  for (uint64_t i = 0; i < n; ++i) {
    const float slice_scale = std::ldexp(1.0f, static_cast<int>(SliceOf(l, i) % 13) - 6);
    float v = normal(rng) * slice_scale;
    if (i % 97 == 0) v *= 8;  // outliers
    if (i % 31 == 0) v = 0;
    const uint16_t bits = ToBits(v, l.dtype);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  }
}

// Whether `restored` is `original` (both of layout `l`) to within what
// keeping it in form `q` may cost each value x of a slice with largest
// magnitude amax (scale s = amax / the format's largest finite):
//   half a step of the fp8 format at x/s, times s: |x| 2^-(m+1), or s times
//   half the smallest subnormal step below the normal range;
//   plus half a step of the 16-bit dtype when the value is restored.
// Names the first value outside it.
inline ::testing::AssertionResult WithinFp8Bound(std::span<const std::byte> original,
                                                 std::span<const std::byte> restored,
                                                 const Layout& l, Quantize q) {
  const DType fp8 = StoredLayout(l, q).dtype;
  const int man = fp8 == DType::kFp8E4M3 ? 3 : 2;
  const int emin = fp8 == DType::kFp8E4M3 ? -6 : -14;
  const int man16 = l.dtype == DType::kBFloat16 ? 7 : 10;
  const uint64_t n = l.ValueBytes() / 2;
  std::vector<float> x(n), y(n);
  std::vector<float> amax(2ULL * l.layers * l.kv_heads, 0.0f);
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t a = 0, b = 0;
    std::memcpy(&a, original.data() + 2 * i, 2);
    std::memcpy(&b, restored.data() + 2 * i, 2);
    x[i] = FromBits(a, l.dtype);
    y[i] = FromBits(b, l.dtype);
    amax[SliceOf(l, i)] = std::max(amax[SliceOf(l, i)], std::fabs(x[i]));
  }
  for (uint64_t i = 0; i < n; ++i) {
    const float s = amax[SliceOf(l, i)] / Fp8MaxFinite(fp8);
    const double bound = std::fabs(x[i]) * std::ldexp(1.0, -(man + 1)) +
                         s * std::ldexp(1.0, emin - man - 1) +
                         std::max(std::fabs(x[i]), std::fabs(y[i])) * std::ldexp(1.0, -man16);
    if (!(std::fabs(y[i] - x[i]) <= bound)) {
      return ::testing::AssertionFailure()
             << "value " << i << " (slice " << SliceOf(l, i) << "): " << x[i] << " came back as "
             << y[i] << ", off by more than " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvtier::engine::testing

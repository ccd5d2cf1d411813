// A batch of strided 16-bit blocks (random normal values, per-head
// magnitudes 2^-6..2^6), room for their fp8 form and for the restored
// blocks, and the Fp8BlocksParams over them: the fp8 codec tests' data.
#pragma once

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "common/fp8.h"
#include "common/half.h"
#include "kernels/fp8_codec.h"

namespace kvtier::kernels::testing {

struct Fp8Batch {
  Fp8Batch(const Layout& wide, DType fp8_dtype, uint32_t blocks, uint32_t seed)
      : layout(wide), fp8(fp8_dtype), n(blocks) {
    wide_stride = (layout.BlockBytes() + 31) / 16 * 16;  // slack between blocks
    narrow_stride = (Fp8LayoutOf(layout, fp8).BlockBytes() + 31) / 16 * 16;
    wide_bytes.assign(n * wide_stride, std::byte{0x5a});
    narrow_bytes.assign(n * narrow_stride, std::byte{0x5a});
    back_bytes.assign(n * wide_stride, std::byte{0x5a});
    refused.assign(n, 0x77);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint32_t b = 0; b < n; ++b) {
      for (uint64_t i = 0; i < layout.ValueBytes() / 2; ++i) {
        const uint64_t head = (i / layout.head_dim) % layout.kv_heads;
        const float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(head * 4 % 13) - 6);
        const uint16_t bits = layout.dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
        std::memcpy(wide_bytes.data() + b * wide_stride + 2 * i, &bits, 2);
      }
    }
  }
  std::span<std::byte> WideBlock(uint32_t i) {
    return {wide_bytes.data() + i * wide_stride, layout.BlockBytes()};
  }
  std::span<std::byte> NarrowBlock(uint32_t i) {
    return {narrow_bytes.data() + i * narrow_stride, Fp8LayoutOf(layout, fp8).BlockBytes()};
  }
  std::span<std::byte> BackBlock(uint32_t i) {
    return {back_bytes.data() + i * wide_stride, layout.BlockBytes()};
  }
  // An infinity in block i (layer 0, V, token 3, last head, dim 5).
  void PoisonWide(uint32_t i) {
    const uint16_t inf = layout.dtype == DType::kFloat16 ? 0x7c00 : 0x7f80;
    const uint64_t at = ((1ULL * layout.block_tokens + 3) * layout.kv_heads + layout.kv_heads - 1) *
                            layout.head_dim +
                        5;
    std::memcpy(WideBlock(i).data() + 2 * at, &inf, 2);
  }
  // A zero scale in block i's fp8 form.
  void SpoilScale(uint32_t i) {
    const float zero = 0.0f;
    std::memcpy(NarrowBlock(i).data() + Fp8LayoutOf(layout, fp8).ValueBytes() + 4, &zero, 4);
  }
  Fp8BlocksParams QuantizeParams() {
    return Fp8BlocksParams{
        layout,        fp8,           n, wide_bytes.data(), wide_stride, narrow_bytes.data(),
        narrow_stride, refused.data()};
  }
  Fp8BlocksParams DequantizeParams() {
    return Fp8BlocksParams{
        layout,      fp8,           n, narrow_bytes.data(), narrow_stride, back_bytes.data(),
        wide_stride, refused.data()};
  }

  Layout layout;
  DType fp8;
  uint32_t n;
  uint64_t wide_stride = 0, narrow_stride = 0;
  std::vector<std::byte> wide_bytes, narrow_bytes, back_bytes;
  std::vector<uint8_t> refused;
};

}  // namespace kvtier::kernels::testing

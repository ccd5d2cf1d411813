// Bulk fp16/bf16 <-> fp32 for the CPU references (the scalar conversions
// are common/half.h's).
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/internal/host_convert.h"
#include "kernels/kernels.h"

namespace kvtier::kernels {

namespace internal {
namespace {

const float* HalfTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = HalfToFloat(static_cast<uint16_t>(i));
    return t;
  }();
  return table.data();
}

}  // namespace

void WidenToFloat(DType dtype, const void* src, size_t n, float* dst) {
  assert(dtype == DType::kFloat16 || dtype == DType::kBFloat16);
  const auto* in = static_cast<const uint16_t*>(src);
  if (dtype == DType::kFloat16) {
    const float* table = HalfTable();
    for (size_t i = 0; i < n; ++i) dst[i] = table[in[i]];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(in[i]);
  }
}

void NarrowFromFloat(DType dtype, const float* src, size_t n, void* dst) {
  assert(dtype == DType::kFloat16 || dtype == DType::kBFloat16);
  auto* out = static_cast<uint16_t*>(dst);
  if (dtype == DType::kFloat16) {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(src[i]);
  }
}

}  // namespace internal
}  // namespace kvtier::kernels

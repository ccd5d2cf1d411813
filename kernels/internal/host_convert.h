// Bulk fp16/bf16 <-> fp32 for the CPU references and tests.
#pragma once

#include <cstddef>

#include "common/layout.h"

namespace kvtier::kernels::internal {

// dst[i] = src[i] widened to fp32, exactly. REQUIRES: dtype is kFloat16 or
// kBFloat16. fp16 goes through a 256 KiB table built on first use
// (thread-safe), so the reference is not bound by bit twiddling.
void WidenToFloat(DType dtype, const void* src, size_t n, float* dst);

// dst[i] = src[i] rounded to dtype, to nearest even. Same REQUIRES.
void NarrowFromFloat(DType dtype, const float* src, size_t n, void* dst);

}  // namespace kvtier::kernels::internal

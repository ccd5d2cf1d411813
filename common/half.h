// IEEE binary16 and bfloat16 <-> binary32, bit-exact on the host (the CPU
// references of kernels/, the fp8 codecs of common/fp8.h, tests).
// Narrowing rounds to nearest, ties to even; overflow gives infinity; NaN
// stays NaN (made quiet, sign and top payload bits kept). Widening is exact.
//
// Thread-safety: stateless; any thread.
#pragma once

#include <cstdint>

namespace kvtier {

float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);

}  // namespace kvtier

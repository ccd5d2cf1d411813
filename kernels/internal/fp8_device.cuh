// Device-side number formats shared by the kernels (device code only; also
// compiled for the CPU by tests/kernels/cuda_emulator.h, so only the
// intrinsics it provides: __uint_as_float and the fp16/bf16 headers' own).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace kvtier::kernels::internal {

// fp16 / bf16 bits <-> fp32. bf16 widening is a shift; fp16 uses the
// hardware conversion. Narrowing rounds to nearest even, like the reference.
template <typename T>
struct Elem;
template <>
struct Elem<__half> {
  __device__ static float Lo(uint32_t w) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  }
  __device__ static float Hi(uint32_t w) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  }
  __device__ static uint16_t Narrow(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static float Lo(uint32_t w) { return __uint_as_float(w << 16); }
  __device__ static float Hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
  __device__ static uint16_t Narrow(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};

// The fp8 formats (common/fp8.h), bit for bit as the host codecs.
template <uint32_t kMan, int kBias, bool kE5M2>
struct Fp8Format {
  static constexpr float kMaxFinite = kE5M2 ? 57344.0f : 448.0f;
  static constexpr uint32_t kMinExponentBits = static_cast<uint32_t>(127 + 1 - kBias) << 23;

  // A code to fp32, exactly: normals by rebiasing the bits, subnormals as an
  // integer times the smallest step; NaN codes (and e5m2's infinities) too.
  __device__ static float Decode(uint32_t c) {
    const uint32_t m = c & 0x7fu;
    constexpr uint32_t kFirstNan = kE5M2 ? 0x7cu : 0x7fu;
    float mag;
    if (m >= kFirstNan) {
      mag = (kE5M2 && m == 0x7cu) ? INFINITY : NAN;
    } else if (m < (1u << kMan)) {
      // times 2^(1 - bias - man): 2^-9 (e4m3), 2^-16 (e5m2).
      mag = static_cast<float>(m) *
            __uint_as_float(static_cast<uint32_t>(127 + 1 - kBias - static_cast<int>(kMan)) << 23);
    } else {
      mag = __uint_as_float((m << (23 - kMan)) + (static_cast<uint32_t>(127 - kBias) << 23));
    }
    return (c & 0x80u) != 0 ? -mag : mag;
  }

  // A finite fp32 of magnitude at most kMaxFinite (plus a few ulps) to its
  // code, rounded to nearest even: the AVX2 codec's one rounding for
  // normals and subnormals (common/fp8.cc), adding M = 2^(E + 23 - man).
  __device__ static uint32_t Encode(float y) {
    const uint32_t bits = __float_as_uint(y);
    const uint32_t sign = (bits >> 24) & 0x80u;
    const uint32_t a = bits & 0x7fffffffu;
    const uint32_t e = (a & 0x7f800000u) > kMinExponentBits ? (a & 0x7f800000u) : kMinExponentBits;
    const uint32_t m = e + ((23u - kMan) << 23);
    const uint32_t rounded = __float_as_uint(__uint_as_float(a) + __uint_as_float(m));
    const uint32_t code = (rounded - m) + ((e >> (23 - kMan)) - ((128u - kBias) << kMan));
    return code | sign;
  }
};
using Fp8E4M3 = Fp8Format<3, 7, false>;
using Fp8E5M2 = Fp8Format<2, 15, true>;

}  // namespace kvtier::kernels::internal

#include "common/fp8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVTIER_FP8_AVX2 1
#else
#define KVTIER_FP8_AVX2 0
#endif

namespace kvtier {
namespace {

// What the codecs need of a format. The encodings are contiguous: code + 1
// is the next larger magnitude, across the subnormal/normal boundary.
struct Format {
  int man_bits;       // 3 (e4m3) or 2 (e5m2)
  int bias;           // 7 or 15
  float max_finite;   // 448 or 57344
  uint8_t max_code;   // its magnitude code: 0x7e or 0x7b
  uint8_t first_nan;  // magnitude codes from here up are NaN (or inf): 0x7f, 0x7c
  int min_exponent() const { return 1 - bias; }  // of the smallest normal
};

constexpr Format kE4M3{3, 7, 448.0f, 0x7e, 0x7f};
constexpr Format kE5M2{2, 15, 57344.0f, 0x7b, 0x7c};

const Format& FormatOf(DType fp8) { return fp8 == DType::kFp8E4M3 ? kE4M3 : kE5M2; }

// The smallest scale: 1 / scale stays finite (2^126).
constexpr float kMinScale = FLT_MIN;

uint8_t Encode(float value, const Format& f) {
  const uint8_t sign = static_cast<uint8_t>((std::bit_cast<uint32_t>(value) >> 24) & 0x80u);
  if (std::isnan(value)) return sign | 0x7f;
  const float a = std::fabs(value);
  if (a >= f.max_finite) return sign | f.max_code;
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, f.min_exponent());
  // a in units of its ulp, rounded to nearest even (the default rounding
  // mode); scaling by a power of two is exact.
  const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, f.man_bits - exponent)));
  const int code = ((exponent + f.bias - 1) << f.man_bits) + q;
  return sign | static_cast<uint8_t>(std::min(code, static_cast<int>(f.max_code)));
}

float Decode(uint8_t code, const Format& f) {
  const uint8_t m = code & 0x7f;
  float v;
  if (m >= f.first_nan) {
    // e5m2's S.11111.00 is infinity; every other code up there is NaN.
    v = (&f == &kE5M2 && m == 0x7c) ? INFINITY : NAN;
  } else {
    const int exponent = m >> f.man_bits;
    const int mantissa = m & ((1 << f.man_bits) - 1);
    v = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), f.min_exponent() - f.man_bits)
                      : std::ldexp(static_cast<float>(mantissa + (1 << f.man_bits)),
                                   exponent - f.bias - f.man_bits);
  }
  return (code & 0x80) != 0 ? -v : v;
}

const std::array<float, 256>& DecodeTable(const Format& f) {
  static const auto make = [](const Format& fmt) {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = Decode(static_cast<uint8_t>(c), fmt);
    return t;
  };
  static const std::array<float, 256> e4m3 = make(kE4M3);
  static const std::array<float, 256> e5m2 = make(kE5M2);
  return &f == &kE4M3 ? e4m3 : e5m2;
}

float Widen(const std::byte* p, bool bf16) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return bf16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
}

void Narrow(float v, bool bf16, std::byte* p) {
  const uint16_t bits = bf16 ? FloatToBFloat16(v) : FloatToHalf(v);
  std::memcpy(p, &bits, 2);
}

// ---- the row operations: one (layer, kv, token, head) row of head_dim ----

struct RowOps {
  // The largest |value| of the row; *bad set when one is NaN or infinite.
  float (*amax)(const std::byte* in, size_t n, bool bf16, bool* bad);
  void (*quantize)(const std::byte* in, size_t n, bool bf16, float inv_scale, const Format& f,
                   uint8_t* out);
  // False when a code is NaN (or infinity).
  bool (*dequantize)(const uint8_t* in, size_t n, const Format& f, float scale, bool bf16,
                     std::byte* out);
  const char* name;
};

float ScalarAmax(const std::byte* in, size_t n, bool bf16, bool* bad) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = Widen(in + 2 * i, bf16);
    if (!std::isfinite(v)) *bad = true;
    m = std::max(m, std::fabs(v));
  }
  return m;
}

void ScalarQuantize(const std::byte* in, size_t n, bool bf16, float inv_scale, const Format& f,
                    uint8_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Encode(Widen(in + 2 * i, bf16) * inv_scale, f);
}

bool ScalarDequantize(const uint8_t* in, size_t n, const Format& f, float scale, bool bf16,
                      std::byte* out) {
  const std::array<float, 256>& table = DecodeTable(f);
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    const float v = table[in[i]];
    ok = ok && std::isfinite(v);
    Narrow(v * scale, bf16, out + 2 * i);
  }
  return ok;
}

constexpr RowOps kScalarOps{ScalarAmax, ScalarQuantize, ScalarDequantize, "scalar"};

#if KVTIER_FP8_AVX2
// Eight values at a time with AVX2 and F16C; the tail of a row (head_dim
// not a multiple of 8) goes through the scalar code. Bit for bit the
// scalar results: the same fp32 products, the same round-to-nearest-even.
#define KVTIER_AVX2 __attribute__((target("avx2,f16c")))

KVTIER_AVX2 inline __m256 Load8(const std::byte* p, bool bf16) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (!bf16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

KVTIER_AVX2 float Avx2Amax(const std::byte* in, size_t n, bool bf16, bool* bad) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);
  __m256 m = _mm256_setzero_ps();
  __m256i nonfinite = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_and_ps(Load8(in + 2 * i, bf16), abs_mask);
    nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpgt_epi32(_mm256_castps_si256(a), max_finite));
    m = _mm256_max_ps(m, a);
  }
  if (!_mm256_testz_si256(nonfinite, nonfinite)) *bad = true;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float out = *std::max_element(lanes, lanes + 8);
  return std::max(out, ScalarAmax(in + 2 * i, n - i, bf16, bad));
}

// Eight int32 lanes' low bytes, in order, to `out`.
KVTIER_AVX2 inline void StoreLowBytes(__m256i codes, uint8_t* out) {
  const __m256i pick =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_shuffle_epi8(codes, pick);
  const __m256i joined =
      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(joined));
}

KVTIER_AVX2 void Avx2Quantize(const std::byte* in, size_t n, bool bf16, float inv_scale,
                              const Format& f, uint8_t* out) {
  const __m256 inv = _mm256_set1_ps(inv_scale);
  const __m256i sign_mask = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256 max_finite = _mm256_set1_ps(f.max_finite);
  const __m256 min_normal = _mm256_set1_ps(std::ldexp(1.0f, f.min_exponent()));
  // Subnormals: adding 2^(min_exponent - man_bits + 23), whose ulp is the
  // format's smallest step, rounds to the code (nearest even) in the low bits.
  const __m256 magic = _mm256_set1_ps(std::ldexp(1.0f, f.min_exponent() - f.man_bits + 23));
  const int shift = 23 - f.man_bits;
  const __m256i round_bias = _mm256_set1_epi32((1 << (shift - 1)) - 1);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i rebias = _mm256_set1_epi32((127 - f.bias) << f.man_bits);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i y = _mm256_castps_si256(_mm256_mul_ps(Load8(in + 2 * i, bf16), inv));
    const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(y, sign_mask), 24);
    const __m256 a =
        _mm256_min_ps(_mm256_castsi256_ps(_mm256_andnot_si256(sign_mask, y)), max_finite);
    const __m256i bits = _mm256_castps_si256(a);
    // Normal: round the mantissa to man_bits (a carry moves the exponent).
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, shift), one);
    const __m256i normal = _mm256_sub_epi32(
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, round_bias), odd), shift),
        rebias);
    const __m256i subnormal =
        _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(a, magic)), _mm256_castps_si256(magic));
    const __m256 is_sub = _mm256_cmp_ps(a, min_normal, _CMP_LT_OQ);
    const __m256i code = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(normal), _mm256_castsi256_ps(subnormal), is_sub));
    StoreLowBytes(_mm256_or_si256(code, sign), out + i);
  }
  ScalarQuantize(in + 2 * i, n - i, bf16, inv_scale, f, out + i);
}

KVTIER_AVX2 bool Avx2Dequantize(const uint8_t* in, size_t n, const Format& f, float scale,
                                bool bf16, std::byte* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7f);
  const __m256i nan_below = _mm256_set1_epi32(f.first_nan - 1);
  const __m256i normal_below = _mm256_set1_epi32((1 << f.man_bits) - 1);
  const __m256i rebias = _mm256_set1_epi32((127 - f.bias) << 23);
  const __m256 sub_step = _mm256_set1_ps(std::ldexp(1.0f, f.min_exponent() - f.man_bits));
  const int shift = 23 - f.man_bits;
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i c =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)));
    const __m256i m = _mm256_and_si256(c, magnitude_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(m, nan_below));
    const __m256 normal =
        _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(m, shift), rebias));
    const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(m), sub_step);
    const __m256 is_normal = _mm256_castsi256_ps(_mm256_cmpgt_epi32(m, normal_below));
    const __m256 v = _mm256_blendv_ps(subnormal, normal, is_normal);
    const __m256i sign = _mm256_slli_epi32(_mm256_andnot_si256(magnitude_mask, c), 24);
    const __m256 y =
        _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign)), s);
    __m128i h;
    if (!bf16) {
      h = _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m256i b = _mm256_castps_si256(y);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
      h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  const bool tail_ok = ScalarDequantize(in + i, n - i, f, scale, bf16, out + 2 * i);
  return tail_ok && _mm256_testz_si256(bad, bad);
}

constexpr RowOps kAvx2Ops{Avx2Amax, Avx2Quantize, Avx2Dequantize, "avx2"};
#endif

bool force_scalar = false;

const RowOps& Ops() {
#if KVTIER_FP8_AVX2
  static const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (has_avx2 && !force_scalar) return kAvx2Ops;
#endif
  return kScalarOps;
}

bool Is16Bit(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

std::string SliceName(const Layout& l, uint64_t slice, uint32_t head) {
  return "layer " + std::to_string(slice / 2) + (slice % 2 == 0 ? " K" : " V") + " head " +
         std::to_string(head) + " of " + l.ToString();
}

}  // namespace

float Fp8MaxFinite(DType fp8) { return FormatOf(fp8).max_finite; }

uint8_t FloatToFp8(float value, DType fp8) { return Encode(value, FormatOf(fp8)); }

float Fp8ToFloat(uint8_t code, DType fp8) { return DecodeTable(FormatOf(fp8))[code]; }

Layout Fp8LayoutOf(const Layout& from, DType fp8) {
  Layout l = from;
  l.dtype = fp8;
  return l;
}

Status QuantizeBlock(const Layout& from, DType fp8, std::span<const std::byte> in,
                     std::span<std::byte> out) {
  if (!Is16Bit(from.dtype) || !IsFp8(fp8)) {
    return InvalidArgumentError("fp8 quantization takes an fp16 or bf16 block to e4m3 or e5m2");
  }
  const Layout to = Fp8LayoutOf(from, fp8);
  if (in.size() != from.BlockBytes() || out.size() != to.BlockBytes()) {
    return InvalidArgumentError(
        "fp8 quantization of " + from.ToString() + ": " + std::to_string(in.size()) +
        " bytes in, " + std::to_string(out.size()) + " out; expected " +
        std::to_string(from.BlockBytes()) + " and " + std::to_string(to.BlockBytes()));
  }
  const Format& f = FormatOf(fp8);
  const RowOps& ops = Ops();
  const bool bf16 = from.dtype == DType::kBFloat16;
  const size_t d = from.head_dim, heads = from.kv_heads, tokens = from.block_tokens;
  std::vector<float> amax(heads), inv(heads);
  auto* codes = reinterpret_cast<uint8_t*>(out.data());
  std::byte* scales = out.data() + to.ValueBytes();
  for (uint64_t slice = 0; slice < 2ULL * from.layers; ++slice) {
    const size_t first_row = slice * tokens * heads;
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (size_t t = 0; t < tokens; ++t) {
      for (size_t h = 0; h < heads; ++h) {
        bool bad = false;
        const size_t row = first_row + t * heads + h;
        amax[h] = std::max(amax[h], ops.amax(in.data() + 2 * row * d, d, bf16, &bad));
        if (bad) {
          return InvalidArgumentError(
              "fp8 quantization: " + SliceName(from, slice, static_cast<uint32_t>(h)) +
              " holds NaN or infinity; the block is refused");
        }
      }
    }
    for (size_t h = 0; h < heads; ++h) {
      const float scale = amax[h] > 0 ? std::max(amax[h] / f.max_finite, kMinScale) : 1.0f;
      inv[h] = 1.0f / scale;
      std::memcpy(scales + 4 * (slice * heads + h), &scale, 4);
    }
    for (size_t t = 0; t < tokens; ++t) {
      for (size_t h = 0; h < heads; ++h) {
        const size_t row = first_row + t * heads + h;
        ops.quantize(in.data() + 2 * row * d, d, bf16, inv[h], f, codes + row * d);
      }
    }
  }
  return Status::Ok();
}

Status DequantizeBlock(const Layout& fp8_layout, DType to, std::span<const std::byte> in,
                       std::span<std::byte> out) {
  if (!IsFp8(fp8_layout.dtype) || !Is16Bit(to)) {
    return InvalidArgumentError("fp8 dequantization takes an e4m3 or e5m2 block to fp16 or bf16");
  }
  Layout wide = fp8_layout;
  wide.dtype = to;
  if (in.size() != fp8_layout.BlockBytes() || out.size() != wide.BlockBytes()) {
    return InvalidArgumentError(
        "fp8 dequantization of " + fp8_layout.ToString() + ": " + std::to_string(in.size()) +
        " bytes in, " + std::to_string(out.size()) + " out; expected " +
        std::to_string(fp8_layout.BlockBytes()) + " and " + std::to_string(wide.BlockBytes()));
  }
  const Format& f = FormatOf(fp8_layout.dtype);
  const RowOps& ops = Ops();
  const bool bf16 = to == DType::kBFloat16;
  const size_t d = fp8_layout.head_dim, heads = fp8_layout.kv_heads,
               tokens = fp8_layout.block_tokens;
  const auto* codes = reinterpret_cast<const uint8_t*>(in.data());
  const std::byte* scales = in.data() + fp8_layout.ValueBytes();
  for (uint64_t slice = 0; slice < 2ULL * fp8_layout.layers; ++slice) {
    for (size_t h = 0; h < heads; ++h) {
      float scale;
      std::memcpy(&scale, scales + 4 * (slice * heads + h), 4);
      if (!(scale > 0) || !std::isfinite(scale)) {
        return InvalidArgumentError("fp8 block: the scale of " +
                                    SliceName(fp8_layout, slice, static_cast<uint32_t>(h)) +
                                    " is " + std::to_string(scale) + ", not positive and finite");
      }
      for (size_t t = 0; t < tokens; ++t) {
        const size_t row = (slice * tokens + t) * heads + h;
        if (!ops.dequantize(codes + row * d, d, f, scale, bf16, out.data() + 2 * row * d)) {
          return InvalidArgumentError(
              "fp8 block: " + SliceName(fp8_layout, slice, static_cast<uint32_t>(h)) +
              " holds a NaN or infinity code");
        }
      }
    }
  }
  return Status::Ok();
}

const char* Fp8CodecPath() { return Ops().name; }

void SetFp8CodecScalarForTesting(bool scalar) { force_scalar = scalar; }

}  // namespace kvtier

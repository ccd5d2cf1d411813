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
#include <cpuid.h>
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

// ---- the slice operations ----
// A slice is one (layer, plane) of a block -- its K or V, or an MLA
// layout's latent: [token][kv_head][head_dim]
// values, its rows (token, head) of head_dim each; a head's scale covers
// its rows of every token.

struct Shape {
  size_t tokens, heads, d;
};

struct SliceOps {
  // amax[h] = the largest |value| of head h's rows. Returns the first head
  // holding NaN or infinity, or -1. `lanes`: scratch of 8 * heads floats.
  int (*amax)(const std::byte* in, Shape s, bool bf16, float* amax, float* lanes);
  // `next`: the slice that follows (to prefetch), or null.
  void (*quantize)(const std::byte* in, Shape s, bool bf16, const float* inv_scale, const Format& f,
                   uint8_t* out, const std::byte* next);
  // Returns the first head holding a NaN (or infinity) code, or -1.
  int (*dequantize)(const uint8_t* in, Shape s, const Format& f, const float* scale, bool bf16,
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

int ScalarSliceAmax(const std::byte* in, Shape s, bool bf16, float* amax, float*) {
  int bad_head = -1;
  for (size_t h = 0; h < s.heads; ++h) amax[h] = 0;
  for (size_t t = 0; t < s.tokens; ++t) {
    for (size_t h = 0; h < s.heads; ++h) {
      bool bad = false;
      amax[h] = std::max(amax[h], ScalarAmax(in + 2 * (t * s.heads + h) * s.d, s.d, bf16, &bad));
      if (bad && bad_head < 0) bad_head = static_cast<int>(h);
    }
  }
  return bad_head;
}

void ScalarSliceQuantize(const std::byte* in, Shape s, bool bf16, const float* inv_scale,
                         const Format& f, uint8_t* out, const std::byte*) {
  for (size_t row = 0; row < s.tokens * s.heads; ++row) {
    ScalarQuantize(in + 2 * row * s.d, s.d, bf16, inv_scale[row % s.heads], f, out + row * s.d);
  }
}

int ScalarSliceDequantize(const uint8_t* in, Shape s, const Format& f, const float* scale,
                          bool bf16, std::byte* out) {
  int bad_head = -1;
  for (size_t row = 0; row < s.tokens * s.heads; ++row) {
    const size_t h = row % s.heads;
    if (!ScalarDequantize(in + row * s.d, s.d, f, scale[h], bf16, out + 2 * row * s.d) &&
        bad_head < 0) {
      bad_head = static_cast<int>(h);
    }
  }
  return bad_head;
}

constexpr SliceOps kScalarOps{ScalarSliceAmax, ScalarSliceQuantize, ScalarSliceDequantize,
                              "scalar"};

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

// The largest magnitude without widening: for fp16 and bf16 alike, |x|'s
// bits (sign cleared) order as unsigned integers do, and NaN and infinity
// are the magnitudes from the all-ones exponent up. Sixteen values a step.
KVTIER_AVX2 int Avx2SliceAmax(const std::byte* in, Shape s, bool bf16, float* amax, float* lanes) {
  const __m256i abs_mask = _mm256_set1_epi16(0x7fff);
  const __m256i below_inf = _mm256_set1_epi16(static_cast<int16_t>(bf16 ? 0x7f7f : 0x7bff));
  const size_t vec = s.d / 16 * 16;
  auto* acc = reinterpret_cast<uint16_t*>(lanes);  // 16 per head: 8 floats' room
  int bad_head = -1;
  for (size_t h = 0; h < s.heads; ++h) amax[h] = 0;
  std::fill(acc, acc + 16 * s.heads, uint16_t{0});
  for (size_t t = 0; t < s.tokens; ++t) {
    for (size_t h = 0; h < s.heads; ++h) {
      const std::byte* row = in + 2 * (t * s.heads + h) * s.d;
      __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + 16 * h));
      __m256i nonfinite = _mm256_setzero_si256();
      for (size_t i = 0; i < vec; i += 16) {
        const __m256i a = _mm256_and_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)), abs_mask);
        nonfinite = _mm256_or_si256(nonfinite, _mm256_cmpgt_epi16(a, below_inf));
        m = _mm256_max_epu16(m, a);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + 16 * h), m);
      bool bad = !_mm256_testz_si256(nonfinite, nonfinite);
      if (vec < s.d) amax[h] = std::max(amax[h], ScalarAmax(row + 2 * vec, s.d - vec, bf16, &bad));
      if (bad && bad_head < 0) bad_head = static_cast<int>(h);
    }
  }
  for (size_t h = 0; h < s.heads; ++h) {
    const uint16_t top = *std::max_element(acc + 16 * h, acc + 16 * h + 16);
    std::byte bits[2];
    std::memcpy(bits, &top, 2);
    amax[h] = std::max(amax[h], Widen(bits, bf16));
  }
  return bad_head;
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

// One rounding for normals and subnormals alike: with E the exponent of a
// (at least the format's smallest normal one) and M = 2^(E + 23 - man_bits),
// whose fp32 ulp is the format's step at E, the fp32 addition a + M rounds
// a to that step, to nearest even; bits(a + M) - bits(M) is then a / step,
// and the code is that plus (E + bias - 1) << man_bits (0 for subnormals).
// No clamp: x / scale is at most the largest finite times (1 + 3 ulps), which
// rounds to the largest finite (QuantizeBlock's scale is amax / largest
// finite, or 2^-126 for slices so small that x / scale is smaller still).
KVTIER_AVX2 void Avx2SliceQuantize(const std::byte* in, Shape s, bool bf16, const float* inv_scale,
                                   const Format& f, uint8_t* out, const std::byte* next) {
  const __m256i sign_mask = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i exponent_mask = _mm256_set1_epi32(0x7f800000);
  const __m256i min_exponent = _mm256_set1_epi32((f.min_exponent() + 127) << 23);
  const int shift = 23 - f.man_bits;
  const __m256i to_m = _mm256_set1_epi32(shift << 23);
  const __m256i rebias = _mm256_set1_epi32((128 - f.bias) << f.man_bits);
  const __m128i count = _mm_cvtsi32_si128(shift);
  const __m256i pack_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i bf16_order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  const size_t vec = s.d / 8 * 8;
  const size_t rows = s.tokens * s.heads;
  const size_t slice_bytes = 2 * rows * s.d;
  for (size_t row = 0; row < rows; ++row) {
    // The next slice's bytes on their way into the cache while this one is
    // encoded: its amax pass then reads them from there, not from memory.
    if (next != nullptr) {
      for (size_t at = row * slice_bytes / rows; at < (row + 1) * slice_bytes / rows; at += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + at), _MM_HINT_T0);
      }
    }
    const float inv_h = inv_scale[row % s.heads];
    const __m256 inv = _mm256_set1_ps(inv_h);
    const std::byte* src = in + 2 * row * s.d;
    uint8_t* dst = out + row * s.d;
    const auto encode = [&](__m256 x) KVTIER_AVX2 {
      const __m256i y = _mm256_castps_si256(_mm256_mul_ps(x, inv));
      const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(y, sign_mask), 24);
      const __m256i a = _mm256_andnot_si256(sign_mask, y);
      const __m256i e = _mm256_max_epi32(_mm256_and_si256(a, exponent_mask), min_exponent);
      const __m256i m = _mm256_add_epi32(e, to_m);
      const __m256i rounded =
          _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(m)));
      const __m256i steps = _mm256_sub_epi32(rounded, m);
      const __m256i base = _mm256_sub_epi32(_mm256_srl_epi32(e, count), rebias);
      return _mm256_or_si256(_mm256_add_epi32(steps, base), sign);
    };
    size_t i = 0;
    // 32 values a step: four vectors of codes packed to bytes together.
    for (; i + 32 <= vec; i += 32) {
      __m256i bytes;
      if (bf16) {
        // bf16 widens by moving each value into the high half of a 32-bit
        // lane: unpack with zeros, 16 values a load. The unpacks take lanes
        // 0-3 and 8-11, then 4-7 and 12-15; packing puts them back in order.
        const __m256i zero = _mm256_setzero_si256();
        const auto* p = reinterpret_cast<const __m256i*>(src + 2 * i);
        const __m256i a = _mm256_loadu_si256(p), b = _mm256_loadu_si256(p + 1);
        const __m256i lo =
            _mm256_packus_epi32(encode(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, a))),
                                encode(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, a))));
        const __m256i hi =
            _mm256_packus_epi32(encode(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, b))),
                                encode(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, b))));
        bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(lo, hi), bf16_order);
      } else {
        const __m256i lo = _mm256_packus_epi32(encode(Load8(src + 2 * i, false)),
                                               encode(Load8(src + 2 * i + 16, false)));
        const __m256i hi = _mm256_packus_epi32(encode(Load8(src + 2 * i + 32, false)),
                                               encode(Load8(src + 2 * i + 48, false)));
        bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(lo, hi), pack_order);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bytes);
    }
    for (; i < vec; i += 8) StoreLowBytes(encode(Load8(src + 2 * i, bf16)), dst + i);
    if (vec < s.d) ScalarQuantize(src + 2 * vec, s.d - vec, bf16, inv_h, f, dst + vec);
  }
}

KVTIER_AVX2 int Avx2SliceDequantize(const uint8_t* in, Shape s, const Format& f, const float* scale,
                                    bool bf16, std::byte* out) {
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7f);
  const __m256i nan_below = _mm256_set1_epi32(f.first_nan - 1);
  const __m256i normal_below = _mm256_set1_epi32((1 << f.man_bits) - 1);
  const __m256i rebias = _mm256_set1_epi32((127 - f.bias) << 23);
  const __m256 sub_step = _mm256_set1_ps(std::ldexp(1.0f, f.min_exponent() - f.man_bits));
  const __m128i count = _mm_cvtsi32_si128(23 - f.man_bits);
  const __m256i bf16_round = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const size_t vec = s.d / 8 * 8;
  int bad_head = -1;
  for (size_t row = 0; row < s.tokens * s.heads; ++row) {
    const size_t h = row % s.heads;
    const __m256 sc = _mm256_set1_ps(scale[h]);
    const uint8_t* src = in + row * s.d;
    std::byte* dst = out + 2 * row * s.d;
    __m256i bad = _mm256_setzero_si256();
    for (size_t i = 0; i < vec; i += 8) {
      const __m256i c =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)));
      const __m256i m = _mm256_and_si256(c, magnitude_mask);
      bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(m, nan_below));
      const __m256 normal =
          _mm256_castsi256_ps(_mm256_add_epi32(_mm256_sll_epi32(m, count), rebias));
      const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(m), sub_step);
      const __m256 is_normal = _mm256_castsi256_ps(_mm256_cmpgt_epi32(m, normal_below));
      const __m256 v = _mm256_blendv_ps(subnormal, normal, is_normal);
      const __m256i sign = _mm256_slli_epi32(_mm256_andnot_si256(magnitude_mask, c), 24);
      const __m256 y =
          _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign)), sc);
      __m128i narrowed;
      if (!bf16) {
        narrowed = _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      } else {
        const __m256i b = _mm256_castps_si256(y);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
        const __m256i r =
            _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, bf16_round), lsb), 16);
        narrowed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), narrowed);
    }
    bool ok = _mm256_testz_si256(bad, bad);
    if (vec < s.d) {
      ok = ScalarDequantize(src + vec, s.d - vec, f, scale[h], bf16, dst + 2 * vec) && ok;
    }
    if (!ok && bad_head < 0) bad_head = static_cast<int>(h);
  }
  return bad_head;
}

constexpr SliceOps kAvx2Ops{Avx2SliceAmax, Avx2SliceQuantize, Avx2SliceDequantize, "avx2"};
#endif

bool force_scalar = false;

const SliceOps& Ops() {
#if KVTIER_FP8_AVX2
  // clang 14 knows no "f16c" for __builtin_cpu_supports: its cpuid bit.
  static const bool has_avx2 = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & bit_F16C) != 0;
  }();
  if (has_avx2 && !force_scalar) return kAvx2Ops;
#endif
  return kScalarOps;
}

bool Is16Bit(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

std::string SliceName(const Layout& l, uint64_t slice, uint32_t head) {
  const std::string plane = l.kind == KvKind::kLatent ? " latent" : slice % 2 == 0 ? " K" : " V";
  return "layer " + std::to_string(slice / l.Planes()) + plane + " head " + std::to_string(head) +
         " of " + l.ToString();
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

std::string_view QuantizeName(Quantize q) {
  switch (q) {
    case Quantize::kOff:
      return "off";
    case Quantize::kFp8E4M3:
      return "fp8_e4m3";
    case Quantize::kFp8E5M2:
      return "fp8_e5m2";
  }
  return "?";
}

bool ParseQuantize(std::string_view name, Quantize* out) {
  for (Quantize q : {Quantize::kOff, Quantize::kFp8E4M3, Quantize::kFp8E5M2}) {
    if (name == QuantizeName(q)) {
      *out = q;
      return true;
    }
  }
  return false;
}

Status CheckQuantize(const Layout& layout, Quantize q) {
  if (q == Quantize::kOff || Is16Bit(layout.dtype)) return Status::Ok();
  return InvalidArgumentError("quantize_lower " + std::string(QuantizeName(q)) +
                              " needs an fp16 or bf16 namespace; this one is " +
                              std::string(DTypeName(layout.dtype)));
}

Layout StoredLayout(const Layout& layout, Quantize q) {
  switch (q) {
    case Quantize::kOff:
      return layout;
    case Quantize::kFp8E4M3:
      return Fp8LayoutOf(layout, DType::kFp8E4M3);
    case Quantize::kFp8E5M2:
      return Fp8LayoutOf(layout, DType::kFp8E5M2);
  }
  return layout;
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
  const SliceOps& ops = Ops();
  const bool bf16 = from.dtype == DType::kBFloat16;
  const Shape shape{from.block_tokens, from.kv_heads, from.head_dim};
  const size_t slice_values = shape.tokens * shape.heads * shape.d;
  std::vector<float> amax(shape.heads), inv(shape.heads), lanes(8 * shape.heads);
  auto* codes = reinterpret_cast<uint8_t*>(out.data());
  std::byte* scales = out.data() + to.ValueBytes();
  const uint64_t slices = uint64_t{from.Planes()} * from.layers;
  for (uint64_t slice = 0; slice < slices; ++slice) {
    const std::byte* src = in.data() + 2 * slice * slice_values;
    if (const int bad = ops.amax(src, shape, bf16, amax.data(), lanes.data()); bad >= 0) {
      return InvalidArgumentError(
          "fp8 quantization: " + SliceName(from, slice, static_cast<uint32_t>(bad)) +
          " holds NaN or infinity; the block is refused");
    }
    for (size_t h = 0; h < shape.heads; ++h) {
      const float scale = amax[h] > 0 ? std::max(amax[h] / f.max_finite, kMinScale) : 1.0f;
      inv[h] = 1.0f / scale;
      std::memcpy(scales + 4 * (slice * shape.heads + h), &scale, 4);
    }
    const std::byte* next = slice + 1 < slices ? src + 2 * slice_values : nullptr;
    ops.quantize(src, shape, bf16, inv.data(), f, codes + slice * slice_values, next);
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
  const SliceOps& ops = Ops();
  const bool bf16 = to == DType::kBFloat16;
  const Shape shape{fp8_layout.block_tokens, fp8_layout.kv_heads, fp8_layout.head_dim};
  const size_t slice_values = shape.tokens * shape.heads * shape.d;
  const auto* codes = reinterpret_cast<const uint8_t*>(in.data());
  std::vector<float> scale(shape.heads);
  const uint64_t slices = uint64_t{fp8_layout.Planes()} * fp8_layout.layers;
  for (uint64_t slice = 0; slice < slices; ++slice) {
    std::memcpy(scale.data(), in.data() + fp8_layout.ValueBytes() + 4 * slice * shape.heads,
                4 * shape.heads);
    for (size_t h = 0; h < shape.heads; ++h) {
      if (!(scale[h] > 0) || !std::isfinite(scale[h])) {
        return InvalidArgumentError(
            "fp8 block: the scale of " + SliceName(fp8_layout, slice, static_cast<uint32_t>(h)) +
            " is " + std::to_string(scale[h]) + ", not positive and finite");
      }
    }
    const int bad = ops.dequantize(codes + slice * slice_values, shape, f, scale.data(), bf16,
                                   out.data() + 2 * slice * slice_values);
    if (bad >= 0) {
      return InvalidArgumentError(
          "fp8 block: " + SliceName(fp8_layout, slice, static_cast<uint32_t>(bad)) +
          " holds a NaN or infinity code");
    }
  }
  return Status::Ok();
}

const char* Fp8CodecPath() { return Ops().name; }

void SetFp8CodecScalarForTesting(bool scalar) { force_scalar = scalar; }

}  // namespace kvtier

// fp8 KV blocks (DESIGN.md §1, docs/fp8.md): the two 8-bit formats, their
// conversions, and the block format of an fp8 namespace — one byte per
// value plus one fp32 scale per (layer, plane, KV head) — K or V, or an
// MLA layout's one latent plane (common/layout.h) — with the CPU codecs that
// turn an fp16/bf16 block into one and back.
//
// Formats (OCP 8-bit floating point, as NVIDIA's __nv_fp8 and vLLM's):
//   e4m3 ("e4m3fn"): bias 7, no infinities, NaN = S.1111.111, largest finite
//                    448, smallest subnormal 2^-9.
//   e5m2:            bias 15, IEEE-like (infinities, NaNs), largest finite
//                    57344, smallest subnormal 2^-16.
// Narrowing rounds to nearest, ties to even, and saturates: a finite value
// beyond the largest finite becomes it, as __NV_SATFINITE does (vLLM's and
// TensorRT-LLM's KV quantization). The codecs refuse a block holding NaN
// or infinity (InvalidArgument; the output then holds no block): no scale
// makes it right, and a block that is garbage should not be cached as data.
//
// Block format of an fp8 namespace, layout L (L.dtype e4m3 or e5m2):
//   bytes [0, L.ValueBytes()): the values, [layer][plane][token][kv_head]
//     [head_dim] (plane: k|v, or the latent alone), one code each, exactly
//     where the fp16 layout has them (offsets divided by 2);
//   bytes [L.ValueBytes(), L.BlockBytes()): the scales, [layer][plane]
//     [kv_head] fp32 little-endian, L.ScaleBytes() bytes.
// Value v of (layer, plane, head) stands for Fp8ToFloat(v) * scale. A scale is
// positive and finite; a worker may write its own (vLLM's per-layer k_scale
// and v_scale repeated over the heads, say) or let QuantizeBlock compute
// them: amax of the (layer, plane, head) slice / the format's largest finite
// (at least 2^-126, so that its inverse is finite), 1 for an all-zero
// slice. Quantizing multiplies by 1 / scale, in fp32.
//
// Thread-safety: stateless; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/layout.h"
#include "common/status.h"

namespace kvtier {

// Largest finite value of an fp8 dtype (448 or 57344).
float Fp8MaxFinite(DType fp8);

// One value to fp8 (round to nearest even, saturating; NaN stays NaN) and
// back (exact). REQUIRES: IsFp8(fp8).
uint8_t FloatToFp8(float value, DType fp8);
float Fp8ToFloat(uint8_t code, DType fp8);

// The fp8 layout of a 16-bit layout: the same shape, dtype `fp8`.
// REQUIRES: from.dtype is kFloat16 or kBFloat16, IsFp8(fp8).
Layout Fp8LayoutOf(const Layout& from, DType fp8);

// Quantizes one block of layout `from` (fp16 or bf16) into the fp8 block
// format of Fp8LayoutOf(from, fp8), computing the scales. InvalidArgument
// (naming the slice) when the block holds NaN or infinity, or when the
// sizes are not from.BlockBytes() and the fp8 layout's BlockBytes().
Status QuantizeBlock(const Layout& from, DType fp8, std::span<const std::byte> in,
                     std::span<std::byte> out);

// Restores an fp8 block (layout `fp8_layout`) to `to` (kFloat16 or
// kBFloat16): each value times its scale, rounded to nearest even.
// InvalidArgument for a scale that is not positive and finite, a NaN code,
// or wrong sizes; nothing meaningful is in `out` then.
Status DequantizeBlock(const Layout& fp8_layout, DType to, std::span<const std::byte> in,
                       std::span<std::byte> out);

// Quantize on demote (docs/fp8.md): how the lower tiers (ssd, remote) keep
// the blocks of a 16-bit namespace. kOff keeps every byte as written;
// kFp8E4M3 and kFp8E5M2 keep each block in that fp8 block format (half the
// bytes, plus the scales) and restore it to the namespace's dtype when it
// comes back up: lossy, within the format's half step per value.
enum class Quantize : uint8_t { kOff = 0, kFp8E4M3 = 1, kFp8E5M2 = 2 };
std::string_view QuantizeName(Quantize q);  // "off", "fp8_e4m3", "fp8_e5m2"
// Parses QuantizeName()'s names; false if unknown.
bool ParseQuantize(std::string_view name, Quantize* out);
// Whether `q` may apply to blocks of `layout`: kOff always, fp8 only to
// fp16 and bf16 layouts (InvalidArgument names the dtype otherwise).
Status CheckQuantize(const Layout& layout, Quantize q);
// The layout a block of `layout` is kept in under `q` (itself for kOff).
// REQUIRES: CheckQuantize(layout, q) is OK.
Layout StoredLayout(const Layout& layout, Quantize q);

// Which code runs QuantizeBlock and DequantizeBlock: "avx2" (AVX2 + F16C,
// chosen at run time where the CPU has them) or "scalar". Both give the
// same bytes.
const char* Fp8CodecPath();
// Forces the scalar code (tests compare the two). Not thread-safe against
// concurrent codec calls.
void SetFp8CodecScalarForTesting(bool scalar);

}  // namespace kvtier

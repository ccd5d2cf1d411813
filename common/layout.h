// Layout: the shape of one namespace's KV blocks (DESIGN.md §1).
//
// A block holds what the model caches of `block_tokens` consecutive tokens
// for all layers, in Planes() planes per layer. A K/V layout (KvKind::
// kKeyValue, 2 planes) holds K and V, laid out as
// [layer][k|v][token][kv_head][head_dim]; an MLA latent layout (kLatent,
// DeepSeek-V2/V3's multi-head latent attention, 1 plane) holds one latent
// vector per token and layer (kv_lora_rank + rope dims, e.g. 512 + 64 = 576
// values as head_dim, kv_heads 1), laid out as [layer][token][kv_head]
// [head_dim]. Both are
//   offset(layer, plane, token, head, dim) =
//     ((((layer * planes + plane) * block_tokens + token) * kv_heads + head) * head_dim + dim)
//     * dtype_bytes
// The kernels and the copy helpers read exactly this. An fp8 block
// (e4m3, e5m2) has these values, one byte each, then its scales: one fp32
// per (layer, plane, kv_head), [layer][plane][kv_head] (common/fp8.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier {

enum class DType : uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFp8E4M3 = 3,
  kFp8E5M2 = 4
};

// Bytes of one value (an fp8 block's scales are extra: Layout::ScaleBytes).
uint32_t DTypeBytes(DType dtype);
inline bool IsFp8(DType dtype) { return dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2; }
std::string_view DTypeName(DType dtype);  // "fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2"
// Parses DTypeName()'s names; false if unknown.
bool ParseDType(std::string_view name, DType* out);

// What a block holds per token and layer: K and V (most models), or one MLA
// latent vector (DeepSeek-V2/V3), which has no K/V split and no heads.
enum class KvKind : uint8_t { kKeyValue = 0, kLatent = 1 };
inline constexpr uint8_t kMaxKvKind = static_cast<uint8_t>(KvKind::kLatent);
std::string_view KvKindName(KvKind kind);  // "kv", "latent"
// Parses KvKindName()'s names; false if unknown.
bool ParseKvKind(std::string_view name, KvKind* out);

struct Layout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kFloat16;
  uint32_t block_tokens = 0;
  // Last, so that aggregate initializers of the five fields above keep
  // meaning a K/V layout.
  KvKind kind = KvKind::kKeyValue;

  // Planes per layer: 2 (K, V) for kKeyValue, 1 (the latent) for kLatent.
  uint32_t Planes() const { return kind == KvKind::kLatent ? 1 : 2; }
  // planes x layers x kv_heads x head_dim x dtype bytes: the values of a token.
  uint64_t BytesPerToken() const {
    return uint64_t{Planes()} * layers * kv_heads * head_dim * DTypeBytes(dtype);
  }
  // The values of a block.
  uint64_t ValueBytes() const { return BytesPerToken() * block_tokens; }
  // An fp8 block's scales (planes x layers x kv_heads fp32); 0 for other dtypes.
  uint64_t ScaleBytes() const {
    return IsFp8(dtype) ? uint64_t{Planes()} * layers * kv_heads * 4 : 0;
  }
  // A whole block: its values, then its scales.
  uint64_t BlockBytes() const { return ValueBytes() + ScaleBytes(); }

  // Every field positive, a known dtype and kind, kv_heads 1 for a latent
  // layout, and a block no larger than kMaxBlockBytes.
  Status Validate() const;
  // "layers=32 kv_heads=8 head_dim=128 dtype=fp16 block_tokens=16", then
  // " kind=latent" for a latent layout (a K/V layout's string names no kind).
  std::string ToString() const;

  friend bool operator==(const Layout&, const Layout&) = default;
};

// Blocks above this size are refused: they would not fit a slab or a frame
// of any reasonable tier (Mooncake's 512-token blocks of a 70B model are 160 MiB).
inline constexpr uint64_t kMaxBlockBytes = 1ULL << 30;

}  // namespace kvtier

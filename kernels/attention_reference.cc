// The CPU reference of decode attention: the CUDA kernels' algorithm (same
// chunks, same base-2 log-sum-exp partials, same merge), written for clarity.
// Within a chunk it takes the exact two-pass softmax (max first, then sums)
// where the GPU streams an online softmax; both are exact rewritings of the
// same sum, so they differ by fp32 rounding only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "kernels/attention.h"
#include "kernels/internal/attention_check.h"
#include "kernels/internal/chunks.h"
#include "kernels/internal/host_convert.h"

namespace kvtier::kernels {
namespace {

using internal::AttendBegin;
using internal::ChunkTokens;
using internal::LiveChunks;
using internal::TokenRange;

constexpr float kLog2e = 1.4426950408889634f;

// Read-only view of the blocks of one call, in elements of the dtype.
struct Blocks {
  DType dtype;
  uint64_t value_bytes;  // of a block: where an fp8 block's scale table starts
  uint32_t layer;
  uint32_t kv_heads;
  const std::byte* arena;
  uint64_t slot_stride_bytes;
  const int32_t* table;  // [batch][max_blocks_per_seq]
  uint32_t max_blocks_per_seq;
  uint64_t block_tokens;
  uint64_t token_stride;  // kv_heads * head_dim
  uint64_t k_offset;      // layer * 2 * block_tokens * token_stride
  uint64_t v_offset;      // k_offset + block_tokens * token_stride
  uint64_t head_dim;

  // Row of K (kv = 0) or V (kv = 1) of KV head h, token t of sequence b:
  // [head_dim] elements.
  const void* Row(uint32_t b, int64_t t, uint32_t kv, uint32_t h) const {
    const auto ut = static_cast<uint64_t>(t);
    const int32_t slot = table[static_cast<uint64_t>(b) * max_blocks_per_seq + ut / block_tokens];
    const uint64_t element =
        (kv == 0 ? k_offset : v_offset) + (ut % block_tokens) * token_stride + h * head_dim;
    return arena + static_cast<uint64_t>(slot) * slot_stride_bytes + element * DTypeBytes(dtype);
  }

  // The row widened to fp32: 16-bit values exactly, fp8 codes times their
  // scale (the block's, for this layer, K or V, and head).
  void Widen(uint32_t b, int64_t t, uint32_t kv, uint32_t h, float* out) const {
    const void* row = Row(b, t, kv, h);
    if (!IsFp8(dtype)) return internal::WidenToFloat(dtype, row, head_dim, out);
    const auto ut = static_cast<uint64_t>(t);
    const int32_t slot = table[static_cast<uint64_t>(b) * max_blocks_per_seq + ut / block_tokens];
    float scale;
    std::memcpy(&scale,
                arena + static_cast<uint64_t>(slot) * slot_stride_bytes + value_bytes +
                    4 * ((2ULL * layer + kv) * kv_heads + h),
                4);
    const auto* codes = static_cast<const uint8_t*>(row);
    for (uint64_t d = 0; d < head_dim; ++d) out[d] = Fp8ToFloat(codes[d], dtype) * scale;
  }
};

// Dot product in eight interleaved fp32 partial sums (a fixed order, so the
// result is deterministic, and one the compiler can vectorize).
// REQUIRES: n % 8 == 0 (head_dim is 64, 128 or 256).
float Dot(const float* __restrict a, const float* __restrict b, uint64_t n) {
  float lanes[8] = {};
  for (uint64_t d = 0; d < n; d += 8) {
    for (uint64_t j = 0; j < 8; ++j) lanes[j] += a[d + j] * b[d + j];
  }
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// acc[d] += p * x[d], in blocks of 8 like Dot. REQUIRES: n % 8 == 0.
void Axpy(float p, const float* __restrict x, float* __restrict acc, uint64_t n) {
  for (uint64_t d = 0; d < n; d += 8) {
    for (uint64_t j = 0; j < 8; ++j) acc[d + j] += p * x[d + j];
  }
}

// Scratch reused across chunks.
struct Scratch {
  std::vector<float> row;     // [head_dim]: one K or V row, widened
  std::vector<float> scores;  // [G][chunk length], base 2
  std::vector<float> acc;     // [G][head_dim]
};

// Attention of the G query heads `q2` ([G][head_dim], already multiplied by
// scale * log2(e)) over tokens `r` of sequence b, KV head h. Writes the
// normalized partial output ([G][head_dim]) and its base-2 log-sum-exp ([G]).
void AttendChunk(const Blocks& blocks, uint32_t b, uint32_t h, uint32_t group, TokenRange r,
                 const float* q2, Scratch& s, float* out, float* lse) {
  const uint64_t d_n = blocks.head_dim;
  const auto n = static_cast<uint64_t>(r.end - r.begin);
  s.scores.resize(group * n);
  // Pass 1: scores. Each K row is widened once for the whole group, as the
  // GPU reads it once per KV head.
  for (uint64_t i = 0; i < n; ++i) {
    blocks.Widen(b, r.begin + static_cast<int64_t>(i), 0, h, s.row.data());
    for (uint32_t g = 0; g < group; ++g) s.scores[g * n + i] = Dot(q2 + g * d_n, s.row.data(), d_n);
  }
  // Pass 2: subtract the max before exponentiating, so 2^(s - m) <= 1 never
  // overflows and the largest term is exactly 1 (l >= 1).
  std::vector<float> m(group, -std::numeric_limits<float>::infinity());
  std::vector<float> l(group, 0.0f);
  for (uint32_t g = 0; g < group; ++g) {
    for (uint64_t i = 0; i < n; ++i) m[g] = std::max(m[g], s.scores[g * n + i]);
  }
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  for (uint64_t i = 0; i < n; ++i) {
    blocks.Widen(b, r.begin + static_cast<int64_t>(i), 1, h, s.row.data());
    for (uint32_t g = 0; g < group; ++g) {
      const float p = std::exp2(s.scores[g * n + i] - m[g]);
      l[g] += p;
      Axpy(p, s.row.data(), s.acc.data() + g * d_n, d_n);
    }
  }
  for (uint32_t g = 0; g < group; ++g) {
    for (uint64_t d = 0; d < d_n; ++d) out[g * d_n + d] = s.acc[g * d_n + d] / l[g];
    lse[g] = m[g] + std::log2(l[g]);
  }
}

// What the GPU cannot check on the host: seq_lens and the read table entries.
Status CheckDeviceSideValues(const DecodeAttentionParams& p) {
  const int64_t capacity = internal::SeqCapacity(p);
  for (uint32_t b = 0; b < p.batch; ++b) {
    const int64_t len = p.seq_lens[b];
    if (len < 0 || len > capacity) {
      return InvalidArgumentError("seq_lens[" + std::to_string(b) + "] = " + std::to_string(len) +
                                  " outside [0, " + std::to_string(capacity) + "]");
    }
    if (len == 0) continue;
    const int64_t first = AttendBegin(len, p.window) / p.layout.block_tokens;
    const int64_t last = (len - 1) / p.layout.block_tokens;
    for (int64_t j = first; j <= last; ++j) {
      const int32_t slot =
          p.block_table[static_cast<uint64_t>(b) * p.max_blocks_per_seq + static_cast<uint64_t>(j)];
      if (slot < 0 || static_cast<uint32_t>(slot) >= p.num_slots) {
        return InvalidArgumentError("block_table[" + std::to_string(b) + "][" + std::to_string(j) +
                                    "] = " + std::to_string(slot) + " outside [0, " +
                                    std::to_string(p.num_slots) + ")");
      }
    }
  }
  return Status();
}

}  // namespace

Status DecodeAttentionReference(const DecodeAttentionParams& p, void* workspace,
                                uint64_t workspace_bytes) {
  auto plan = internal::CheckDecodeAttention(p, workspace, workspace_bytes);
  if (!plan.ok()) return plan.status();
  KVTIER_RETURN_IF_ERROR(CheckDeviceSideValues(p));

  const Layout& l = p.layout;
  const uint64_t d_n = l.head_dim;
  const uint32_t group = p.num_q_heads / l.kv_heads;
  const uint64_t token_stride = static_cast<uint64_t>(l.kv_heads) * d_n;
  const uint64_t block_elems = l.block_tokens * token_stride;
  const DType io = internal::IoDType(p);
  const Blocks blocks{l.dtype,
                      l.ValueBytes(),
                      p.layer,
                      l.kv_heads,
                      static_cast<const std::byte*>(p.arena),
                      p.slot_stride_bytes,
                      p.block_table,
                      p.max_blocks_per_seq,
                      l.block_tokens,
                      token_stride,
                      2ULL * p.layer * block_elems,
                      (2ULL * p.layer + 1) * block_elems,
                      d_n};
  const float scale2 = internal::EffectiveScale(p) * kLog2e;
  const uint32_t chunks = plan->num_chunks;
  const int64_t chunk_tokens = plan->chunk_tokens;
  // Partials: o_part [batch][num_q_heads][chunks][head_dim], lse
  // [batch][num_q_heads][chunks] (DecodeAttentionPlan's layout).
  auto* o_part = static_cast<float*>(workspace);
  float* lse_part = nullptr;
  if (chunks > 1) {
    const auto ws = internal::PartialsLayout(p.batch, p.num_q_heads, chunks, d_n);
    lse_part = reinterpret_cast<float*>(static_cast<std::byte*>(workspace) + ws.lse_offset_bytes);
  }

  Scratch s;
  s.row.resize(d_n);
  s.acc.resize(group * d_n);
  std::vector<float> q2(group * d_n);
  std::vector<float> out(group * d_n);
  std::vector<float> lse(group);
  for (uint32_t b = 0; b < p.batch; ++b) {
    const int64_t len = p.seq_lens[b];
    const auto live = static_cast<uint64_t>(LiveChunks(len, p.window, chunk_tokens));
    for (uint32_t h = 0; h < l.kv_heads; ++h) {
      const uint64_t head0 = static_cast<uint64_t>(b) * p.num_q_heads + h * group;  // first q head
      void* o_group = static_cast<std::byte*>(p.o) + head0 * d_n * DTypeBytes(io);
      if (live == 0) {  // an empty sequence: zeros, as documented
        std::memset(o_group, 0, group * d_n * DTypeBytes(io));
        continue;
      }
      internal::WidenToFloat(io, static_cast<const std::byte*>(p.q) + head0 * d_n * DTypeBytes(io),
                             group * d_n, q2.data());
      for (float& x : q2) x *= scale2;  // scores come out in base 2, as on the GPU
      if (chunks == 1) {
        AttendChunk(blocks, b, h, group, ChunkTokens(len, p.window, chunk_tokens, 0), q2.data(), s,
                    out.data(), lse.data());
        internal::NarrowFromFloat(io, out.data(), group * d_n, o_group);
        continue;
      }
      for (uint64_t c = 0; c < live; ++c) {
        AttendChunk(blocks, b, h, group,
                    ChunkTokens(len, p.window, chunk_tokens, static_cast<int64_t>(c)), q2.data(), s,
                    out.data(), lse.data());
        for (uint32_t g = 0; g < group; ++g) {
          const uint64_t row = (head0 + g) * chunks + c;
          std::memcpy(o_part + row * d_n, out.data() + g * d_n, d_n * sizeof(float));
          lse_part[row] = lse[g];
        }
      }
      // Merge pass, reading back only the live chunks from the workspace, as
      // the GPU's second kernel does. Weights 2^(lse_c - M) <= 1, the largest
      // exactly 1, so the sum is >= 1 and nothing overflows.
      for (uint32_t g = 0; g < group; ++g) {
        const uint64_t row0 = (head0 + g) * chunks;
        float max_lse = -std::numeric_limits<float>::infinity();
        for (uint64_t c = 0; c < live; ++c) max_lse = std::max(max_lse, lse_part[row0 + c]);
        float sum = 0;
        float* o = out.data() + g * d_n;
        std::fill(o, o + d_n, 0.0f);
        for (uint64_t c = 0; c < live; ++c) {
          const float w = std::exp2(lse_part[row0 + c] - max_lse);
          sum += w;
          const float* part = o_part + (row0 + c) * d_n;
          for (uint64_t d = 0; d < d_n; ++d) o[d] += w * part[d];
        }
        for (uint64_t d = 0; d < d_n; ++d) o[d] /= sum;
      }
      internal::NarrowFromFloat(io, out.data(), group * d_n, o_group);
    }
  }
  return Status();
}

}  // namespace kvtier::kernels

// The decode attention kernels (device code only), included by attention.cu
// and, on machines without a GPU, by tests/kernels/emulated_kernel_test.cc,
// which runs them on the CPU with an emulation of threads, warps, shuffles
// and barriers. Keep to the intrinsics that emulation provides: __ldg,
// __shfl_xor_sync, __syncthreads, __uint_as_float, threadIdx, blockIdx.
//
// Decode attention on the GPU: split-K over KV blocks read in place through a
// block table, then a log-sum-exp merge (attention.h has the math).
//
// Decode reads every K/V byte once and does ~G FMAs per element (G query
// heads per KV head), so it is bound by memory bandwidth. The design follows
// from that:
//  - One CTA per (chunk, KV head, sequence), all G query heads of the group
//    in the CTA: each K/V row is read from memory once, not G times.
//  - Each lane owns 8 consecutive dims (one 16-byte vector load) of a row;
//    head_dim / 8 lanes (8, 16, 32) cover a row, so a warp covers 4, 2 or 1
//    rows per load and every load instruction moves 512 contiguous-per-row
//    bytes. head_dim is a runtime value: a lane's registers do not depend on
//    it, so only (q/o type, 16-bit or fp8 K/V, G) are template parameters
//    (16 instantiations). fp8 blocks (KvFp8; e4m3 or e5m2 chosen at run
//    time) load 8 codes (8 bytes) per lane and the row's scale from the
//    block's scale table, and dequantize in registers before the same fp32
//    arithmetic.
//  - A "row group" (the lanes of one row) walks the chunk's tokens strided
//    by the CTA's row groups, kUnroll tokens at a time: all their K and V
//    loads are issued before any is used, 2 x kUnroll x 16 bytes in flight
//    per lane (128 B), enough with 2+ CTAs per SM to cover HBM latency.
//  - Scores are reduced across a row's lanes with xor shuffles; each row
//    group keeps its own online softmax (running max m, sum l, fp32 acc for
//    its 8 dims), and the CTA merges its row groups through shared memory.
//  - Exponentials are exp2 of scores pre-scaled by log2(e) (q is multiplied
//    by softmax_scale * log2(e) once), a single MUFU op each.
// K/V are read with ld.global.nc (read-only path, __ldg): the kernel never
// writes them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/internal/attention_check.h"
#include "kernels/internal/chunks.h"
#include "kernels/internal/fp8_device.cuh"

namespace kvtier::kernels::internal {

constexpr uint32_t kThreads = 128;
constexpr uint32_t kWarps = kThreads / 32;
constexpr uint32_t kDimsPerLane = 8;  // one 16-byte vector of 2-byte elements
constexpr uint32_t kUnroll = 4;       // tokens per row group in flight
// Row groups x head_dim is the same for every head_dim (each lane holds 8
// dims): the CTA's partial accumulators fill kThreads * 8 floats per head.
constexpr uint32_t kAccPerHead = kThreads * kDimsPerLane;
constexpr uint32_t kMaxRowGroups = kThreads * kDimsPerLane / 64;  // head_dim 64

// DecodeAttentionParams, validated and flattened for the device.
struct DecodeArgs {
  const uint4* q;              // [batch][num_q_heads][head_dim], as 16-byte vectors
  uint16_t* o;                 // [batch][num_q_heads][head_dim]
  const char* arena;           // slot s at arena + s * slot_stride
  const int32_t* block_table;  // [batch][max_blocks]
  const int32_t* seq_lens;     // [batch]
  float* o_part;               // [batch][num_q_heads][num_chunks][head_dim] (split only)
  float* lse_part;             // [batch][num_q_heads][num_chunks], base 2 (split only)
  uint64_t slot_stride;        // bytes
  uint64_t k_offset;           // elements from a slot to `layer`'s K
  uint64_t v_offset;           // elements from a slot to `layer`'s V
  uint64_t token_stride;       // elements between tokens: kv_heads * head_dim
  uint64_t scale_offset;       // fp8 blocks: bytes from a slot to `layer`'s K scales
  int64_t capacity;            // max_blocks * block_tokens
  int64_t window;              // 0 = none
  int64_t chunk_tokens;
  uint32_t num_chunks;
  uint32_t num_slots;
  FastDivmod block_tokens;  // t -> (block index, row in block)
  uint32_t max_blocks;
  uint32_t head_dim;
  uint32_t num_q_heads;
  uint32_t kv_heads;
  bool fp8_e5m2;     // fp8 blocks: e5m2 (else e4m3)
  float scale_log2;  // softmax_scale * log2(e)
};

// Flattens validated params (host code, shared by the launcher and the CPU
// emulation of the kernels). `workspace` holds the partials when split.
inline DecodeArgs MakeDecodeArgs(const DecodeAttentionParams& p, const DecodeAttentionPlan& plan,
                                 void* workspace) {
  constexpr float kLog2e = 1.4426950408889634f;
  const Layout& l = p.layout;
  const uint64_t token_stride = static_cast<uint64_t>(l.kv_heads) * l.head_dim;
  const uint64_t block_elems = l.block_tokens * token_stride;
  DecodeArgs args{};
  args.q = static_cast<const uint4*>(p.q);
  args.o = static_cast<uint16_t*>(p.o);
  args.arena = static_cast<const char*>(p.arena);
  args.block_table = p.block_table;
  args.seq_lens = p.seq_lens;
  if (plan.num_chunks > 1) {
    const auto ws = PartialsLayout(p.batch, p.num_q_heads, plan.num_chunks, l.head_dim);
    args.o_part = static_cast<float*>(workspace);
    args.lse_part = reinterpret_cast<float*>(static_cast<char*>(workspace) + ws.lse_offset_bytes);
  }
  args.slot_stride = p.slot_stride_bytes;
  args.k_offset = 2ULL * p.layer * block_elems;
  args.v_offset = args.k_offset + block_elems;
  args.token_stride = token_stride;
  // An fp8 block's scale table, [layer][k|v][kv_head] fp32, after its values.
  args.scale_offset = l.ValueBytes() + 4ULL * 2 * p.layer * l.kv_heads;
  args.capacity = SeqCapacity(p);
  args.window = p.window < args.capacity ? p.window : args.capacity;
  args.chunk_tokens = plan.chunk_tokens;
  args.num_chunks = plan.num_chunks;
  args.num_slots = p.num_slots;
  args.block_tokens = FastDivmod(l.block_tokens);
  args.max_blocks = p.max_blocks_per_seq;
  args.head_dim = l.head_dim;
  args.num_q_heads = p.num_q_heads;
  args.kv_heads = l.kv_heads;
  args.fp8_e5m2 = l.dtype == DType::kFp8E5M2;
  args.scale_log2 = EffectiveScale(p) * kLog2e;
  return args;
}

template <typename T>
__device__ __forceinline__ void Widen8(const uint4& v, float (&f)[kDimsPerLane]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (uint32_t i = 0; i < 4; ++i) {
    f[2 * i] = Elem<T>::Lo(w[i]);
    f[2 * i + 1] = Elem<T>::Hi(w[i]);
  }
}

// How K and V are stored: 16-bit values of the io type (8 per 16-byte load)
// or fp8 codes with a scale per (block, layer, K or V, head) (8 per 8-byte
// load), dequantized as they are widened: code value times scale, as the
// reference does.
template <typename T>
struct Kv16 {
  using Raw = uint4;
  static constexpr bool kScaled = false;
  __device__ static void Widen(const Raw& raw, float /*scale*/, bool /*e5m2*/,
                               float (&f)[kDimsPerLane]) {
    Widen8<T>(raw, f);
  }
};

// Both fp8 formats in one kernel: which one is a uniform runtime choice
// (a.fp8_e5m2), not a template parameter, which would double the kernels
// built for a branch that costs nothing in a memory-bound loop.
struct KvFp8 {
  using Raw = uint2;
  static constexpr bool kScaled = true;
  __device__ static void Widen(const Raw& raw, float scale, bool e5m2, float (&f)[kDimsPerLane]) {
    const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
    for (uint32_t i = 0; i < kDimsPerLane; ++i) {
      const uint32_t c = (w[i / 4] >> (8 * (i % 4))) & 0xffu;
      f[i] = (e5m2 ? Fp8E5M2::Decode(c) : Fp8E4M3::Decode(c)) * scale;
    }
  }
};

__device__ __forceinline__ int64_t SeqLen(const DecodeArgs& a, uint32_t b) {
  // Device memory cannot be checked on the host: clamp (attention.h).
  const int64_t len = a.seq_lens[b];
  return len < 0 ? 0 : (len > a.capacity ? a.capacity : len);
}

// A max that keeps NaN (fmaxf drops it), so a NaN score poisons the output
// instead of vanishing when it is the first one a row group sees.
__device__ __forceinline__ float MaxKeepNan(float a, float b) { return b != b ? b : fmaxf(a, b); }

// Grid (num_chunks, kv_heads, batch), kThreads threads. Writes o directly
// when num_chunks == 1, else the chunk's partial (normalized o, lse).
// T: q's and o's type; Kv: how K and V are stored (Kv16<T> or KvFp8).
template <typename T, typename Kv, uint32_t kGroup>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(const DecodeArgs a) {
  const uint32_t chunk = blockIdx.x;
  const uint32_t kv_head = blockIdx.y;
  const uint32_t b = blockIdx.z;
  const uint32_t head_dim = a.head_dim;
  const uint32_t lanes_per_row = head_dim / kDimsPerLane;  // 8, 16, 32
  const uint32_t rows_per_warp = 32 / lanes_per_row;       // 4, 2, 1
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t sub = lane % lanes_per_row;  // this lane's dims: [sub * 8, sub * 8 + 8)
  const uint32_t row = threadIdx.x / 32 * rows_per_warp + lane / lanes_per_row;
  const uint32_t num_rows = kWarps * rows_per_warp;  // row groups in the CTA
  const uint64_t head0 = uint64_t{b} * a.num_q_heads + uint64_t{kv_head} * kGroup;

  const int64_t len = SeqLen(a, b);
  const TokenRange r = ChunkTokens(len, a.window, a.chunk_tokens, chunk);
  if (r.begin >= r.end) {
    // A chunk past the sequence's end: the merge never reads it. Without
    // split-K it is the whole (empty) sequence: the output is zero.
    if (a.num_chunks == 1) {
      for (uint32_t i = threadIdx.x; i < kGroup * head_dim; i += kThreads) {
        a.o[head0 * head_dim + i] = 0;
      }
    }
    return;
  }

  // This lane's 8 dims of each query of the group, times scale * log2(e).
  float q[kGroup][kDimsPerLane];
#pragma unroll
  for (uint32_t g = 0; g < kGroup; ++g) {
    Widen8<T>(a.q[((head0 + g) * head_dim) / kDimsPerLane + sub], q[g]);
#pragma unroll
    for (uint32_t i = 0; i < kDimsPerLane; ++i) q[g][i] *= a.scale_log2;
  }
  // Online softmax state of this row group (identical in its lanes but acc).
  float m[kGroup];
  float l[kGroup];
  float acc[kGroup][kDimsPerLane];
#pragma unroll
  for (uint32_t g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kDimsPerLane; ++i) acc[g][i] = 0.0f;
  }

  const int32_t* table = a.block_table + uint64_t{b} * a.max_blocks;
  const uint64_t lane_offset = uint64_t{kv_head} * head_dim + sub * kDimsPerLane;
  // The loop bound is the same for the whole CTA (rows past the end just
  // see invalid tokens): every lane of a warp must reach each shuffle.
  for (int64_t base = r.begin; base < r.end; base += int64_t{num_rows} * kUnroll) {
    // Issue every load of this step before using any.
    typename Kv::Raw k_raw[kUnroll];
    typename Kv::Raw v_raw[kUnroll];
    float k_scale[kUnroll];
    float v_scale[kUnroll];
    bool valid[kUnroll];
    bool poisoned[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const int64_t t = base + row + int64_t{u} * num_rows;
      valid[u] = t < r.end;
      poisoned[u] = false;
      k_raw[u] = typename Kv::Raw{};
      v_raw[u] = typename Kv::Raw{};
      k_scale[u] = 1.0f;
      v_scale[u] = 1.0f;
      if (valid[u]) {
        uint32_t block_index = 0;
        uint32_t token_in_block = 0;  // t < capacity <= INT32_MAX: FastDivmod applies
        a.block_tokens.DivMod(static_cast<uint32_t>(t), &block_index, &token_in_block);
        const int32_t slot = __ldg(table + block_index);
        if (slot >= 0 && static_cast<uint32_t>(slot) < a.num_slots) {
          // Row token_in_block of the slot, KV head kv_head, this lane's dims.
          const char* block = a.arena + static_cast<uint64_t>(slot) * a.slot_stride;
          const uint64_t row_elem = static_cast<uint64_t>(token_in_block) * a.token_stride;
          using Raw = typename Kv::Raw;
          k_raw[u] = __ldg(reinterpret_cast<const Raw*>(block) +
                           (a.k_offset + row_elem + lane_offset) / kDimsPerLane);
          v_raw[u] = __ldg(reinterpret_cast<const Raw*>(block) +
                           (a.v_offset + row_elem + lane_offset) / kDimsPerLane);
          if constexpr (Kv::kScaled) {
            const auto* scales = reinterpret_cast<const float*>(block + a.scale_offset);
            k_scale[u] = __ldg(scales + kv_head);
            v_scale[u] = __ldg(scales + a.kv_heads + kv_head);
          }
        } else {
          poisoned[u] = true;  // a bad table entry: NaN out, nothing read
        }
      }
    }
    // Scores. Every lane shuffles, valid or not: the xor offsets stay inside
    // a row's lanes, and shuffles need the whole warp.
    float p[kUnroll][kGroup];  // scores, then (below) their weights
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      float k[kDimsPerLane];
      Kv::Widen(k_raw[u], k_scale[u], a.fp8_e5m2, k);
#pragma unroll
      for (uint32_t g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < kDimsPerLane; ++i) dot = fmaf(q[g][i], k[i], dot);
        for (uint32_t offset = lanes_per_row / 2; offset > 0; offset /= 2) {
          dot += __shfl_xor_sync(0xffffffffu, dot, static_cast<int>(offset));
        }
        p[u][g] = poisoned[u] ? NAN : (valid[u] ? dot : -INFINITY);
      }
    }
    // Online softmax: rescale the running sums to the step's new max once,
    // then add the step's tokens with weights 2^(s - max) <= 1 (no overflow).
#pragma unroll
    for (uint32_t g = 0; g < kGroup; ++g) {
      float new_m = m[g];
#pragma unroll
      for (uint32_t u = 0; u < kUnroll; ++u) new_m = MaxKeepNan(new_m, p[u][g]);
      if (new_m == -INFINITY) {  // no token for this row group yet
#pragma unroll
        for (uint32_t u = 0; u < kUnroll; ++u) p[u][g] = 0.0f;
        continue;
      }
      const float alpha = exp2f(m[g] - new_m);  // first token (m = -inf): 0
      l[g] *= alpha;
#pragma unroll
      for (uint32_t i = 0; i < kDimsPerLane; ++i) acc[g][i] *= alpha;
#pragma unroll
      for (uint32_t u = 0; u < kUnroll; ++u) {
        p[u][g] = exp2f(p[u][g] - new_m);  // invalid token: 2^-inf = 0
        l[g] += p[u][g];
      }
      m[g] = new_m;
    }
    // V, one token at a time so that only 8 widened values are live.
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      float v[kDimsPerLane];
      Kv::Widen(v_raw[u], v_scale[u], a.fp8_e5m2, v);
#pragma unroll
      for (uint32_t g = 0; g < kGroup; ++g) {
#pragma unroll
        for (uint32_t i = 0; i < kDimsPerLane; ++i) acc[g][i] = fmaf(p[u][g], v[i], acc[g][i]);
      }
    }
  }

  // Merge the row groups. Row group `row` holds dims [sub * 8, sub * 8 + 8)
  // of its partial at s_acc[g][row * head_dim + sub * 8 ...], which is
  // [threadIdx.x * 8 ...] because lanes_per_row * 8 == head_dim.
  __shared__ float s_m[kMaxRowGroups][kGroup];
  __shared__ float s_l[kMaxRowGroups][kGroup];
  __shared__ __align__(16) float s_acc[kGroup][kAccPerHead];
#pragma unroll
  for (uint32_t g = 0; g < kGroup; ++g) {
    if (sub == 0) {
      s_m[row][g] = m[g];
      s_l[row][g] = l[g];
    }
    float4* dst = reinterpret_cast<float4*>(&s_acc[g][threadIdx.x * kDimsPerLane]);
    dst[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
    dst[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < kGroup * head_dim; i += kThreads) {
    const uint32_t g = i / head_dim;
    const uint32_t d = i % head_dim;
    // The chunk is live, so row group 0 saw its first token: max is finite
    // (or NaN when poisoned) and the weighted sum of l is >= 1.
    float max_m = -INFINITY;
    for (uint32_t rg = 0; rg < num_rows; ++rg) max_m = MaxKeepNan(max_m, s_m[rg][g]);
    float sum = 0.0f;
    float out = 0.0f;
    for (uint32_t rg = 0; rg < num_rows; ++rg) {
      if (s_m[rg][g] == -INFINITY) continue;  // a row group with no token
      const float w = exp2f(s_m[rg][g] - max_m);
      sum = fmaf(s_l[rg][g], w, sum);
      out = fmaf(s_acc[g][rg * head_dim + d], w, out);
    }
    out /= sum;
    if (a.num_chunks == 1) {
      a.o[(head0 + g) * head_dim + d] = Elem<T>::Narrow(out);
    } else {
      const uint64_t part = (head0 + g) * a.num_chunks + chunk;
      a.o_part[part * head_dim + d] = out;
      if (d == 0) a.lse_part[part] = max_m + log2f(sum);
    }
  }
}

// Grid (num_q_heads, batch), head_dim threads: o = sum_c w_c o_c / sum_c w_c
// with w_c = 2^(lse_c - max lse) over the sequence's live chunks.
template <typename T>
__global__ void MergeChunksKernel(const DecodeArgs a) {
  const uint32_t qh = blockIdx.x;
  const uint32_t b = blockIdx.y;
  const uint32_t d = threadIdx.x;
  const uint64_t row = uint64_t{b} * a.num_q_heads + qh;
  const int64_t live = LiveChunks(SeqLen(a, b), a.window, a.chunk_tokens);
  const float* lse = a.lse_part + row * a.num_chunks;
  const float* part = a.o_part + row * a.num_chunks * a.head_dim + d;
  float max_lse = -INFINITY;
  for (int64_t c = 0; c < live; ++c) max_lse = MaxKeepNan(max_lse, lse[c]);
  float sum = 0.0f;
  float out = 0.0f;
  for (int64_t c = 0; c < live; ++c) {
    const float w = exp2f(lse[c] - max_lse);  // <= 1; the largest is 1
    sum += w;
    out = fmaf(w, part[c * int64_t{a.head_dim}], out);
  }
  a.o[row * a.head_dim + d] = Elem<T>::Narrow(live > 0 ? out / sum : 0.0f);
}

}  // namespace kvtier::kernels::internal

// Decode attention over KV blocks gathered through a block table
// (DESIGN.md §1, §6): one new query token per sequence; K and V are read in
// place from the slots of a block arena (the daemon's device arena opened
// through CUDA IPC, or any buffer cut into slots the same way).
//
// For sequence b and query head qh, with G = num_q_heads / kv_heads query
// heads per KV head (GQA; G = num_q_heads is MQA) and h = qh / G:
//   s[t] = softmax_scale * dot(q[b][qh], K[b][t][h])   for t in [lo, len)
//   o[b][qh] = sum_t softmax(s)[t] * V[b][t][h]
// where len = seq_lens[b] and lo = max(0, len - window) (lo = 0 without a
// window). Token t of sequence b lives in slot block_table[b][t / block_tokens]
// at row t % block_tokens.
//
// Split-K: the attended tokens [lo, len) are cut into chunks of chunk_tokens
// tokens, chunk c covering [lo + c * chunk_tokens, ...). Each chunk yields a
// normalized partial output o_c and its log-sum-exp lse_c (base 2, of the
// scores scaled by log2(e)); a second pass merges them:
//   M = max_c lse_c,  w_c = 2^(lse_c - M),  o = sum_c w_c * o_c / sum_c w_c.
// This is exact algebra (not an approximation), so a batch of one 128k-token
// sequence spreads over hundreds of CTAs and still fills the GPU. With a
// single chunk the pass writes o directly and needs no workspace.
// docs/kernels.md has the derivation and the tolerances.
//
// Precision: q, K, V and o share the blocks' dtype (fp16 or bf16). Products,
// sums, max and exponentials are fp32; o is rounded once, to nearest even.
// fp8 blocks (e4m3, e5m2; common/fp8.h): each K and V value is dequantized
// as it is read, times its block's scale for (layer, K or V, KV head) from
// the block's scale table, then the same fp32 arithmetic; q and o are then
// of io_dtype (fp16 or bf16). docs/fp8.md has the accuracy against fp16.
//
// Thread-safety: the functions are stateless; concurrent calls on distinct
// outputs and workspaces are fine.
#pragma once

#include <cstdint>
#include <vector>

#include "common/layout.h"
#include "common/result.h"
#include "common/status.h"
#include "kernels/kernels.h"

namespace kvtier::kernels {

// Query heads per KV head that the kernels implement.
inline constexpr uint32_t kMaxGroupSize = 8;  // ratios 1, 2, 4, 8
// Sequences per call (the CUDA grid's y/z limit).
inline constexpr uint32_t kMaxBatch = 65535;

struct DecodeAttentionParams {
  // ---- Shape. PlanDecodeAttention validates these. ----

  // The blocks' layout (common/layout.h). dtype: kFloat16 or kBFloat16, also
  // the dtype of q and o; or kFp8E4M3 / kFp8E5M2 (blocks with scale tables),
  // q and o then of io_dtype. head_dim: 64, 128 or 256. layers, kv_heads
  // and block_tokens: any positive value. kind: kKeyValue (an MLA latent
  // layout has no K and V to attend over).
  Layout layout;
  // q's and o's dtype when the blocks are fp8: kFloat16 or kBFloat16.
  // Ignored for 16-bit blocks (q and o are layout.dtype).
  DType io_dtype = DType::kFloat16;
  // The layer read inside each block. REQUIRES: < layout.layers.
  uint32_t layer = 0;
  // Sequences, one query token each. 1 .. kMaxBatch.
  uint32_t batch = 0;
  // layout.kv_heads * G with G in {1, 2, 4, 8}; query head qh reads KV head
  // qh / G.
  uint32_t num_q_heads = 0;
  // Entries per row of block_table; >= 1. The longest sequence possible is
  // max_blocks_per_seq * block_tokens tokens (at most INT32_MAX).
  uint32_t max_blocks_per_seq = 0;
  // Slots in the arena: block_table entries that are read must be below it.
  uint32_t num_slots = 0;
  // Bytes from one slot to the next. >= layout.BlockBytes(), a multiple of 16.
  uint64_t slot_stride_bytes = 0;
  // Scores are softmax_scale * q.k. 0 means 1 / sqrt(head_dim).
  float softmax_scale = 0;
  // Attend only to the last `window` tokens of each sequence; 0 = all.
  uint32_t window = 0;
  // Split-K chunk length in tokens. 0: PlanDecodeAttention picks one from the
  // shape (enough CTAs to fill a GPU, chunks of at least 256 tokens). A value
  // at least the longest span (max_blocks_per_seq * block_tokens, or window)
  // means no split.
  uint32_t chunk_tokens = 0;

  // ---- Data. Device memory (or device-mapped memory) for DecodeAttention,
  // host memory for DecodeAttentionReference. Each 16-byte aligned. ----

  // q: [batch][num_q_heads][head_dim] of layout.dtype, dense. The new token's
  // query, already rotated (RoPE is the caller's).
  const void* q = nullptr;
  // o: [batch][num_q_heads][head_dim] of layout.dtype, dense. Only written.
  // May not overlap q, the arena or the workspace.
  void* o = nullptr;
  // arena: slot s is the block at arena + s * slot_stride_bytes, laid out
  // [layer][k|v][token][kv_head][head_dim] of layout.dtype (DESIGN.md §1).
  // Only the rows of `layer` for attended tokens are read.
  const void* arena = nullptr;
  // block_table: [batch][max_blocks_per_seq] int32 slot indices. Entry j of
  // row b holds tokens [j * block_tokens, (j + 1) * block_tokens) of sequence
  // b. Only entries holding attended tokens are read: the rest may hold
  // anything (BuildBlockTable pads with kNoSlot).
  const int32_t* block_table = nullptr;
  // seq_lens: [batch] int32, the tokens of each sequence, the new one
  // included (its K and V must already be in the blocks).
  // REQUIRES: 0 <= seq_lens[b] <= max_blocks_per_seq * block_tokens. A
  // sequence of length 0 gets an all-zero output.
  const int32_t* seq_lens = nullptr;
};

// How a shape is cut: what the caller allocates before launching.
struct DecodeAttentionPlan {
  uint32_t chunk_tokens = 0;  // the chunk length used (resolves 0 = auto)
  uint32_t num_chunks = 0;    // chunks of the longest span; 1 = no split-K
  // Workspace for the partials, 0 when num_chunks == 1. Layout (fp32):
  // o_part [batch][num_q_heads][num_chunks][head_dim], then, 16-byte
  // aligned, lse [batch][num_q_heads][num_chunks].
  uint64_t workspace_bytes = 0;
};

// Validates the shape fields of `params` (pointers are not looked at, so this
// can run before anything is allocated) and plans the split. The same params
// always give the same plan, on any machine. InvalidArgument on a shape the
// kernels do not implement.
Result<DecodeAttentionPlan> PlanDecodeAttention(const DecodeAttentionParams& params);

// The CPU reference, and the no-GPU fallback: the same chunks, the same
// partials in `workspace` (host memory, >= plan.workspace_bytes, 16-byte
// aligned; may be null when the plan needs none) and the same merge as the
// CUDA kernels. Also checks what the GPU cannot check on the host: every
// seq_lens value and every block_table entry that is read; on an error
// nothing is written. Single-threaded.
Status DecodeAttentionReference(const DecodeAttentionParams& params, void* workspace,
                                uint64_t workspace_bytes);

// The CUDA kernels: one CTA per (chunk, KV head, sequence), then a merge pass
// when the plan splits. Asynchronous on `stream`; workspace is device memory
// of >= plan.workspace_bytes, used until the work on `stream` completes.
// Returns InvalidArgument for a bad shape or pointer, Unavailable without a
// GPU, Internal if the launch fails. Device-side values cannot be checked on
// the host: a read block_table entry outside [0, num_slots) makes that
// sequence's output NaN (nothing out of bounds is read), and seq_lens are
// clamped to [0, max_blocks_per_seq * block_tokens].
Status DecodeAttention(const DecodeAttentionParams& params, void* workspace,
                       uint64_t workspace_bytes, Stream stream);

// ---- Block tables, for workers ----

// Padding of unused block-table entries. The kernels never read them.
inline constexpr int32_t kNoSlot = -1;

struct BlockTable {
  uint32_t batch = 0;
  uint32_t max_blocks_per_seq = 0;
  // [batch][max_blocks_per_seq] slot indices, row b = seq_slots[b] then
  // kNoSlot up to the row's end.
  std::vector<int32_t> slots;
};

// Builds the table DecodeAttentionParams::block_table points at (copy
// table.slots to the device for the GPU) from each sequence's slots in token
// order. max_blocks_per_seq: row length; 0 = the longest sequence's block
// count (at least 1). InvalidArgument if a sequence has more blocks than
// that, or a slot does not fit an int32.
Result<BlockTable> BuildBlockTable(const std::vector<std::vector<uint32_t>>& seq_slots,
                                   uint32_t max_blocks_per_seq = 0);

}  // namespace kvtier::kernels

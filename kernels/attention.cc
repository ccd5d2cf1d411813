// Planning and host-side validation of decode attention, and block tables.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/layout.h"
#include "kernels/internal/attention_check.h"
#include "kernels/internal/chunks.h"

namespace kvtier::kernels {
namespace {

// Auto split-K. A CTA handles one (chunk, KV head, sequence); a GPU needs
// several resident CTAs per SM to keep enough loads in flight (an H100/H200
// has 132 SMs and holds 2-4 of these CTAs each), so aim for about 1k CTAs
// in all. Chunks stay >= kMinChunkTokens so that the partials (G x
// (head_dim + 1) fp32 per chunk, written then read by the merge) stay a few
// percent of the K/V bytes the chunk reads (2 x 256 x head_dim x 2 bytes).
constexpr uint64_t kTargetCtas = 1024;
constexpr uint64_t kMinChunkTokens = 256;

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint64_t AutoChunkTokens(const DecodeAttentionParams& p, uint64_t span) {
  const uint64_t ctas_without_split = static_cast<uint64_t>(p.batch) * p.layout.kv_heads;
  if (ctas_without_split >= kTargetCtas) return span;
  const uint64_t want_chunks = CeilDiv(kTargetCtas, ctas_without_split);
  uint64_t chunk = std::max(kMinChunkTokens, CeilDiv(span, want_chunks));
  // Whole blocks per chunk: without a window each chunk starts on a block.
  chunk = CeilDiv(chunk, p.layout.block_tokens) * p.layout.block_tokens;
  return std::min(chunk, span);
}

bool Aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

Status CheckPointer(const void* p, uintptr_t alignment, const char* name) {
  if (p == nullptr) return InvalidArgumentError(std::string(name) + " is null");
  if (!Aligned(p, alignment)) {
    return InvalidArgumentError(std::string(name) + " is not " + std::to_string(alignment) +
                                "-byte aligned");
  }
  return Status();
}

}  // namespace

Result<DecodeAttentionPlan> PlanDecodeAttention(const DecodeAttentionParams& p) {
  const Layout& l = p.layout;
  if (Status s = l.Validate(); !s.ok()) return s.WithContext("decode attention layout");
  if (l.kind != KvKind::kKeyValue) {
    // An MLA block holds each token's compressed latent, which attention
    // reads through the model's up-projections: no K or V plane to read here.
    return InvalidArgumentError("MLA latent blocks: decode attention reads K and V, and " +
                                l.ToString() + " is not a K/V layout");
  }
  if (l.dtype != DType::kFloat16 && l.dtype != DType::kBFloat16 && !IsFp8(l.dtype)) {
    return InvalidArgumentError("decode attention supports fp16, bf16 and fp8 blocks, not " +
                                std::string(DTypeName(l.dtype)));
  }
  if (IsFp8(l.dtype) && p.io_dtype != DType::kFloat16 && p.io_dtype != DType::kBFloat16) {
    return InvalidArgumentError(
        "decode attention over fp8 blocks takes q and o in fp16 or bf16, "
        "not " +
        std::string(DTypeName(p.io_dtype)));
  }
  if (l.head_dim != 64 && l.head_dim != 128 && l.head_dim != 256) {
    return InvalidArgumentError("decode attention supports head_dim 64, 128, 256, not " +
                                std::to_string(l.head_dim));
  }
  if (p.layer >= l.layers) {
    return InvalidArgumentError("layer " + std::to_string(p.layer) +
                                " out of range (layers=" + std::to_string(l.layers) + ")");
  }
  if (p.batch == 0 || p.batch > kMaxBatch) {
    return InvalidArgumentError("batch must be in 1.." + std::to_string(kMaxBatch) + ", not " +
                                std::to_string(p.batch));
  }
  if (l.kv_heads > 65535) return InvalidArgumentError("kv_heads above 65535");
  const uint32_t group = p.num_q_heads / l.kv_heads;
  if (p.num_q_heads % l.kv_heads != 0 || (group != 1 && group != 2 && group != 4 && group != 8)) {
    return InvalidArgumentError("num_q_heads (" + std::to_string(p.num_q_heads) +
                                ") must be kv_heads (" + std::to_string(l.kv_heads) +
                                ") times 1, 2, 4 or 8");
  }
  const int64_t capacity = internal::SeqCapacity(p);
  if (p.max_blocks_per_seq == 0 || capacity > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("max_blocks_per_seq * block_tokens must be in 1..INT32_MAX");
  }
  if (p.num_slots == 0) return InvalidArgumentError("num_slots is 0");
  if (p.slot_stride_bytes < l.BlockBytes() || p.slot_stride_bytes % 16 != 0) {
    return InvalidArgumentError("slot_stride_bytes (" + std::to_string(p.slot_stride_bytes) +
                                ") must be >= the block size (" + std::to_string(l.BlockBytes()) +
                                ") and a multiple of 16");
  }
  if (!std::isfinite(p.softmax_scale)) return InvalidArgumentError("softmax_scale is not finite");

  const uint64_t span = p.window > 0 ? std::min<uint64_t>(p.window, static_cast<uint64_t>(capacity))
                                     : static_cast<uint64_t>(capacity);
  const uint64_t chunk =
      p.chunk_tokens == 0 ? AutoChunkTokens(p, span) : std::min<uint64_t>(p.chunk_tokens, span);
  DecodeAttentionPlan plan;
  plan.chunk_tokens = static_cast<uint32_t>(chunk);
  plan.num_chunks = static_cast<uint32_t>(CeilDiv(span, chunk));
  if (plan.num_chunks > 1) {
    // rows = batch * num_q_heads * num_chunks may overflow with a tiny chunk
    // on a huge table; refuse rather than under-allocate.
    uint64_t rows = 0;
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(p.batch) * p.num_q_heads,
                               static_cast<uint64_t>(plan.num_chunks), &rows) ||
        __builtin_mul_overflow(rows, static_cast<uint64_t>(l.head_dim + 2) * sizeof(float),
                               &bytes) ||
        bytes > (uint64_t{1} << 60)) {
      return InvalidArgumentError("split-K workspace too large: raise chunk_tokens");
    }
    plan.workspace_bytes =
        internal::PartialsLayout(p.batch, p.num_q_heads, plan.num_chunks, l.head_dim).total_bytes;
  }
  return plan;
}

namespace internal {

Result<DecodeAttentionPlan> CheckDecodeAttention(const DecodeAttentionParams& p,
                                                 const void* workspace, uint64_t workspace_bytes) {
  auto plan = PlanDecodeAttention(p);
  if (!plan.ok()) return plan;
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.q, 16, "q"));
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.o, 16, "o"));
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.arena, 16, "arena"));
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.block_table, alignof(int32_t), "block_table"));
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.seq_lens, alignof(int32_t), "seq_lens"));
  if (plan->workspace_bytes > 0) {
    KVTIER_RETURN_IF_ERROR(CheckPointer(workspace, 16, "workspace"));
    if (workspace_bytes < plan->workspace_bytes) {
      return InvalidArgumentError("workspace of " + std::to_string(workspace_bytes) +
                                  " bytes, the plan needs " +
                                  std::to_string(plan->workspace_bytes));
    }
  }
  return plan;
}

DType IoDType(const DecodeAttentionParams& p) {
  return IsFp8(p.layout.dtype) ? p.io_dtype : p.layout.dtype;
}

float EffectiveScale(const DecodeAttentionParams& p) {
  return p.softmax_scale != 0 ? p.softmax_scale
                              : 1.0f / std::sqrt(static_cast<float>(p.layout.head_dim));
}

}  // namespace internal

Result<BlockTable> BuildBlockTable(const std::vector<std::vector<uint32_t>>& seq_slots,
                                   uint32_t max_blocks_per_seq) {
  if (seq_slots.empty()) return InvalidArgumentError("block table of no sequence");
  if (seq_slots.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError("too many sequences");
  }
  size_t longest = 1;
  for (const auto& seq : seq_slots) longest = std::max(longest, seq.size());
  if (max_blocks_per_seq == 0) {
    if (longest > std::numeric_limits<uint32_t>::max()) return InvalidArgumentError("too long");
    max_blocks_per_seq = static_cast<uint32_t>(longest);
  }
  BlockTable table;
  table.batch = static_cast<uint32_t>(seq_slots.size());
  table.max_blocks_per_seq = max_blocks_per_seq;
  table.slots.assign(static_cast<size_t>(table.batch) * max_blocks_per_seq, kNoSlot);
  for (size_t b = 0; b < seq_slots.size(); ++b) {
    const auto& seq = seq_slots[b];
    if (seq.size() > max_blocks_per_seq) {
      return InvalidArgumentError("sequence " + std::to_string(b) + " has " +
                                  std::to_string(seq.size()) + " blocks, the table holds " +
                                  std::to_string(max_blocks_per_seq));
    }
    for (size_t j = 0; j < seq.size(); ++j) {
      if (seq[j] > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
        return InvalidArgumentError("slot " + std::to_string(seq[j]) + " does not fit an int32");
      }
      table.slots[b * max_blocks_per_seq + j] = static_cast<int32_t>(seq[j]);
    }
  }
  return table;
}

}  // namespace kvtier::kernels

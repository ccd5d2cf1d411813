// Host-side checks shared by DecodeAttention and its CPU reference, so both
// refuse exactly the same calls (STYLE.md 14).
#pragma once

#include <cstdint>

#include "common/result.h"
#include "kernels/attention.h"

namespace kvtier::kernels::internal {

// PlanDecodeAttention's shape checks, plus: every pointer non-null and
// 16-byte aligned, and the workspace large enough (and aligned) for the plan.
Result<DecodeAttentionPlan> CheckDecodeAttention(const DecodeAttentionParams& params,
                                                 const void* workspace, uint64_t workspace_bytes);

// q's and o's dtype: layout.dtype, or io_dtype for fp8 blocks.
DType IoDType(const DecodeAttentionParams& params);

// softmax_scale, with 0 resolved to 1 / sqrt(head_dim).
float EffectiveScale(const DecodeAttentionParams& params);

// Tokens one table row can hold: max_blocks_per_seq * block_tokens.
inline int64_t SeqCapacity(const DecodeAttentionParams& params) {
  return static_cast<int64_t>(params.max_blocks_per_seq) * params.layout.block_tokens;
}

}  // namespace kvtier::kernels::internal

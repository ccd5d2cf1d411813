// The GPU entry points of a build without CUDA: each validates its arguments
// like the CUDA build (so a bad call is reported the same everywhere), then
// says there is no GPU.
#include "kernels/attention.h"
#include "kernels/block_copy.h"
#include "kernels/fp8_codec.h"
#include "kernels/internal/attention_check.h"
#include "kernels/internal/copy_check.h"
#include "kernels/kernels.h"

namespace kvtier::kernels {
namespace {

Status NoCuda() { return UnavailableError("kvtier was built without CUDA"); }

}  // namespace

std::vector<int> CompiledCudaArchitectures() { return {}; }

Status DecodeAttention(const DecodeAttentionParams& params, void* workspace,
                       uint64_t workspace_bytes, Stream /*stream*/) {
  KVTIER_RETURN_IF_ERROR(internal::CheckDecodeAttention(params, workspace, workspace_bytes));
  return NoCuda();
}

// Nothing to copy succeeds, as in the CUDA build.
Status GatherBlocks(const PagedCopyParams& params, Stream /*stream*/) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedCopy(params));
  return params.num_blocks == 0 ? Status() : NoCuda();
}

Status ScatterBlocks(const PagedCopyParams& params, Stream /*stream*/) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedCopy(params));
  return params.num_blocks == 0 ? Status() : NoCuda();
}

Status CopySlots(const SlotCopyParams& params, Stream /*stream*/) {
  KVTIER_RETURN_IF_ERROR(internal::CheckSlotCopy(params));
  return params.count == 0 ? Status() : NoCuda();
}

Status QuantizeBlocks(const Fp8BlocksParams& params, Stream /*stream*/) {
  KVTIER_RETURN_IF_ERROR(ValidateFp8Blocks(params, true));
  return params.num_blocks == 0 ? Status() : NoCuda();
}

Status DequantizeBlocks(const Fp8BlocksParams& params, Stream /*stream*/) {
  KVTIER_RETURN_IF_ERROR(ValidateFp8Blocks(params, false));
  return params.num_blocks == 0 ? Status() : NoCuda();
}

}  // namespace kvtier::kernels

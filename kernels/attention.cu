// Decode attention on the GPU: the launchers of the kernels in
// internal/attention_kernel.cuh (which explains their design).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/internal/attention_check.h"
#include "kernels/internal/attention_kernel.cuh"
#include "kernels/internal/chunks.h"
#include "kernels/internal/cuda_status.h"

namespace kvtier::kernels {
namespace {

using internal::DecodeArgs;
using internal::DecodeAttentionKernel;
using internal::kThreads;
using internal::MergeChunksKernel;

// Grid (chunk, KV head, sequence), then, when split, the merge over
// (query head, sequence) with head_dim threads.
template <typename T>
cudaError_t Launch(const DecodeArgs& args, uint32_t kv_heads, uint32_t batch, uint32_t group,
                   cudaStream_t stream) {
  const dim3 grid(args.num_chunks, kv_heads, batch);
  switch (group) {
    case 1:
      DecodeAttentionKernel<T, 1><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 2:
      DecodeAttentionKernel<T, 2><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 4:
      DecodeAttentionKernel<T, 4><<<grid, kThreads, 0, stream>>>(args);
      break;
    default:
      DecodeAttentionKernel<T, 8><<<grid, kThreads, 0, stream>>>(args);
      break;
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || args.num_chunks == 1) return e;
  MergeChunksKernel<T><<<dim3(args.num_q_heads, batch), args.head_dim, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace

Status DecodeAttention(const DecodeAttentionParams& p, void* workspace, uint64_t workspace_bytes,
                       Stream stream) {
  auto plan = internal::CheckDecodeAttention(p, workspace, workspace_bytes);
  if (!plan.ok()) return plan.status();
  if (!GpuAvailable()) return UnavailableError("no GPU: " + GpuDescription());
  if (IsFp8(p.layout.dtype)) {
    return InvalidArgumentError(
        "decode attention over fp8 blocks runs in DecodeAttentionReference only: its CUDA "
        "kernel is not built yet");
  }

  const DecodeArgs args = internal::MakeDecodeArgs(p, *plan, workspace);
  const uint32_t group = p.num_q_heads / p.layout.kv_heads;
  auto* s = static_cast<cudaStream_t>(stream);
  const cudaError_t e = p.layout.dtype == DType::kFloat16
                            ? Launch<__half>(args, p.layout.kv_heads, p.batch, group, s)
                            : Launch<__nv_bfloat16>(args, p.layout.kv_heads, p.batch, group, s);
  return internal::CudaStatus(e, "decode attention launch");
}

}  // namespace kvtier::kernels

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
// T: q's and o's type; Kv: how the blocks store K and V.
template <typename T, typename Kv>
cudaError_t Launch(const DecodeArgs& args, uint32_t kv_heads, uint32_t batch, uint32_t group,
                   cudaStream_t stream) {
  const dim3 grid(args.num_chunks, kv_heads, batch);
  switch (group) {
    case 1:
      DecodeAttentionKernel<T, Kv, 1><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 2:
      DecodeAttentionKernel<T, Kv, 2><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 4:
      DecodeAttentionKernel<T, Kv, 4><<<grid, kThreads, 0, stream>>>(args);
      break;
    default:
      DecodeAttentionKernel<T, Kv, 8><<<grid, kThreads, 0, stream>>>(args);
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

  const DecodeArgs args = internal::MakeDecodeArgs(p, *plan, workspace);
  const uint32_t group = p.num_q_heads / p.layout.kv_heads;
  auto* s = static_cast<cudaStream_t>(stream);
  const uint32_t kv = p.layout.kv_heads;
  const bool fp8 = IsFp8(p.layout.dtype);
  cudaError_t e;
  if (internal::IoDType(p) == DType::kFloat16) {
    e = fp8 ? Launch<__half, internal::KvFp8>(args, kv, p.batch, group, s)
            : Launch<__half, internal::Kv16<__half>>(args, kv, p.batch, group, s);
  } else {
    using B = __nv_bfloat16;
    e = fp8 ? Launch<B, internal::KvFp8>(args, kv, p.batch, group, s)
            : Launch<B, internal::Kv16<B>>(args, kv, p.batch, group, s);
  }
  return internal::CudaStatus(e, "decode attention launch");
}

}  // namespace kvtier::kernels

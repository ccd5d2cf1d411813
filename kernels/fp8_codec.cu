// The fp8 block codecs on the GPU: launchers of
// internal/fp8_codec_kernel.cuh (which explains the kernels).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/fp8.h"
#include "kernels/fp8_codec.h"
#include "kernels/internal/cuda_status.h"
#include "kernels/internal/fp8_codec_kernel.cuh"

namespace kvtier::kernels {
namespace {

using internal::Fp8BlocksArgs;
using internal::kCodecThreads;

template <bool kQuantize, typename T, typename Format>
void Launch(const Fp8BlocksArgs& args, dim3 grid, cudaStream_t stream) {
  if constexpr (kQuantize) {
    internal::QuantizeBlocksKernel<T, Format><<<grid, kCodecThreads, 0, stream>>>(args);
  } else {
    internal::DequantizeBlocksKernel<T, Format><<<grid, kCodecThreads, 0, stream>>>(args);
  }
}

template <bool kQuantize>
Status Run(const Fp8BlocksParams& p, Stream stream) {
  KVTIER_RETURN_IF_ERROR(ValidateFp8Blocks(p, kQuantize));
  if (p.num_blocks == 0) return Status();
  if (!GpuAvailable()) return UnavailableError("no GPU: " + GpuDescription());
  auto* s = static_cast<cudaStream_t>(stream);
  KVTIER_RETURN_IF_ERROR(
      internal::CudaStatus(cudaMemsetAsync(p.refused, 0, p.num_blocks, s), "cudaMemsetAsync"));
  const Fp8BlocksArgs args = internal::MakeFp8BlocksArgs(p);
  const dim3 grid(p.layout.kv_heads, p.layout.Planes() * p.layout.layers, p.num_blocks);
  const bool fp16 = p.layout.dtype == DType::kFloat16;
  const bool e4m3 = p.fp8 == DType::kFp8E4M3;
  if (fp16) {
    e4m3 ? Launch<kQuantize, __half, internal::Fp8E4M3>(args, grid, s)
         : Launch<kQuantize, __half, internal::Fp8E5M2>(args, grid, s);
  } else {
    e4m3 ? Launch<kQuantize, __nv_bfloat16, internal::Fp8E4M3>(args, grid, s)
         : Launch<kQuantize, __nv_bfloat16, internal::Fp8E5M2>(args, grid, s);
  }
  return internal::CudaStatus(cudaGetLastError(),
                              kQuantize ? "fp8 quantize launch" : "fp8 dequantize launch");
}

}  // namespace

Status QuantizeBlocks(const Fp8BlocksParams& params, Stream stream) {
  return Run<true>(params, stream);
}

Status DequantizeBlocks(const Fp8BlocksParams& params, Stream stream) {
  return Run<false>(params, stream);
}

}  // namespace kvtier::kernels

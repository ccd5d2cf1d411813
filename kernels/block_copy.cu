// Block copies on the GPU: gather/scatter between the arena and a worker's
// paged layout (one CTA per block, layer and k|v, each moving one contiguous
// part of block_tokens * kv_heads * head_dim elements), and bulk slot copies
// with cudaMemcpyAsync.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_copy.h"
#include "kernels/internal/block_copy_kernel.cuh"
#include "kernels/internal/copy_check.h"
#include "kernels/internal/cuda_status.h"

namespace kvtier::kernels {
namespace {

using internal::kCopyThreads;
using internal::PagedCopyArgs;
using internal::PagedCopyKernel;

template <bool kGather>
Status LaunchPagedCopy(const PagedCopyParams& p, Stream stream) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedCopy(p));
  if (p.num_blocks == 0) return Status();
  if (!GpuAvailable()) return UnavailableError("no GPU: " + GpuDescription());
  const PagedCopyArgs args = internal::MakePagedCopyArgs(p);
  const dim3 grid(p.num_blocks, p.layout.layers, p.layout.Planes());
  PagedCopyKernel<kGather><<<grid, kCopyThreads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  return internal::CudaStatus(cudaGetLastError(), kGather ? "gather launch" : "scatter launch");
}

}  // namespace

Status GatherBlocks(const PagedCopyParams& params, Stream stream) {
  return LaunchPagedCopy<true>(params, stream);
}

Status ScatterBlocks(const PagedCopyParams& params, Stream stream) {
  return LaunchPagedCopy<false>(params, stream);
}

Status CopySlots(const SlotCopyParams& p, Stream stream) {
  KVTIER_RETURN_IF_ERROR(internal::CheckSlotCopy(p));
  if (p.count == 0) return Status();
  if (!GpuAvailable()) return UnavailableError("no GPU: " + GpuDescription());
  // Packed slots: a run of consecutive source and destination slots is one
  // contiguous range on both sides, so one call moves it (fewer, larger DMAs).
  const bool packed =
      p.bytes_per_slot == p.src_stride_bytes && p.bytes_per_slot == p.dst_stride_bytes;
  uint32_t i = 0;
  while (i < p.count) {
    uint32_t run = 1;
    while (packed && i + run < p.count && p.src_slots[i + run] == int64_t{p.src_slots[i]} + run &&
           p.dst_slots[i + run] == int64_t{p.dst_slots[i]} + run) {
      ++run;
    }
    const auto* src = static_cast<const char*>(p.src) +
                      static_cast<uint64_t>(p.src_slots[i]) * p.src_stride_bytes;
    auto* dst =
        static_cast<char*>(p.dst) + static_cast<uint64_t>(p.dst_slots[i]) * p.dst_stride_bytes;
    KVTIER_RETURN_IF_ERROR(
        internal::CudaStatus(cudaMemcpyAsync(dst, src, p.bytes_per_slot * run, cudaMemcpyDefault,
                                             static_cast<cudaStream_t>(stream)),
                             "cudaMemcpyAsync"));
    i += run;
  }
  return Status();
}

}  // namespace kvtier::kernels

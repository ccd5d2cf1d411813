// The paged copy kernel (device code only), included by block_copy.cu and by
// tests/kernels/emulated_kernel_test.cc, which runs it on the CPU.
#pragma once

#include <vector_types.h>

#include <cstdint>

#include "kernels/block_copy.h"
#include "kernels/internal/copy_check.h"

namespace kvtier::kernels::internal {

constexpr int kCopyThreads = 256;

// PagedCopyParams, flattened for the device.
struct PagedCopyArgs {
  char* arena;                  // slot s at arena + s * slot_stride
  const int32_t* slots;         // [num_blocks]
  const int32_t* paged_blocks;  // [num_blocks]
  void* const* k_layers;        // [layers] -> [paged_num_blocks][part_bytes]
  void* const* v_layers;        // [layers] -> [paged_num_blocks][part_bytes]; unread at planes 1
  uint64_t slot_stride;         // bytes
  uint64_t part_bytes;          // one layer's K (or V, or latent) of one block
  uint32_t planes;              // 2 (K, V), or 1 (an MLA latent layout)
  int64_t num_slots;
  int64_t paged_num_blocks;
};

// Flattens validated params (host code, shared with the CPU emulation).
inline PagedCopyArgs MakePagedCopyArgs(const PagedCopyParams& p) {
  PagedCopyArgs args{};
  args.arena = static_cast<char*>(p.arena);
  args.slots = p.slots;
  args.paged_blocks = p.paged_blocks;
  args.k_layers = p.k_layers;
  args.v_layers = p.v_layers;
  args.slot_stride = p.slot_stride_bytes;
  args.part_bytes = PartBytes(p.layout);
  args.planes = p.layout.Planes();
  args.num_slots = p.num_slots;
  args.paged_num_blocks = p.paged_num_blocks;
  return args;
}

// Grid (num_blocks, layers, planes). kGather: arena -> paged; else paged -> arena.
template <bool kGather>
__global__ void __launch_bounds__(kCopyThreads) PagedCopyKernel(const PagedCopyArgs a) {
  const uint32_t i = blockIdx.x;
  const uint32_t layer = blockIdx.y;
  const uint32_t kv = blockIdx.z;
  const int32_t slot = a.slots[i];
  const int32_t paged = a.paged_blocks[i];
  void* base = kv == 0 ? a.k_layers[layer] : a.v_layers[layer];
  // Entries cannot be checked on the host (device memory): skip bad ones.
  if (slot < 0 || slot >= a.num_slots || paged < 0 || paged >= a.paged_num_blocks ||
      base == nullptr) {
    return;
  }
  char* arena_part = a.arena + static_cast<uint64_t>(slot) * a.slot_stride +
                     (uint64_t{a.planes} * layer + kv) * a.part_bytes;
  char* paged_part = static_cast<char*>(base) + static_cast<uint64_t>(paged) * a.part_bytes;
  const char* src = kGather ? arena_part : paged_part;
  char* dst = kGather ? paged_part : arena_part;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | a.part_bytes) &
       15u) == 0) {
    // 16-byte vectors, consecutive threads on consecutive vectors (coalesced).
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(dst);
    const uint64_t n = a.part_bytes / 16;
    for (uint64_t j = threadIdx.x; j < n; j += kCopyThreads) d[j] = s[j];
  } else {
    for (uint64_t j = threadIdx.x; j < a.part_bytes; j += kCopyThreads) dst[j] = src[j];
  }
}

}  // namespace kvtier::kernels::internal

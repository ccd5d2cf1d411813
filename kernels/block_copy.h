// Moving blocks (DESIGN.md §1, §6) between the arena and a worker's paged KV
// cache, and between arenas in bulk.
//
// A worker keeps vLLM's layout: per layer, one K tensor and one V tensor, each
// [num_blocks][block_tokens][kv_heads][head_dim]. Inside an arena block the K
// (or V) of one layer is [token][kv_head][head_dim] too, contiguous, so one
// block of one layer of K is the same bytes in both places:
//   arena:  slot * slot_stride + (layer * planes + kv) * part_bytes
//   paged:  {k,v}_layers[layer] + paged_block * part_bytes
//   part_bytes = block_tokens * kv_heads * head_dim * dtype_bytes
// An MLA latent layout (layout.kind kLatent, planes 1) has one paged tensor
// per layer, vLLM's MLA cache [num_blocks][block_tokens][head_dim] (kv_heads
// 1): k_layers holds it, v_layers is not read and may be null.
// Gather copies arena -> paged, scatter paged -> arena; both are exact byte
// copies, every layer, K and V (or the latent).
//
// Thread-safety: the functions are stateless.
#pragma once

#include <cstdint>

#include "common/layout.h"
#include "common/status.h"
#include "kernels/kernels.h"

namespace kvtier::kernels {

// Layers per call (the CUDA grid's y limit).
inline constexpr uint32_t kMaxCopyLayers = 65535;

struct PagedCopyParams {
  // The blocks' layout; any dtype. Every field positive.
  Layout layout;
  // Blocks to copy; 0 is a no-op.
  uint32_t num_blocks = 0;
  // Slots in the arena, and bytes from one to the next (>= BlockBytes()).
  uint32_t num_slots = 0;
  uint64_t slot_stride_bytes = 0;
  // Blocks in each paged tensor (bounds of paged_blocks entries).
  uint32_t paged_num_blocks = 0;

  // Device memory for the CUDA launchers, host memory for the references.
  // arena: slot s at arena + s * slot_stride_bytes, each a block
  // [layer][k|v][token][kv_head][head_dim]. Read by gather, written by scatter.
  void* arena = nullptr;
  // slots: [num_blocks] int32, the arena slot of block i, in [0, num_slots).
  const int32_t* slots = nullptr;
  // paged_blocks: [num_blocks] int32, block i's index in the paged tensors,
  // in [0, paged_num_blocks). REQUIRES: distinct entries where they are
  // written (gather: paged_blocks; scatter: slots).
  const int32_t* paged_blocks = nullptr;
  // k_layers, v_layers: [layout.layers] base pointers; layer l's K is
  // k_layers[l] -> [paged_num_blocks][block_tokens][kv_heads][head_dim]. For
  // the GPU the pointer arrays themselves are in device memory too (as
  // vLLM's copy_blocks passes them). Written by gather, read by scatter.
  // A latent layout's latents are k_layers; v_layers is ignored (may be null).
  void* const* k_layers = nullptr;
  void* const* v_layers = nullptr;
};

// Shape and pointer checks shared by all four entry points.
Status ValidatePagedCopy(const PagedCopyParams& params);

// References: memcpy. Also check every slots / paged_blocks entry first; on an
// error nothing is written.
Status GatherBlocksReference(const PagedCopyParams& params);
Status ScatterBlocksReference(const PagedCopyParams& params);

// CUDA: one CTA per (block, layer, plane), 16-byte vector copies where the
// pointers allow. Asynchronous on `stream`. Entries out of range cannot be
// checked on the host; the kernel skips them (writes nothing for them).
// Unavailable without a GPU.
Status GatherBlocks(const PagedCopyParams& params, Stream stream);
Status ScatterBlocks(const PagedCopyParams& params, Stream stream);

// Copies whole slots between two arenas: host <-> device (the device tier's
// promotions and demotions), device <-> device, or host <-> host.
struct SlotCopyParams {
  // Bytes copied from each slot (usually Layout::BlockBytes()); > 0 and at
  // most both strides.
  uint64_t bytes_per_slot = 0;
  // Slots to copy; 0 is a no-op.
  uint32_t count = 0;

  // src: slot s at src + s * src_stride_bytes; src_num_slots slots.
  const void* src = nullptr;
  uint64_t src_stride_bytes = 0;
  uint32_t src_num_slots = 0;
  // dst: slot s at dst + s * dst_stride_bytes; dst_num_slots slots.
  // REQUIRES: no copied destination range overlaps a copied source range.
  void* dst = nullptr;
  uint64_t dst_stride_bytes = 0;
  uint32_t dst_num_slots = 0;

  // [count] int32 in host memory, for the GPU launcher too: copy i moves slot
  // src_slots[i] to slot dst_slots[i]. Checked against the slot counts.
  const int32_t* src_slots = nullptr;
  const int32_t* dst_slots = nullptr;
};

// Reference: memcpy between host buffers.
Status CopySlotsReference(const SlotCopyParams& params);

// CUDA: cudaMemcpyAsync (cudaMemcpyDefault, so any direction through unified
// addressing) on `stream`, one call per run of consecutive slots when the
// slots are packed (bytes_per_slot == both strides), else one per slot.
// Host memory should be pinned (cudaHostRegister) for the copies to be
// asynchronous DMA; pageable memory works but stages through the driver.
// Unavailable without a GPU.
Status CopySlots(const SlotCopyParams& params, Stream stream);

}  // namespace kvtier::kernels

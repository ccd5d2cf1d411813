// Host-side checks of SlotCopyParams, shared by CopySlots and its reference.
#pragma once

#include "common/status.h"
#include "kernels/block_copy.h"

namespace kvtier::kernels::internal {

// Shape, pointers, and every src_slots / dst_slots entry (host memory in
// both paths) against the slot counts.
Status CheckSlotCopy(const SlotCopyParams& params);

// Bytes of one layer's K (or V, or latent) in a block: the unit the paged
// copies move.
inline uint64_t PartBytes(const Layout& l) {
  return l.BlockBytes() / (uint64_t{l.Planes()} * l.layers);
}

}  // namespace kvtier::kernels::internal

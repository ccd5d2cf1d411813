// SlabTier: what the tiers over one arena cut by a SlabAllocator share — the
// host arena, the emulated device and the GPU: capacity and use, slot sizes,
// Allocate/Free, slot offsets (a SlotId is a page index), and the check that
// a slot holds the bytes asked for. Same thread rules as Tier.
#pragma once

#include <string>
#include <utility>

#include "tiers/internal/slab_allocator.h"
#include "tiers/tier.h"

namespace kvtier::tiers::internal {

class SlabTier : public Tier {
 public:
  explicit SlabTier(SlabAllocator allocator) : allocator_(std::move(allocator)) {}

  uint64_t capacity_bytes() const override { return allocator_.capacity_bytes(); }
  uint64_t used_bytes() const override { return allocator_.used_bytes(); }
  uint64_t SlotBytes(uint64_t block_bytes) const override {
    return SlabAllocator::SlotBytes(block_bytes);
  }
  Result<SlotId> Allocate(uint64_t block_bytes) override {
    return allocator_.Allocate(block_bytes);
  }
  void Free(SlotId slot) override { allocator_.Free(slot); }
  uint64_t SlotOffset(SlotId slot) const override { return uint64_t{slot} * kSlotPageBytes; }

 protected:
  // InvalidArgument (naming `op`) unless `slot` is allocated and holds `bytes`.
  Status CheckSlot(SlotId slot, uint64_t bytes, const char* op) const {
    const uint64_t slot_bytes = allocator_.AllocatedSlotBytes(slot);
    if (slot_bytes == 0) {
      return InvalidArgumentError(std::string(op) + ": slot " + std::to_string(slot) +
                                  " is not allocated");
    }
    if (bytes > slot_bytes) {
      return InvalidArgumentError(std::string(op) + ": " + std::to_string(bytes) +
                                  " bytes exceed slot " + std::to_string(slot) + " of " +
                                  std::to_string(slot_bytes));
    }
    return Status::Ok();
  }

  SlabAllocator allocator_;
};

}  // namespace kvtier::tiers::internal

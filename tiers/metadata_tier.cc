// The metadata-only tier: slot accounting without bytes, for simulation.
// Slot ids are recycled through a free list; capacity is enforced on the sum
// of slot bytes exactly as the arena tiers do.
#include <unordered_map>
#include <vector>

#include "tiers/tier.h"

namespace kvtier::tiers {
namespace {

class MetadataTier final : public Tier {
 public:
  MetadataTier(TierKind kind, uint64_t capacity) : kind_(kind), capacity_(capacity) {}

  TierKind kind() const override { return kind_; }
  std::string description() const override {
    return std::string(TierKindName(kind_)) + ": metadata only, " + FormatBytes(capacity_);
  }
  bool holds_bytes() const override { return false; }
  uint64_t capacity_bytes() const override { return capacity_; }
  uint64_t used_bytes() const override { return used_; }
  uint64_t SlotBytes(uint64_t block_bytes) const override {
    return AlignUp(block_bytes, kSlotPageBytes);
  }

  Result<SlotId> Allocate(uint64_t block_bytes) override {
    if (block_bytes == 0) return InvalidArgumentError("a block of 0 bytes");
    const uint64_t bytes = SlotBytes(block_bytes);
    if (bytes > capacity_) return InvalidArgumentError("a block larger than the tier");
    if (used_ + bytes > capacity_) return ResourceExhaustedError("metadata tier full");
    SlotId slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<SlotId>(slot_bytes_.size());
      slot_bytes_.push_back(0);
    }
    slot_bytes_[slot] = bytes;
    used_ += bytes;
    return slot;
  }
  void Free(SlotId slot) override {
    used_ -= slot_bytes_[slot];
    slot_bytes_[slot] = 0;
    free_.push_back(slot);
  }

  Status Read(SlotId, std::span<std::byte>) override { return Status::Ok(); }
  Status Write(SlotId, std::span<const std::byte>) override { return Status::Ok(); }
  std::span<std::byte> HostView(SlotId, uint64_t) override { return {}; }
  uint64_t SlotOffset(SlotId slot) const override { return uint64_t{slot} * kSlotPageBytes; }

 private:
  const TierKind kind_;
  const uint64_t capacity_;
  uint64_t used_ = 0;
  std::vector<uint64_t> slot_bytes_;  // by SlotId; 0 when free
  std::vector<SlotId> free_;
};

}  // namespace

std::unique_ptr<Tier> NewMetadataTier(TierKind kind, uint64_t capacity_bytes) {
  return std::make_unique<MetadataTier>(kind, capacity_bytes);
}

}  // namespace kvtier::tiers

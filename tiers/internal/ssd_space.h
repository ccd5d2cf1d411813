// SsdSpace: where blocks go in the SSD tier's one preallocated slot file.
//
// Pure bookkeeping (no I/O), confined to the allocator's thread. The file is
// cut into equal regions of `region_bytes` (a power of two, fixed when the
// data directory is made). A block of B bytes takes a slot of
// S = round_up(B, 4 KiB); slots of one size S live in extents of n regions
// that hold only that size, n being the fewest regions that S divides with
// at most 1/8 left over (n = 1 whenever S <= region/8). An extent of n
// regions starts at a region index that is a multiple of n.
//
// Why this shape:
//  - A slot's place follows from (S, its page) alone: the extent starts at
//    floor(region / n) * n. So the records in the index are enough to rebuild
//    the whole map at a restart (Reserve); there is no table of extents to
//    keep on disk and in step.
//  - Sizes never share an extent, so churn in one size leaves holes that the
//    same size fits; an extent whose last slot is freed goes back to the free
//    regions at once, so space flows between sizes when the mix changes.
//  - Slots are handed out lowest extent first, lowest slot first, so blocks
//    concentrate at the front of the file.
//
// Only regions below `usable_regions` (the part of the file already written
// once; see SsdStore) are handed out. Pages are 4 KiB units of file offset.
//
// Cost: Allocate and Free are O(log E) in the extents of one size plus a
// bitmap scan from a hint; carving a new extent scans the region map
// (rare: once per extent's worth of slots). Memory: 4 bytes per region and
// one bit per slot.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace kvtier::tiers::internal {

inline constexpr uint64_t kSsdPageBytes = 4096;

struct SsdSpaceStats {
  uint64_t capacity_bytes = 0;  // the bytes of slots that may be in use
  uint64_t used_bytes = 0;      // slot bytes in use
  uint64_t region_bytes = 0;
  uint64_t regions = 0;       // regions in the file at full size
  uint64_t free_regions = 0;  // in no extent
  uint64_t extents = 0;
  std::map<uint64_t, uint64_t> slots_in_use;  // slot bytes -> slots in use
};

class SsdSpace {
 public:
  // The largest page number a slot may start at is kMaxPages - 1, so a page
  // fits the 32-bit SlotId the tiers hand out (16 TiB of file).
  static constexpr uint64_t kMaxPages = uint64_t{1} << 32;

  // A region size for a new data directory of `capacity_bytes`: the power of
  // two nearest below capacity / 64, kept within [4 KiB, 64 MiB], so a small
  // tier still has a few dozen regions and a large one few enough to scan.
  static uint64_t RegionBytesFor(uint64_t capacity_bytes);

  // InvalidArgument unless region_bytes is a power of two >= 4 KiB and the
  // capacity holds at least one region and at most kMaxPages pages.
  static Result<SsdSpace> Create(uint64_t capacity_bytes, uint64_t region_bytes);

  // A free slot of `slot_bytes` (a multiple of 4 KiB), as its first page.
  // ResourceExhausted when the used bytes would pass capacity or no region
  // is free for a new extent; Unavailable when a free region exists but is
  // not yet usable (the file is still being prepared).
  Result<uint64_t> Allocate(uint64_t slot_bytes, uint64_t usable_regions);
  // Marks a slot restored from a record as used. InvalidArgument when the
  // page is not a slot boundary of that size, or lies past usable_regions;
  // FailedPrecondition when the slot or its extent's regions are held
  // otherwise; ResourceExhausted when it would pass capacity.
  Status Reserve(uint64_t slot_bytes, uint64_t page, uint64_t usable_regions);
  // Frees the slot starting at `page`. FailedPrecondition when no slot of
  // `slot_bytes` is in use there.
  Status Free(uint64_t slot_bytes, uint64_t page);
  // The slot bytes of the slot in use at `page`, or 0.
  uint64_t SlotBytesAt(uint64_t page) const;

  uint64_t region_bytes() const { return region_bytes_; }
  uint64_t regions() const { return owner_.size(); }
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }
  SsdSpaceStats Stats() const;
  // Internal when the bookkeeping disagrees with itself; for tests.
  Status CheckInvariants() const;

  // Regions per extent of slot size `slot_bytes` (see the file comment).
  uint64_t ExtentRegions(uint64_t slot_bytes) const;

 private:
  static constexpr uint32_t kFree = UINT32_MAX;
  struct Extent {
    uint64_t slot_bytes = 0;
    uint32_t regions = 0;
    uint32_t slots = 0;
    uint32_t used = 0;
    uint32_t hint_word = 0;      // no free slot in words below it
    std::vector<uint64_t> bits;  // bit k: slot k in use
  };

  SsdSpace(uint64_t capacity_bytes, uint64_t region_bytes, uint64_t regions);
  // The extent of size slot_bytes that would hold `page`: its first region
  // and the slot's number in it; false when the page is not a slot boundary.
  bool Locate(uint64_t slot_bytes, uint64_t page, uint32_t* start, uint32_t* slot) const;
  Extent& NewExtent(uint32_t start, uint64_t slot_bytes);
  void Take(uint32_t start, Extent& e, uint32_t slot);
  uint64_t PageOf(uint32_t start, const Extent& e, uint32_t slot) const;

  uint64_t capacity_bytes_;
  uint64_t region_bytes_;
  uint64_t used_bytes_ = 0;
  std::vector<uint32_t> owner_;                   // region -> first region of its extent, or kFree
  std::unordered_map<uint32_t, Extent> extents_;  // by first region
  std::map<uint64_t, std::set<uint32_t>> open_;   // slot bytes -> extents with a free slot
};

}  // namespace kvtier::tiers::internal

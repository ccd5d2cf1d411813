// SlabAllocator: page-granular size-class slab allocation over an arena.
//
// Pure bookkeeping: it owns no memory and hands out slots as page indices
// (SlotId; byte offset = slot * kSlotPageBytes) of an arena of N bytes that
// someone else maps. One allocator backs each arena tier.
//
// Why slabs: a tier holds blocks of a few sizes (one per namespace layout)
// that come and go in bulk. Serving each size from its own slabs keeps holes
// the size of the blocks that left them, so churn in one size never leaves
// the arena in slivers no block fits; an emptied slab goes back to the free
// extents, so memory still flows between sizes when the mix changes.
//
//  - A slot is the block's size rounded up to a page; each distinct slot
//    size is a size class.
//  - A slab holds n = max(1, slab_target_bytes / slot_bytes) slots and is
//    exactly n * slot_bytes long (no tail waste). It is carved, first fit,
//    from the free extents; when no free extent is long enough, a shorter
//    slab with as many slots as fit in the longest free extent is carved
//    instead, so the arena's last bytes still hold blocks.
//  - A class allocates from its lowest-addressed slab that has a free slot,
//    so blocks concentrate in low slabs and high slabs empty out. An empty
//    slab's extent is released at once and coalesced with its neighbours.
//
// Cost: Allocate and Free are O(log S) in the number of slabs and free
// extents, plus a scan of the slab's occupancy bitmap that starts at a hint
// (at most slots-per-slab / 64 words). Memory: one bit per slot plus a few
// words per slab and per free extent; nothing per page.
//
// Thread-safety: none; confined to its tier's owner (the engine's strand).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/result.h"
#include "tiers/tier.h"

namespace kvtier::tiers::internal {

struct SlabAllocatorStats {
  uint64_t capacity_bytes = 0;  // the arena, a multiple of kSlotPageBytes
  uint64_t used_bytes = 0;      // slot bytes of allocated slots
  uint64_t slots_in_use = 0;
  uint64_t slabs = 0;
  uint64_t slab_bytes = 0;         // bytes of all slabs, used or not
  uint64_t free_extent_bytes = 0;  // bytes in no slab; capacity = slab + free
  uint64_t free_extents = 0;
};

class SlabAllocator {
 public:
  // Largest arena: 2^31 pages (8 TiB), so page counts and SlotIds (uint32
  // page indices) never overflow.
  static constexpr uint64_t kMaxArenaBytes = (uint64_t{1} << 31) * kSlotPageBytes;

  // InvalidArgument unless 0 < arena_bytes <= kMaxArenaBytes, arena_bytes is
  // a multiple of kSlotPageBytes and slab_target_bytes > 0.
  static Result<SlabAllocator> Create(uint64_t arena_bytes, uint64_t slab_target_bytes);

  SlabAllocator(SlabAllocator&&) noexcept = default;
  SlabAllocator& operator=(SlabAllocator&&) noexcept = default;

  // Bytes of the slot that holds a block of `block_bytes`.
  // REQUIRES: block_bytes <= kMaxArenaBytes.
  static uint64_t SlotBytes(uint64_t block_bytes) { return AlignUp(block_bytes, kSlotPageBytes); }

  // InvalidArgument for 0 bytes or a block larger than the arena;
  // ResourceExhausted when no slot of that class is free and no free extent
  // holds one.
  Result<SlotId> Allocate(uint64_t block_bytes);
  // REQUIRES: `slot` was returned by Allocate and not freed since.
  void Free(SlotId slot);
  // The slot bytes of an allocated slot; 0 when `slot` is not allocated.
  uint64_t AllocatedSlotBytes(SlotId slot) const;

  uint64_t capacity_bytes() const { return total_pages_ * kSlotPageBytes; }
  uint64_t used_bytes() const { return used_pages_ * kSlotPageBytes; }
  uint64_t slab_target_bytes() const { return slab_target_bytes_; }
  SlabAllocatorStats Stats() const;

  // Internal when the bookkeeping is inconsistent: slabs and free extents
  // must tile the arena exactly, free extents be coalesced, counts agree.
  // O(arena slots / 64); for tests.
  Status CheckInvariants() const;

 private:
  // Free extents by start page, answering "lowest extent of at least n
  // pages" in O(log pages): a sparse segment tree over start pages holding
  // the longest extent under each node. A map scan would be linear in the
  // number of extents, which grows under churn.
  class ExtentIndex {
   public:
    explicit ExtentIndex(uint32_t page_bits);
    void Set(uint32_t start, uint32_t pages);  // pages == 0 erases
    // Lowest start whose extent has >= pages; false when none.
    bool FindFirst(uint32_t pages, uint32_t* start) const;
    uint32_t MaxPages() const { return nodes_[kRoot].max; }

   private:
    static constexpr uint32_t kNull = 0;
    static constexpr uint32_t kRoot = 1;
    struct Node {
      uint32_t max = 0;
      uint32_t child[2] = {kNull, kNull};
    };
    uint32_t NewNode();
    uint32_t page_bits_;
    std::vector<Node> nodes_;  // [0] unused (kNull), [1] the root
    std::vector<uint32_t> free_nodes_;
  };

  struct Slab {
    uint32_t slot_pages = 0;
    uint32_t num_slots = 0;
    uint32_t used = 0;
    uint32_t hint_word = 0;      // no free slot in words below it
    std::vector<uint64_t> bits;  // bit i: slot i is allocated
    uint64_t pages() const { return uint64_t{slot_pages} * num_slots; }
  };

  SlabAllocator(uint32_t total_pages, uint64_t slab_target_bytes);

  // Carves a slab of class `slot_pages` from the free extents; its start page
  // or ResourceExhausted.
  Result<uint32_t> CarveSlab(uint32_t slot_pages);
  void ReleaseExtent(uint32_t start, uint32_t pages);
  // The slab holding `page`, or slabs_.end().
  std::map<uint32_t, Slab>::const_iterator FindSlab(uint32_t page) const;

  uint64_t total_pages_;
  uint64_t slab_target_bytes_;
  uint64_t used_pages_ = 0;
  uint64_t slab_pages_ = 0;
  uint64_t slots_in_use_ = 0;
  std::map<uint32_t, uint32_t> extents_;  // free extents: start page -> pages
  ExtentIndex extent_index_;
  std::map<uint32_t, Slab> slabs_;  // by start page
  // Per class (slot pages): start pages of its slabs with a free slot.
  std::map<uint32_t, std::set<uint32_t>> partial_;
};

}  // namespace kvtier::tiers::internal

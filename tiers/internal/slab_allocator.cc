#include "tiers/internal/slab_allocator.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <string>

namespace kvtier::tiers::internal {
namespace {

constexpr uint32_t kWordBits = 64;

uint32_t PageBits(uint64_t total_pages) {
  return static_cast<uint32_t>(std::bit_width(total_pages - 1));
}

Status Broken(const std::string& what) { return InternalError("slab allocator: " + what); }

}  // namespace

// ---- ExtentIndex ---------------------------------------------------------

SlabAllocator::ExtentIndex::ExtentIndex(uint32_t page_bits) : page_bits_(page_bits) {
  nodes_.resize(2);  // kNull and the root, which always exists
}

uint32_t SlabAllocator::ExtentIndex::NewNode() {
  if (!free_nodes_.empty()) {
    const uint32_t n = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[n] = Node{};
    return n;
  }
  nodes_.emplace_back();
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void SlabAllocator::ExtentIndex::Set(uint32_t start, uint32_t pages) {
  // Walk from the root to the leaf of `start`, creating nodes only when
  // storing; then recompute maxima bottom-up, pruning subtrees left empty so
  // the tree stays proportional to the number of extents.
  uint32_t path[33];
  uint32_t node = kRoot;
  path[0] = node;
  for (uint32_t depth = 0; depth < page_bits_; ++depth) {
    const uint32_t dir = (start >> (page_bits_ - 1 - depth)) & 1U;
    uint32_t next = nodes_[node].child[dir];
    if (next == kNull) {
      if (pages == 0) return;  // nothing stored there
      next = NewNode();
      nodes_[node].child[dir] = next;
    }
    node = next;
    path[depth + 1] = node;
  }
  nodes_[node].max = pages;
  for (uint32_t depth = page_bits_; depth-- > 0;) {
    Node& parent = nodes_[path[depth]];
    const uint32_t dir = (start >> (page_bits_ - 1 - depth)) & 1U;
    if (nodes_[parent.child[dir]].max == 0) {
      free_nodes_.push_back(parent.child[dir]);
      parent.child[dir] = kNull;
    }
    // nodes_[kNull].max stays 0, so a missing child reads as empty.
    parent.max = std::max(nodes_[parent.child[0]].max, nodes_[parent.child[1]].max);
  }
}

bool SlabAllocator::ExtentIndex::FindFirst(uint32_t pages, uint32_t* start) const {
  if (pages == 0 || nodes_[kRoot].max < pages) return false;
  uint32_t node = kRoot;
  uint32_t found = 0;
  for (uint32_t depth = 0; depth < page_bits_; ++depth) {
    const uint32_t left = nodes_[node].child[0];
    const uint32_t dir = (left != kNull && nodes_[left].max >= pages) ? 0U : 1U;
    found = (found << 1) | dir;
    node = nodes_[node].child[dir];
    assert(node != kNull && nodes_[node].max >= pages);
  }
  *start = found;
  return true;
}

// ---- SlabAllocator -------------------------------------------------------

Result<SlabAllocator> SlabAllocator::Create(uint64_t arena_bytes, uint64_t slab_target_bytes) {
  if (arena_bytes == 0 || arena_bytes > kMaxArenaBytes || arena_bytes % kSlotPageBytes != 0) {
    return InvalidArgumentError("slab allocator: arena of " + std::to_string(arena_bytes) +
                                " bytes is not a non-zero multiple of 4 KiB up to 8 TiB");
  }
  if (slab_target_bytes == 0) return InvalidArgumentError("slab allocator: slab bytes is 0");
  return SlabAllocator(static_cast<uint32_t>(arena_bytes / kSlotPageBytes), slab_target_bytes);
}

SlabAllocator::SlabAllocator(uint32_t total_pages, uint64_t slab_target_bytes)
    : total_pages_(total_pages),
      slab_target_bytes_(slab_target_bytes),
      extent_index_(PageBits(total_pages)) {
  extents_.emplace(0, total_pages);
  extent_index_.Set(0, total_pages);
}

Result<SlotId> SlabAllocator::Allocate(uint64_t block_bytes) {
  if (block_bytes == 0) return InvalidArgumentError("slab allocator: block of 0 bytes");
  if (block_bytes > capacity_bytes()) {
    return InvalidArgumentError("slab allocator: block of " + std::to_string(block_bytes) +
                                " bytes exceeds the arena of " + std::to_string(capacity_bytes()));
  }
  const auto slot_pages = static_cast<uint32_t>(SlotBytes(block_bytes) / kSlotPageBytes);

  uint32_t start = 0;
  auto cls = partial_.find(slot_pages);
  if (cls != partial_.end()) {
    start = *cls->second.begin();  // lowest address: blocks concentrate there
  } else {
    KVTIER_ASSIGN_OR_RETURN(start, CarveSlab(slot_pages));
    cls = partial_.find(slot_pages);
  }
  Slab& slab = slabs_.find(start)->second;

  uint32_t word = slab.hint_word;
  while (slab.bits[word] == ~uint64_t{0}) ++word;
  const auto bit = static_cast<uint32_t>(std::countr_one(slab.bits[word]));
  const uint32_t index = word * kWordBits + bit;
  assert(index < slab.num_slots);
  slab.bits[word] |= uint64_t{1} << bit;
  slab.hint_word = word;
  if (++slab.used == slab.num_slots) {
    cls->second.erase(start);
    if (cls->second.empty()) partial_.erase(cls);
  }
  used_pages_ += slot_pages;
  ++slots_in_use_;
  return static_cast<SlotId>(start + index * slab.slot_pages);
}

Result<uint32_t> SlabAllocator::CarveSlab(uint32_t slot_pages) {
  const uint64_t slot_bytes = uint64_t{slot_pages} * kSlotPageBytes;
  const uint64_t full_slots =
      std::clamp<uint64_t>(slab_target_bytes_ / slot_bytes, 1, total_pages_ / slot_pages);
  auto want = static_cast<uint32_t>(full_slots * slot_pages);

  uint32_t start = 0;
  if (!extent_index_.FindFirst(want, &start)) {
    // No room for a whole slab: use the longest extent for as many slots as
    // it holds, so the arena's last free pages are not stranded.
    const uint32_t longest = extent_index_.MaxPages();
    if (longest < slot_pages) {
      return ResourceExhaustedError("slab allocator: no free slot of " +
                                    std::to_string(slot_bytes) + " bytes");
    }
    want = longest / slot_pages * slot_pages;
    const bool found = extent_index_.FindFirst(want, &start);
    assert(found);
    static_cast<void>(found);
  }

  auto ext = extents_.find(start);
  assert(ext != extents_.end() && ext->second >= want);
  const uint32_t rest = ext->second - want;
  extents_.erase(ext);
  extent_index_.Set(start, 0);
  if (rest > 0) {
    extents_.emplace(start + want, rest);
    extent_index_.Set(start + want, rest);
  }

  Slab slab;
  slab.slot_pages = slot_pages;
  slab.num_slots = want / slot_pages;
  slab.bits.assign((slab.num_slots + kWordBits - 1) / kWordBits, 0);
  slabs_.emplace(start, std::move(slab));
  partial_[slot_pages].insert(start);
  slab_pages_ += want;
  return start;
}

void SlabAllocator::ReleaseExtent(uint32_t start, uint32_t pages) {
  auto next = extents_.find(start + pages);
  if (next != extents_.end()) {
    pages += next->second;
    extent_index_.Set(next->first, 0);
    extents_.erase(next);
  }
  auto prev = extents_.lower_bound(start);
  if (prev != extents_.begin() && (--prev)->first + prev->second == start) {
    prev->second += pages;
    extent_index_.Set(prev->first, prev->second);
    return;
  }
  extents_.emplace(start, pages);
  extent_index_.Set(start, pages);
}

std::map<uint32_t, SlabAllocator::Slab>::const_iterator SlabAllocator::FindSlab(
    uint32_t page) const {
  auto it = slabs_.upper_bound(page);
  if (it == slabs_.begin()) return slabs_.end();
  --it;
  return page < it->first + it->second.pages() ? it : slabs_.end();
}

uint64_t SlabAllocator::AllocatedSlotBytes(SlotId slot) const {
  const auto it = FindSlab(slot);
  if (it == slabs_.end()) return 0;
  const Slab& slab = it->second;
  const uint32_t rel = slot - it->first;
  if (rel % slab.slot_pages != 0) return 0;
  const uint32_t index = rel / slab.slot_pages;
  if ((slab.bits[index / kWordBits] >> (index % kWordBits) & 1U) == 0) return 0;
  return uint64_t{slab.slot_pages} * kSlotPageBytes;
}

void SlabAllocator::Free(SlotId slot) {
  const auto found = FindSlab(slot);
  // A bad slot is a caller bug; in release builds ignore it rather than
  // corrupt the bookkeeping of slots that are in use.
  assert(found != slabs_.end() && "Free of a slot in no slab");
  if (found == slabs_.end()) return;
  const uint32_t start = found->first;
  Slab& slab = slabs_.find(start)->second;
  const uint32_t rel = slot - start;
  const uint32_t index = rel / slab.slot_pages;
  const uint64_t mask = uint64_t{1} << (index % kWordBits);
  uint64_t& word = slab.bits[index / kWordBits];
  assert(rel % slab.slot_pages == 0 && (word & mask) != 0 && "Free of a slot not allocated");
  if (rel % slab.slot_pages != 0 || (word & mask) == 0) return;

  word &= ~mask;
  slab.hint_word = std::min(slab.hint_word, index / kWordBits);
  used_pages_ -= slab.slot_pages;
  --slots_in_use_;
  if (slab.used-- == slab.num_slots) partial_[slab.slot_pages].insert(start);
  if (slab.used > 0) return;

  // Empty: give the extent back so any class can carve it.
  auto cls = partial_.find(slab.slot_pages);
  cls->second.erase(start);
  if (cls->second.empty()) partial_.erase(cls);
  const auto pages = static_cast<uint32_t>(slab.pages());
  slab_pages_ -= pages;
  slabs_.erase(start);
  ReleaseExtent(start, pages);
}

SlabAllocatorStats SlabAllocator::Stats() const {
  SlabAllocatorStats s;
  s.capacity_bytes = capacity_bytes();
  s.used_bytes = used_bytes();
  s.slots_in_use = slots_in_use_;
  s.slabs = slabs_.size();
  s.slab_bytes = slab_pages_ * kSlotPageBytes;
  s.free_extent_bytes = (total_pages_ - slab_pages_) * kSlotPageBytes;
  s.free_extents = extents_.size();
  return s;
}

Status SlabAllocator::CheckInvariants() const {
  // Merge slabs and free extents in address order: they must tile the arena.
  uint64_t cursor = 0;
  uint64_t used_pages = 0;
  uint64_t slots = 0;
  uint64_t slab_pages = 0;
  uint32_t max_extent = 0;
  size_t partial_count = 0;
  bool prev_was_free = false;
  auto slab = slabs_.begin();
  auto ext = extents_.begin();
  while (slab != slabs_.end() || ext != extents_.end()) {
    const bool take_slab =
        ext == extents_.end() || (slab != slabs_.end() && slab->first < ext->first);
    const uint64_t start = take_slab ? slab->first : ext->first;
    if (start != cursor) {
      return Broken((start < cursor ? "overlap at page " : "gap at page ") +
                    std::to_string(cursor));
    }
    if (take_slab) {
      const Slab& s = slab->second;
      if (s.slot_pages == 0 || s.num_slots == 0) return Broken("empty slab geometry");
      uint64_t bits_set = 0;
      for (size_t w = 0; w < s.bits.size(); ++w) {
        bits_set += static_cast<uint64_t>(std::popcount(s.bits[w]));
        if (w < s.hint_word && s.bits[w] != ~uint64_t{0}) return Broken("hint skips a free slot");
      }
      if (s.bits.size() != (s.num_slots + kWordBits - 1) / kWordBits || bits_set != s.used) {
        return Broken("slab bitmap disagrees with its count");
      }
      if (s.num_slots % kWordBits != 0 && (s.bits.back() >> (s.num_slots % kWordBits)) != 0) {
        return Broken("bit set past the last slot");
      }
      if (s.used == 0) return Broken("an empty slab was kept");
      const auto cls = partial_.find(s.slot_pages);
      const bool listed = cls != partial_.end() && cls->second.contains(slab->first);
      if (listed != (s.used < s.num_slots)) return Broken("partial list disagrees with a slab");
      used_pages += uint64_t{s.used} * s.slot_pages;
      slots += s.used;
      slab_pages += s.pages();
      cursor += s.pages();
      prev_was_free = false;
      ++slab;
    } else {
      if (ext->second == 0) return Broken("empty free extent");
      if (prev_was_free) return Broken("adjacent free extents not coalesced");
      uint32_t found = 0;
      if (!extent_index_.FindFirst(ext->second, &found) || found > ext->first) {
        return Broken("extent index misses an extent");
      }
      max_extent = std::max(max_extent, ext->second);
      cursor += ext->second;
      prev_was_free = true;
      ++ext;
    }
  }
  if (cursor != total_pages_) return Broken("slabs and extents do not cover the arena");
  for (const auto& [slot_pages, starts] : partial_) {
    if (starts.empty()) return Broken("empty partial list kept");
    partial_count += starts.size();
  }
  // Every listed start was matched to a slab above; no stale entries.
  size_t partial_slabs = 0;
  for (const auto& [start, s] : slabs_) partial_slabs += s.used < s.num_slots ? 1 : 0;
  if (partial_count != partial_slabs) return Broken("stale partial list entry");
  if (used_pages != used_pages_ || slots != slots_in_use_ || slab_pages != slab_pages_) {
    return Broken("totals disagree with the slabs");
  }
  if (used_pages_ > total_pages_) return Broken("more used than capacity");
  if (extent_index_.MaxPages() != max_extent) return Broken("extent index maximum is stale");
  return Status::Ok();
}

}  // namespace kvtier::tiers::internal

#include "tiers/internal/ssd_space.h"

#include <algorithm>
#include <bit>
#include <string>

#include "common/units.h"

namespace kvtier::tiers::internal {

uint64_t SsdSpace::RegionBytesFor(uint64_t capacity_bytes) {
  const uint64_t target = std::bit_floor(std::max<uint64_t>(capacity_bytes / 64, 1));
  return std::clamp<uint64_t>(target, kSsdPageBytes, 64 * kMiB);
}

Result<SsdSpace> SsdSpace::Create(uint64_t capacity_bytes, uint64_t region_bytes) {
  if (region_bytes < kSsdPageBytes || !std::has_single_bit(region_bytes)) {
    return InvalidArgumentError("SSD region size " + std::to_string(region_bytes) +
                                " is not a power of two of at least 4 KiB");
  }
  const uint64_t regions = capacity_bytes / region_bytes;
  if (regions == 0) {
    return InvalidArgumentError("SSD capacity " + FormatBytes(capacity_bytes) +
                                " is less than one region of " + FormatBytes(region_bytes));
  }
  if (regions * (region_bytes / kSsdPageBytes) > kMaxPages) {
    return InvalidArgumentError("SSD capacity " + FormatBytes(capacity_bytes) +
                                " is above the 16 TiB one tier can address");
  }
  return SsdSpace(capacity_bytes, region_bytes, regions);
}

SsdSpace::SsdSpace(uint64_t capacity_bytes, uint64_t region_bytes, uint64_t regions)
    : capacity_bytes_(capacity_bytes), region_bytes_(region_bytes), owner_(regions, kFree) {}

uint64_t SsdSpace::ExtentRegions(uint64_t slot_bytes) const {
  const uint64_t least = (slot_bytes + region_bytes_ - 1) / region_bytes_;
  // Grow the extent until the slots fill it to within 1/8 (at most 8 times
  // the least; a whole number of slots always fits 8 times as well).
  uint64_t n = least;
  while (n < 8 * least && (n * region_bytes_) % slot_bytes > n * region_bytes_ / 8) ++n;
  return std::min<uint64_t>(n, regions());
}

bool SsdSpace::Locate(uint64_t slot_bytes, uint64_t page, uint32_t* start, uint32_t* slot) const {
  const uint64_t n = ExtentRegions(slot_bytes);
  const uint64_t offset = page * kSsdPageBytes;
  const uint64_t first = offset / region_bytes_ / n * n;
  if (first + n > regions()) return false;
  const uint64_t within = offset - first * region_bytes_;
  if (within % slot_bytes != 0 || within / slot_bytes >= n * region_bytes_ / slot_bytes) {
    return false;
  }
  *start = static_cast<uint32_t>(first);
  *slot = static_cast<uint32_t>(within / slot_bytes);
  return true;
}

uint64_t SsdSpace::PageOf(uint32_t start, const Extent& e, uint32_t slot) const {
  return (start * region_bytes_ + slot * e.slot_bytes) / kSsdPageBytes;
}

SsdSpace::Extent& SsdSpace::NewExtent(uint32_t start, uint64_t slot_bytes) {
  Extent e;
  e.slot_bytes = slot_bytes;
  e.regions = static_cast<uint32_t>(ExtentRegions(slot_bytes));
  e.slots = static_cast<uint32_t>(e.regions * region_bytes_ / slot_bytes);
  e.bits.assign((e.slots + 63) / 64, 0);
  for (uint32_t r = start; r < start + e.regions; ++r) owner_[r] = start;
  open_[slot_bytes].insert(start);
  return extents_.emplace(start, std::move(e)).first->second;
}

void SsdSpace::Take(uint32_t start, Extent& e, uint32_t slot) {
  e.bits[slot / 64] |= uint64_t{1} << (slot % 64);
  if (++e.used == e.slots) open_[e.slot_bytes].erase(start);
  used_bytes_ += e.slot_bytes;
}

Result<uint64_t> SsdSpace::Allocate(uint64_t slot_bytes, uint64_t usable_regions) {
  if (slot_bytes == 0 || slot_bytes % kSsdPageBytes != 0) {
    return InvalidArgumentError("SSD slot of " + std::to_string(slot_bytes) +
                                " bytes: not a positive multiple of 4 KiB");
  }
  if (slot_bytes > capacity_bytes_ - used_bytes_) {
    return ResourceExhaustedError("SSD tier full: " + FormatBytes(used_bytes_) + " of " +
                                  FormatBytes(capacity_bytes_) + " in use; no room for a slot of " +
                                  FormatBytes(slot_bytes));
  }
  uint32_t start = kFree;
  auto open = open_.find(slot_bytes);
  if (open != open_.end() && !open->second.empty()) {
    start = *open->second.begin();
  } else {
    const uint64_t n = ExtentRegions(slot_bytes);
    if (n * region_bytes_ / slot_bytes == 0) {
      return ResourceExhaustedError("SSD slot of " + FormatBytes(slot_bytes) +
                                    " is larger than the whole tier");
    }
    bool unprepared_free = false;
    for (uint64_t first = 0; first + n <= regions(); first += n) {
      bool free = true;
      for (uint64_t r = first; r < first + n && free; ++r) free = owner_[r] == kFree;
      if (!free) continue;
      if (first + n <= usable_regions) {
        start = static_cast<uint32_t>(first);
        NewExtent(start, slot_bytes);
        break;
      }
      unprepared_free = true;
      break;
    }
    if (start == kFree) {
      if (unprepared_free) {
        return UnavailableError(
            "SSD tier still preparing its file: " + FormatBytes(usable_regions * region_bytes_) +
            " of " + FormatBytes(regions() * region_bytes_) + " ready");
      }
      return ResourceExhaustedError("SSD tier: no free region for a slot of " +
                                    FormatBytes(slot_bytes) + " (" + FormatBytes(used_bytes_) +
                                    " in use; the rest is held by blocks of other sizes)");
    }
  }
  Extent& e = extents_.at(start);
  uint32_t word = e.hint_word;
  while (~e.bits[word] == 0) ++word;  // an open extent has a free slot
  e.hint_word = word;
  const uint32_t slot = word * 64 + static_cast<uint32_t>(std::countr_one(e.bits[word]));
  Take(start, e, slot);
  return PageOf(start, e, slot);
}

Status SsdSpace::Reserve(uint64_t slot_bytes, uint64_t page, uint64_t usable_regions) {
  uint32_t start = 0, slot = 0;
  if (slot_bytes == 0 || slot_bytes % kSsdPageBytes != 0 ||
      !Locate(slot_bytes, page, &start, &slot)) {
    return InvalidArgumentError("SSD page " + std::to_string(page) +
                                " is not the start of a slot of " + std::to_string(slot_bytes) +
                                " bytes");
  }
  const uint64_t n = ExtentRegions(slot_bytes);
  if (start + n > usable_regions) {
    return InvalidArgumentError("SSD page " + std::to_string(page) +
                                " lies beyond the prepared part of the file");
  }
  if (slot_bytes > capacity_bytes_ - used_bytes_) {
    return ResourceExhaustedError("SSD capacity " + FormatBytes(capacity_bytes_) +
                                  " exceeded by restored slots");
  }
  auto it = extents_.find(start);
  if (it == extents_.end()) {
    for (uint64_t r = start; r < start + n; ++r) {
      if (owner_[r] != kFree) {
        return FailedPreconditionError("SSD page " + std::to_string(page) +
                                       " lies in space held by blocks of another size");
      }
    }
    NewExtent(start, slot_bytes);
    it = extents_.find(start);
  } else if (it->second.slot_bytes != slot_bytes) {
    return FailedPreconditionError("SSD page " + std::to_string(page) +
                                   " lies in space held by blocks of another size");
  }
  Extent& e = it->second;
  if (e.bits[slot / 64] & (uint64_t{1} << (slot % 64))) {
    return FailedPreconditionError("SSD slot at page " + std::to_string(page) +
                                   " is already in use");
  }
  Take(start, e, slot);
  return Status::Ok();
}

Status SsdSpace::Free(uint64_t slot_bytes, uint64_t page) {
  uint32_t start = 0, slot = 0;
  auto it = extents_.end();
  if (slot_bytes != 0 && Locate(slot_bytes, page, &start, &slot)) it = extents_.find(start);
  if (it == extents_.end() || it->second.slot_bytes != slot_bytes ||
      !(it->second.bits[slot / 64] & (uint64_t{1} << (slot % 64)))) {
    return FailedPreconditionError("free of the SSD slot of " + std::to_string(slot_bytes) +
                                   " bytes at page " + std::to_string(page) +
                                   ", which is not in use");
  }
  Extent& e = it->second;
  e.bits[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  e.hint_word = std::min(e.hint_word, slot / 64);
  used_bytes_ -= slot_bytes;
  if (--e.used == 0) {
    // Back to the free regions at once: any size may take them now.
    for (uint32_t r = start; r < start + e.regions; ++r) owner_[r] = kFree;
    open_[slot_bytes].erase(start);
    extents_.erase(it);
  } else {
    open_[slot_bytes].insert(start);
  }
  return Status::Ok();
}

uint64_t SsdSpace::SlotBytesAt(uint64_t page) const {
  const uint64_t region = page * kSsdPageBytes / region_bytes_;
  if (region >= regions() || owner_[region] == kFree) return 0;
  const uint32_t start = owner_[region];
  const Extent& e = extents_.at(start);
  const uint64_t within = page * kSsdPageBytes - start * region_bytes_;
  if (within % e.slot_bytes != 0) return 0;
  const uint64_t slot = within / e.slot_bytes;
  if (slot >= e.slots || !(e.bits[slot / 64] & (uint64_t{1} << (slot % 64)))) return 0;
  return e.slot_bytes;
}

SsdSpaceStats SsdSpace::Stats() const {
  SsdSpaceStats s;
  s.capacity_bytes = capacity_bytes_;
  s.used_bytes = used_bytes_;
  s.region_bytes = region_bytes_;
  s.regions = regions();
  for (uint32_t o : owner_) s.free_regions += o == kFree ? 1 : 0;
  s.extents = extents_.size();
  for (const auto& [start, e] : extents_) s.slots_in_use[e.slot_bytes] += e.used;
  return s;
}

Status SsdSpace::CheckInvariants() const {
  uint64_t used = 0, owned = 0;
  for (const auto& [start, e] : extents_) {
    uint32_t bits = 0;
    for (uint64_t w : e.bits) bits += static_cast<uint32_t>(std::popcount(w));
    if (bits != e.used || e.used == 0 || e.used > e.slots) {
      return InternalError("extent at region " + std::to_string(start) + ": used count off");
    }
    if (start % e.regions != 0) return InternalError("extent not aligned to its size");
    for (uint32_t r = start; r < start + e.regions; ++r) {
      if (owner_[r] != start) return InternalError("region owner disagrees with its extent");
    }
    const bool open = open_.contains(e.slot_bytes) && open_.at(e.slot_bytes).contains(start);
    if (open != (e.used < e.slots)) return InternalError("open set disagrees with an extent");
    used += e.used * e.slot_bytes;
    owned += e.regions;
  }
  uint64_t not_free = 0;
  for (uint32_t o : owner_) not_free += o == kFree ? 0 : 1;
  if (used != used_bytes_ || owned != not_free || used_bytes_ > capacity_bytes_) {
    return InternalError("SSD space totals disagree");
  }
  return Status::Ok();
}

}  // namespace kvtier::tiers::internal

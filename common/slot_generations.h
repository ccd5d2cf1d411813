// Slot generations: what lets a worker read a block out of a shared arena
// again without asking the daemon (docs/protocol.md, "Direct reads").
//
// An arena tier keeps, beside its slots, one 64-bit generation per slot
// page (kSlotGenerationPageBytes), the generation of the slot that starts
// there, raised each time that slot is freed, before its bytes can belong
// to another block. A worker that learned a block's slot and generation
// while the block was leased to it (so neither could change), and later
// finds the same generation before and after copying the slot, copied that
// same block: the slot cannot have been reused in between without the
// daemon raising the generation first. A different generation, before or
// after, and the copy is thrown away.
//
// Where: the arena's last kSlotGenerationPageBytes hold a
// SlotGenerationsHeader; its table_offset, the table. The arena's size
// (HELLO's host_arena_bytes) covers both, after the slots.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvtier {

inline constexpr uint64_t kSlotGenerationPageBytes = 4096;
inline constexpr char kSlotGenerationsMagic[8] = {'k', 'v', 't', 'g', 'e', 'n', '1', '\0'};

struct SlotGenerationsHeader {
  char magic[8];          // kSlotGenerationsMagic
  uint64_t table_offset;  // bytes from the arena's start, a multiple of 4096
  uint64_t entries;       // slot pages: the slots' bytes / kSlotGenerationPageBytes
  uint64_t page_bytes;    // kSlotGenerationPageBytes
};
static_assert(sizeof(SlotGenerationsHeader) == 32);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
              std::atomic<uint64_t>::is_always_lock_free);

// Bytes after `slot_bytes` of slots that the table and the header take.
inline uint64_t SlotGenerationsBytes(uint64_t slot_bytes) {
  const uint64_t table = slot_bytes / kSlotGenerationPageBytes * sizeof(uint64_t);
  return (table + kSlotGenerationPageBytes - 1) / kSlotGenerationPageBytes *
             kSlotGenerationPageBytes +
         kSlotGenerationPageBytes;
}

// The table of an arena of `arena_bytes` mapped at `base`, checked against
// the arena's bounds; nullptr where there is none (or it is malformed).
inline std::atomic<uint64_t>* FindSlotGenerations(std::byte* base, uint64_t arena_bytes,
                                                  uint64_t* entries) {
  if (base == nullptr || arena_bytes < 2 * kSlotGenerationPageBytes) return nullptr;
  SlotGenerationsHeader h;
  std::memcpy(&h, base + arena_bytes - kSlotGenerationPageBytes, sizeof h);
  if (std::memcmp(h.magic, kSlotGenerationsMagic, sizeof h.magic) != 0 ||
      h.page_bytes != kSlotGenerationPageBytes || h.table_offset % kSlotGenerationPageBytes != 0 ||
      h.table_offset > arena_bytes - kSlotGenerationPageBytes ||
      h.entries > (arena_bytes - kSlotGenerationPageBytes - h.table_offset) / sizeof(uint64_t) ||
      h.entries > h.table_offset / kSlotGenerationPageBytes) {
    return nullptr;
  }
  *entries = h.entries;
  return reinterpret_cast<std::atomic<uint64_t>*>(base + h.table_offset);
}

}  // namespace kvtier

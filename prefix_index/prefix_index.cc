#include "prefix_index/prefix_index.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>

#include "common/hash.h"

namespace kvtier::prefix_index {
namespace {

constexpr size_t kMinTableSlots = 16;

constexpr uint32_t SlotId(uint64_t slot) { return static_cast<uint32_t>(slot); }
constexpr uint32_t SlotTag(uint64_t slot) { return static_cast<uint32_t>(slot >> 32); }
constexpr uint32_t HashTag(uint64_t hash) { return static_cast<uint32_t>(hash >> 32); }

}  // namespace

PrefixIndex::PrefixIndex(size_t expected_entries) {
  const size_t want = std::max(kMinTableSlots, expected_entries + expected_entries / 4 + 1);
  table_.assign(std::bit_ceil(want), kEmptySlot);
  mask_ = table_.size() - 1;
  nodes_.reserve(expected_entries);
}

uint64_t PrefixIndex::HashOf(NamespaceId ns, const BlockKey& key) {
  // Real keys are uniform already; the multiply-xorshift keeps hand-made
  // keys (tests, replayed trace ids) from clustering in the table.
  return BlockKeyHash::Mix(key, uint64_t{ns} * kGoldenGamma);
}

size_t PrefixIndex::FindSlot(NamespaceId ns, const BlockKey& key, uint64_t hash) const {
  const uint32_t tag = HashTag(hash);
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const uint64_t slot = table_[i];
    if (slot == kEmptySlot) return i;
    if (SlotTag(slot) == tag) {
      const Node& n = nodes_[SlotId(slot)];
      // (Field by field: BlockKey's == is a call to memcmp.)
      if (n.key.lo == key.lo && n.key.hi == key.hi && n.ns == ns) return i;
    }
  }
}

EntryId PrefixIndex::Find(NamespaceId ns, const BlockKey& key) const {
  assert(deferred_.empty());
  const uint64_t slot = table_[FindSlot(ns, key, HashOf(ns, key))];
  return slot == kEmptySlot ? kNoEntry : SlotId(slot);
}

template <typename Found>
size_t PrefixIndex::Walk(NamespaceId ns, std::span<const BlockKey> keys, Found found) const {
  assert(deferred_.empty());
  // A table this small, and its nodes, stay in the cache: the prefetches
  // below would only add instructions (a fifth of a LOOKUP's walk).
  if (table_.size() <= kPrefetchFromSlots) {
    // A chain's next key is most often its last key's newest child (a
    // prefix that has not branched there): one node compared instead of a
    // hash and a probe. Any other key is looked up in the table.
    size_t run = 0;
    EntryId last = kNoEntry;
    for (const BlockKey& key : keys) {
      EntryId id = kNoEntry;
      if (last != kNoEntry) {
        const EntryId child = nodes_[last].first_child;
        if (child != kNoEntry) {
          const Node& c = nodes_[child];
          if (c.key.lo == key.lo && c.key.hi == key.hi && c.ns == ns) id = child;
        }
      }
      if (id == kNoEntry) {
        const uint64_t slot = table_[FindSlot(ns, key, HashOf(ns, key))];
        if (slot == kEmptySlot) break;
        id = SlotId(slot);
      }
      if (!visible(id)) break;
      found(run, id);
      ++run;
      last = id;
    }
    return run;
  }
  // The keys of a chain are independent lookups, and in a large index each
  // one misses the cache twice (table slot, then node). Prefetch the slot
  // kSlotAhead keys ahead and the node kNodeAhead keys ahead, so the misses
  // overlap instead of queueing one after another.
  constexpr size_t kSlotAhead = 8;
  constexpr size_t kNodeAhead = 4;
  const size_t n = keys.size();
  uint64_t hashes[kSlotAhead];
  for (size_t i = 0; i < std::min(n, kSlotAhead); ++i) {
    hashes[i] = HashOf(ns, keys[i]);
    __builtin_prefetch(&table_[hashes[i] & mask_]);
  }
  size_t run = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t hash = hashes[i % kSlotAhead];
    if (i + kSlotAhead < n) {
      const uint64_t ahead = HashOf(ns, keys[i + kSlotAhead]);
      hashes[i % kSlotAhead] = ahead;
      __builtin_prefetch(&table_[ahead & mask_]);
    }
    if (i + kNodeAhead < n) {
      const uint64_t slot = table_[hashes[(i + kNodeAhead) % kSlotAhead] & mask_];
      if (slot != kEmptySlot) __builtin_prefetch(&nodes_[SlotId(slot)]);
    }
    const uint64_t slot = table_[FindSlot(ns, keys[i], hash)];
    if (slot == kEmptySlot || !visible(SlotId(slot))) break;
    found(i, SlotId(slot));
    ++run;
  }
  return run;
}

size_t PrefixIndex::LeadingRun(NamespaceId ns, std::span<const BlockKey> keys) const {
  return Walk(ns, keys, [](size_t, EntryId) {});
}

size_t PrefixIndex::LeadingRun(NamespaceId ns, std::span<const BlockKey> keys,
                               std::span<EntryId> ids) const {
  assert(ids.size() >= keys.size());
  return Walk(ns, keys, [ids](size_t i, EntryId id) { ids[i] = id; });
}

void PrefixIndex::InsertSlot(EntryId id, uint64_t hash) {
  size_t i = hash & mask_;
  while (table_[i] != kEmptySlot) i = (i + 1) & mask_;
  table_[i] = (uint64_t{HashTag(hash)} << 32) | id;
}

void PrefixIndex::Reserve(size_t entries) {
  nodes_.reserve(entries);
  // The table keeps at most 7/8 of its slots full (Insert).
  const size_t slots = std::bit_ceil(entries + entries / 7 + 1);
  if (slots > table_.size()) Rehash(slots);
}

void PrefixIndex::Grow() { Rehash(table_.size() * 2); }

void PrefixIndex::Rehash(size_t slots) {
  PageVector<uint64_t> old;
  old.swap(table_);
  table_.assign(slots, kEmptySlot);
  mask_ = table_.size() - 1;
  for (uint64_t slot : old) {
    if (slot == kEmptySlot) continue;
    const Node& n = nodes_[SlotId(slot)];
    InsertSlot(SlotId(slot), HashOf(n.ns, n.key));
  }
}

EntryId PrefixIndex::Insert(NamespaceId ns, const BlockKey& key, EntryId parent) {
  assert(Find(ns, key) == kNoEntry);
  const EntryId id = AddNode(ns, key, parent);
  InsertSlot(id, HashOf(ns, key));
  return id;
}

EntryId PrefixIndex::InsertDeferred(NamespaceId ns, const BlockKey& key, EntryId parent) {
  const EntryId id = AddNode(ns, key, parent);
  deferred_.push_back(id);
  return id;
}

void PrefixIndex::PlaceDeferred() {
  // A counting sort of the entries by the first bits of their home slots,
  // into runs that each fill a stretch of the table small enough to stay
  // in the cache (4,096 runs: the ends of all of them, a line each, fit
  // in 256 KiB of cache as the sort writes them).
  struct Home {
    uint64_t hash;
    EntryId id;
  };
  const int slot_bits = std::countr_zero(table_.size());
  const int run_bits = std::min(slot_bits, 12);
  const int shift = slot_bits - run_bits;
  std::vector<size_t> first((size_t{1} << run_bits) + 1, 0);
  std::vector<uint64_t> hashes(deferred_.size());
  for (size_t i = 0; i < deferred_.size(); ++i) {
    const Node& n = nodes_[deferred_[i]];
    hashes[i] = HashOf(n.ns, n.key);
    ++first[((hashes[i] & mask_) >> shift) + 1];
  }
  for (size_t r = 1; r < first.size(); ++r) first[r] += first[r - 1];
  std::vector<Home> sorted(deferred_.size());
  for (size_t i = 0; i < deferred_.size(); ++i) {
    sorted[first[(hashes[i] & mask_) >> shift]++] = {hashes[i], deferred_[i]};
  }
  for (const Home& h : sorted) InsertSlot(h.id, h.hash);
  std::vector<EntryId>().swap(deferred_);
}

EntryId PrefixIndex::AddNode(NamespaceId ns, const BlockKey& key, EntryId parent) {
  assert(parent == kNoEntry || live(parent));
  if ((size_ + 1) * 8 > table_.size() * 7) Grow();

  EntryId id;
  if (free_head_ != kNoEntry) {
    id = free_head_;
    free_head_ = nodes_[id].parent;
  } else {
    assert(nodes_.size() < kNoEntry);
    id = static_cast<EntryId>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[id];
  n = Node{key, ns, parent, kNoEntry, kNoEntry, kNoEntry, kLive};
  if (parent != kNoEntry) {
    Node& p = nodes_[parent];
    n.next_sibling = p.first_child;
    if (p.first_child != kNoEntry) nodes_[p.first_child].prev_sibling = id;
    p.first_child = id;
  }
  ++size_;
  return id;
}

void PrefixIndex::EraseSlot(size_t hole) {
  // Backward-shift deletion: move later members of the probe run into the
  // hole so lookups never need tombstones.
  size_t i = hole;
  for (;;) {
    i = (i + 1) & mask_;
    const uint64_t slot = table_[i];
    if (slot == kEmptySlot) break;
    const Node& n = nodes_[SlotId(slot)];
    const size_t home = HashOf(n.ns, n.key) & mask_;
    // Move the slot unless its home lies cyclically in (hole, i].
    const bool home_after_hole =
        hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!home_after_hole) {
      table_[hole] = slot;
      hole = i;
    }
  }
  table_[hole] = kEmptySlot;
}

void PrefixIndex::Erase(EntryId id) {
  assert(live(id) && deferred_.empty());
  Node& n = nodes_[id];
  EraseSlot(FindSlot(n.ns, n.key, HashOf(n.ns, n.key)));

  // Unlink from the parent's child list.
  if (n.prev_sibling != kNoEntry) {
    nodes_[n.prev_sibling].next_sibling = n.next_sibling;
  } else if (n.parent != kNoEntry) {
    nodes_[n.parent].first_child = n.next_sibling;
  }
  if (n.next_sibling != kNoEntry) nodes_[n.next_sibling].prev_sibling = n.prev_sibling;

  // Children become orphans.
  for (EntryId c = n.first_child; c != kNoEntry;) {
    Node& child = nodes_[c];
    const EntryId next = child.next_sibling;
    child.parent = kNoEntry;
    child.next_sibling = kNoEntry;
    child.prev_sibling = kNoEntry;
    child.flags |= kOrphan;
    c = next;
  }

  n.flags = 0;
  n.first_child = kNoEntry;
  n.parent = free_head_;
  free_head_ = id;
  --size_;
}

void PrefixIndex::SetVisible(EntryId id, bool visible) {
  assert(live(id));
  if (visible) {
    nodes_[id].flags |= kVisible;
  } else {
    nodes_[id].flags &= ~kVisible;
  }
}

size_t PrefixIndex::MemoryBytes() const {
  return nodes_.capacity() * sizeof(Node) + table_.capacity() * sizeof(uint64_t);
}

}  // namespace kvtier::prefix_index

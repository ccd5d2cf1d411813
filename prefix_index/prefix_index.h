// PrefixIndex: (namespace, block key) -> entry, with the parent/child links
// of the prefix tree, and the length of the present leading run of a chain.
//
// Pure data structure: it knows keys and links, nothing of tiers or bytes.
// Entries get dense ids (reused after Erase) so the owner keeps its own
// per-block state in plain vectors indexed by EntryId.
//
// Memory: a 40-byte node per entry plus an open-addressing table of 8-byte
// slots kept at most 7/8 full; about 50-60 bytes per block.
//
// Thread-safety: none; confined to the engine's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/page_allocator.h"
#include "prefix_index/block_key.h"

namespace kvtier::prefix_index {

using EntryId = uint32_t;
inline constexpr EntryId kNoEntry = 0xffff'ffffu;

class PrefixIndex {
 public:
  explicit PrefixIndex(size_t expected_entries = 0);

  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // Makes room for `entries` live entries in all, so that inserting up to
  // that many rehashes nothing (a warm restart knows how many come).
  void Reserve(size_t entries);

  // Adds (ns, key) as a child of `parent`; kNoEntry makes it the first block
  // of a chain (a child of the namespace root). New entries are invisible.
  // REQUIRES: Find(ns, key) == kNoEntry; parent is kNoEntry or live.
  EntryId Insert(NamespaceId ns, const BlockKey& key, EntryId parent);

  // Insert for many entries at once (a warm restart's millions): each gets
  // its id and links at once, but goes into the table only at
  // PlaceDeferred, which puts all of them there in the order of the table's
  // slots. Inserted one by one in any other order, each entry of a large
  // index costs a cache miss in the table. Until PlaceDeferred, Find,
  // LeadingRun and Erase must not be called, and no two deferred entries
  // may have the same key.
  EntryId InsertDeferred(NamespaceId ns, const BlockKey& key, EntryId parent);
  void PlaceDeferred();
  // Brings the parent's node, which InsertDeferred links to, into the cache.
  void PrefetchParent(EntryId parent) const {
    if (parent != kNoEntry) __builtin_prefetch(&nodes_[parent]);
  }

  // kNoEntry when absent (visible or not).
  EntryId Find(NamespaceId ns, const BlockKey& key) const;

  // Removes a live entry. Its children stay, as orphans: parent() becomes
  // kNoEntry and orphan() true. The owner decides what an orphan is worth.
  void Erase(EntryId id);

  // The number of leading keys of `keys` that are present and visible. A key
  // after a missing one is never counted, whatever its own presence.
  size_t LeadingRun(NamespaceId ns, std::span<const BlockKey> keys) const;
  // The same, and the entries of that run into `ids` (ids[0..run)).
  // REQUIRES: ids.size() >= keys.size().
  size_t LeadingRun(NamespaceId ns, std::span<const BlockKey> keys, std::span<EntryId> ids) const;

  // Visibility: only visible entries count in LeadingRun (uncommitted blocks
  // are in the index, so a second writer sees them, but not in lookups).
  void SetVisible(EntryId id, bool visible);
  bool visible(EntryId id) const { return (nodes_[id].flags & kVisible) != 0; }

  // Accessors. REQUIRES: id live.
  const BlockKey& key(EntryId id) const { return nodes_[id].key; }
  NamespaceId ns(EntryId id) const { return nodes_[id].ns; }
  EntryId parent(EntryId id) const { return nodes_[id].parent; }
  bool orphan(EntryId id) const { return (nodes_[id].flags & kOrphan) != 0; }
  bool has_children(EntryId id) const { return nodes_[id].first_child != kNoEntry; }
  EntryId first_child(EntryId id) const { return nodes_[id].first_child; }
  EntryId next_sibling(EntryId id) const { return nodes_[id].next_sibling; }
  bool live(EntryId id) const { return id < nodes_.size() && (nodes_[id].flags & kLive) != 0; }

  // Live entries.
  size_t size() const { return size_; }
  // Every live id is below this bound; size side arrays with it.
  size_t id_limit() const { return nodes_.size(); }
  // Heap bytes held by the index.
  size_t MemoryBytes() const;

 private:
  static constexpr uint32_t kLive = 1;
  static constexpr uint32_t kVisible = 2;
  static constexpr uint32_t kOrphan = 4;

  struct Node {
    BlockKey key;
    NamespaceId ns;
    EntryId parent;  // next free node while not live
    EntryId first_child;
    EntryId next_sibling;
    EntryId prev_sibling;
    uint32_t flags;
  };
  static_assert(sizeof(Node) == 40);

  // A table slot: entry id in the low half, the high half of the hash in
  // the upper half, so most mismatches are rejected without touching a node.
  static constexpr uint64_t kEmptySlot = ~uint64_t{0};
  // Walk prefetches only in a table of more slots than this (128 KiB, and
  // nodes for 7/8 of them: 560 KiB).
  static constexpr size_t kPrefetchFromSlots = size_t{1} << 14;

  static uint64_t HashOf(NamespaceId ns, const BlockKey& key);
  size_t FindSlot(NamespaceId ns, const BlockKey& key, uint64_t hash) const;
  // The walk both LeadingRuns make: `found(i, id)` for each key of the run.
  template <typename Found>
  size_t Walk(NamespaceId ns, std::span<const BlockKey> keys, Found found) const;
  void InsertSlot(EntryId id, uint64_t hash);
  // Insert without the table.
  EntryId AddNode(NamespaceId ns, const BlockKey& key, EntryId parent);
  void EraseSlot(size_t slot);
  void Grow();
  void Rehash(size_t slots);  // REQUIRES: slots a power of two, above size_ * 8 / 7

  PageVector<Node> nodes_;
  PageVector<uint64_t> table_;  // size is a power of two
  size_t mask_ = 0;
  size_t size_ = 0;
  EntryId free_head_ = kNoEntry;
  std::vector<EntryId> deferred_;  // InsertDeferred's, not yet in the table
};

}  // namespace kvtier::prefix_index

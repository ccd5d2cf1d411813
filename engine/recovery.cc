// Warm restart: the blocks a persistent ssd tier kept from an earlier run
// re-indexed, parents before children, and the namespaces they belong to
// registered from the tier's own table.
#include <algorithm>
#include <bit>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.h"
#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

namespace {

// What a restart keeps of a stored block while it orders them: 64 bytes
// where BlockInfo and its slot take 88, for millions of blocks.
struct Stored {
  BlockKey key;
  BlockKey parent;  // when has_parent
  uint64_t checksum;
  uint64_t block_bytes;
  uint32_t ns;
  SlotId slot;
  uint8_t priority;
  Quantize quantize;
  bool has_parent;

  static Stored Of(const BlockInfo& info, SlotId slot) {
    return {info.key,
            info.parent.value_or(BlockKey{}),
            info.checksum,
            info.block_bytes,
            info.ns,
            slot,
            info.priority,
            info.quantize,
            info.parent.has_value()};
  }
};

// A stored block in the order it is restored, with its parent's position in
// that order (56 bytes).
struct Placed {
  static constexpr size_t kNoParent = ~size_t{0};

  BlockKey key;
  uint64_t checksum;
  uint64_t block_bytes;
  size_t parent;  // kNoParent for a chain's first block
  uint32_t ns;
  SlotId slot;
  uint8_t priority;
  Quantize quantize;
  bool duplicate;  // a second record of a key

  // What the tier is told of a block it drops (FreeBlock, ForgetBlock).
  BlockInfo Info() const {
    BlockInfo info;
    info.ns = ns;
    info.key = key;
    info.block_bytes = block_bytes;
    info.priority = priority;
    info.checksum = checksum;
    info.quantize = quantize;
    return info;
  }
};

// LinkStored's answers for a block without a parent, and for one whose
// parent is not among the stored blocks.
constexpr size_t kNoParent = ~size_t{0};
constexpr size_t kMissingParent = kNoParent - 1;

// For each stored block, the position of its parent among them (kNoParent
// for a chain's first block, kMissingParent when it was not stored), and
// whether it is a second copy of a key stored before it. Through an
// open-addressing table of positions by (tier namespace, key), hashed as
// the index hashes them (hand-made keys, as tests and traces have, cluster
// otherwise).
struct StoredLinks {
  std::vector<size_t> parent;
  std::vector<bool> duplicate;
};
StoredLinks LinkStored(const std::vector<Stored>& stored) {
  // A slot: the block's position in the low half, the high half of its
  // key's hash in the upper half, so that a probe reads a block only when
  // the halves agree (in a large restart, each read is a cache miss).
  constexpr uint64_t kEmpty = ~uint64_t{0};
  const size_t n = stored.size();
  std::vector<uint64_t> table(std::bit_ceil(2 * n + 1), kEmpty);
  const size_t mask = table.size() - 1;
  auto hash_of = [](uint32_t ns, const BlockKey& key) {
    return prefix_index::BlockKeyHash::Mix(key, uint64_t{ns} * kGoldenGamma);
  };
  auto slot_of = [&](uint32_t ns, const BlockKey& key, uint64_t hash) {
    const uint64_t tag = hash >> 32 << 32;
    size_t at = static_cast<size_t>(hash) & mask;
    for (; table[at] != kEmpty; at = (at + 1) & mask) {
      if ((table[at] >> 32 << 32) != tag) continue;
      const Stored& there = stored[static_cast<uint32_t>(table[at])];
      if (there.ns == ns && there.key == key) break;
    }
    return at;
  };
  // The records' keys are in no order of the table's: each probe's slot
  // is fetched kAhead records ahead, and for parents (whose probe reads the
  // record it finds) that record kAhead / 2 ahead, so that the misses
  // overlap.
  constexpr size_t kAhead = 16;
  auto key_hash = [&](size_t i) { return hash_of(stored[i].ns, stored[i].key); };
  StoredLinks links{std::vector<size_t>(n, kNoParent), std::vector<bool>(n, false)};
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&table[key_hash(i + kAhead) & mask]);
    const uint64_t hash = key_hash(i);
    const size_t at = slot_of(stored[i].ns, stored[i].key, hash);
    if (table[at] == kEmpty) {
      table[at] = (hash >> 32 << 32) | i;
    } else {
      links.duplicate[i] = true;
    }
  }
  auto parent_hash = [&](size_t i) { return hash_of(stored[i].ns, stored[i].parent); };
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n && stored[i + kAhead].has_parent) {
      __builtin_prefetch(&table[parent_hash(i + kAhead) & mask]);
    }
    if (i + kAhead / 2 < n && stored[i + kAhead / 2].has_parent) {
      const uint64_t first = table[parent_hash(i + kAhead / 2) & mask];
      if (first != kEmpty) __builtin_prefetch(&stored[static_cast<uint32_t>(first)]);
    }
    const Stored& b = stored[i];
    if (!b.has_parent) continue;
    const uint64_t p = table[slot_of(b.ns, b.parent, hash_of(b.ns, b.parent))];
    links.parent[i] = p == kEmpty ? kMissingParent : static_cast<uint32_t>(p);
  }
  return links;
}

}  // namespace

Result<size_t> CacheEngine::Recover() {
  Tier* ssd = tier(TierKind::kSsd);
  if (ssd == nullptr) return size_t{0};
  std::vector<Stored> stored;
  KVTIER_RETURN_IF_ERROR(ssd->ForEachStoredBlock([&](const BlockInfo& info, SlotId slot) {
    // Positions are 32 bits (LinkStored), as the index's entries are.
    if (stored.size() + 1 >= kNoEntry) {
      return ResourceExhaustedError("more stored blocks than an index can hold");
    }
    stored.push_back(Stored::Of(info, slot));
    return Status::Ok();
  }));
  // Parents before children, shallower blocks first (so that a policy's
  // recency puts a chain's first blocks behind its last): a breadth-first
  // walk from the roots over lists of each block's children. The records
  // come in the order of their keys, which are hashes, so a block's parent
  // is anywhere among them; every step below that visits one is
  // independent of the step before, so the cache misses of a large restart
  // overlap (walking each chain up to find its depth, step after step, took
  // a sixth of a 3-million-block restart).
  const StoredLinks links = LinkStored(stored);
  const std::vector<size_t>& parent_of = links.parent;
  const size_t n = stored.size();
  auto parent_stored = [&](size_t i) { return parent_of[i] < n; };  // among the records
  // Children by parent, as runs of one array (children_from[p] the start).
  std::vector<uint32_t> children_from(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (parent_stored(i)) ++children_from[parent_of[i] + 1];
  }
  for (size_t i = 1; i <= n; ++i) children_from[i] += children_from[i - 1];
  std::vector<uint32_t> children(children_from[n]);
  {
    std::vector<uint32_t> next(children_from.begin(), children_from.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      if (parent_stored(i)) children[next[parent_of[i]]++] = static_cast<uint32_t>(i);
    }
  }
  // The walk: order[k] is the record restored k-th, parent_at[k] the
  // position of its parent in `order`.
  std::vector<uint32_t> order;
  std::vector<size_t> parent_at;
  order.reserve(n);
  parent_at.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (parent_of[i] == kNoParent) {
      order.push_back(static_cast<uint32_t>(i));
      parent_at.push_back(Placed::kNoParent);
    }
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const uint32_t i = order[k];
    for (uint32_t c = children_from[i]; c < children_from[i + 1]; ++c) {
      order.push_back(children[c]);
      parent_at.push_back(k);
    }
  }
  std::vector<uint32_t>().swap(children);
  std::vector<uint32_t>().swap(children_from);
  // What no root reaches (below a block that was not stored, or in a cycle
  // of records) goes last, to be dropped.
  const size_t rooted = order.size();
  {
    std::vector<bool> reached(n, false);
    for (uint32_t i : order) reached[i] = true;
    for (size_t i = 0; i < n; ++i) {
      if (!reached[i]) {
        order.push_back(static_cast<uint32_t>(i));
        parent_at.push_back(Placed::kNoParent);
      }
    }
  }
  // The blocks gathered in that order, so that the insertion below reads
  // them as a stream.
  constexpr size_t kGatherAhead = 16;
  std::vector<Placed> placed(n);
  for (size_t k = 0; k < n; ++k) {
    if (k + kGatherAhead < n) __builtin_prefetch(&stored[order[k + kGatherAhead]]);
    const Stored& s = stored[order[k]];
    placed[k] = {s.key,        s.checksum, s.block_bytes,
                 parent_at[k], s.ns,       s.slot,
                 s.priority,   s.quantize, links.duplicate[order[k]]};
  }
  std::vector<Stored>().swap(stored);
  std::vector<uint32_t>().swap(order);
  std::vector<size_t>().swap(parent_at);

  MakeIndexRoom(rooted);
  blocks_.reserve(index_.size() + rooted);
  // The entry each placed block became (kNoEntry: dropped), so that a
  // child finds its parent's without a lookup in the index.
  std::vector<EntryId> entry(rooted, kNoEntry);
  auto parent_entry = [&](const Placed& b) {
    return b.parent == Placed::kNoParent ? kNoEntry : entry[b.parent];
  };
  // Blocks already indexed (none, on a new engine) may collide with these.
  const bool check_index = index_.size() > 0;
  size_t restored = 0;
  // In a fresh index, entries go into its table all at once at the end
  // (PrefixIndex::PlaceDeferred).
  const bool defer = !check_index;
  // A block's parent is anywhere in the blocks before it: its entry,
  // fetched 2 * kAhead blocks ahead, then its node, kAhead ahead.
  constexpr size_t kAhead = 8;
  for (size_t k = 0; k < rooted; ++k) {
    if (k + 2 * kAhead < rooted && placed[k + 2 * kAhead].parent != Placed::kNoParent) {
      __builtin_prefetch(&entry[placed[k + 2 * kAhead].parent]);
    }
    if (k + kAhead < rooted) index_.PrefetchParent(parent_entry(placed[k + kAhead]));
    const Placed& b = placed[k];
    auto ns = NamespaceForTierId(b.ns);
    // A block kept in a form its namespace cannot have, or of another
    // size than that form's, is not the block its record names; nor is a
    // second record of a key, or a block whose parent was dropped just
    // above.
    const EntryId parent = parent_entry(b);
    if (!ns || !CheckQuantize(LayoutOf(*ns), b.quantize).ok() ||
        StoredBytes(*ns, b.quantize) != b.block_bytes || b.duplicate ||
        (b.parent != Placed::kNoParent && parent == kNoEntry) ||
        (check_index && index_.Find(*ns, b.key) != kNoEntry)) {
      ssd->FreeBlock(b.slot, b.Info());
      ssd->ForgetBlock(b.slot, b.Info()).IgnoreError();
      continue;
    }
    const EntryId id =
        defer ? index_.InsertDeferred(*ns, b.key, parent) : index_.Insert(*ns, b.key, parent);
    entry[k] = id;
    NewBlock(id, *ns, b.key);
    blocks_[id].state = State::kReady;
    blocks_[id].priority = b.priority;
    blocks_[id].checksum = b.checksum;
    blocks_[id].stored = b.quantize;
    EnterTier(id, TierKind::kSsd, b.slot);
    index_.SetVisible(id, true);
    Emit(BlockEvent::Kind::kStored, id, TierKind::kSsd);
    ++restored;
  }
  index_.PlaceDeferred();
  // What no root reaches hangs below a block that did not survive.
  for (size_t k = rooted; k < placed.size(); ++k) {
    ssd->FreeBlock(placed[k].slot, placed[k].Info());
    ssd->ForgetBlock(placed[k].slot, placed[k].Info()).IgnoreError();
    ++stats_.orphan_drops;
  }
  return restored;
}

std::optional<NamespaceId> CacheEngine::NamespaceForTierId(uint32_t tier_ns) {
  for (size_t i = 0; i < tier_ns_.size(); ++i) {
    if (tier_ns_[i] == tier_ns) return static_cast<NamespaceId>(i);
  }
  // A namespace of an earlier run that no worker attached to yet.
  Tier* ssd = tier(TierKind::kSsd);
  std::optional<NamespaceId> found;
  ssd->ForEachStoredNamespace([&](uint32_t id, const std::string& model, const std::string& salt,
                                  const Layout& layout) -> Status {
       if (id != tier_ns || found) return Status::Ok();
       auto added = AddNamespace({model, salt, layout});
       if (added) {
         found = *added;
         ns_decided_[*added] = false;  // the first worker to attach sets quantize_lower
       }
       return Status::Ok();
     })
      .IgnoreError();
  return found;
}

}  // namespace kvtier::engine

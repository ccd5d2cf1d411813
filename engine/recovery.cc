// Warm restart: the blocks a persistent ssd tier kept from an earlier run
// re-indexed, parents before children, and the namespaces they belong to
// registered from the tier's own table.
#include <algorithm>
#include <bit>
#include <string>
#include <utility>
#include <vector>

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
  const size_t n = stored.size();
  std::vector<size_t> table(std::bit_ceil(2 * n + 1), kNoParent);
  const size_t mask = table.size() - 1;
  auto slot_of = [&](uint32_t ns, const BlockKey& key) {
    size_t at = static_cast<size_t>(
                    prefix_index::BlockKeyHash::Mix(key, uint64_t{ns} * 0x9e3779b97f4a7c15ull)) &
                mask;
    while (table[at] != kNoParent) {
      const Stored& there = stored[table[at]];
      if (there.ns == ns && there.key == key) break;
      at = (at + 1) & mask;
    }
    return at;
  };
  StoredLinks links{std::vector<size_t>(n, kNoParent), std::vector<bool>(n, false)};
  for (size_t i = 0; i < n; ++i) {
    const size_t at = slot_of(stored[i].ns, stored[i].key);
    if (table[at] == kNoParent) {
      table[at] = i;
    } else {
      links.duplicate[i] = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const Stored& b = stored[i];
    if (!b.has_parent) continue;
    const size_t p = table[slot_of(b.ns, b.parent)];
    links.parent[i] = p == kNoParent ? kMissingParent : p;
  }
  return links;
}

}  // namespace

Result<size_t> CacheEngine::Recover() {
  Tier* ssd = tier(TierKind::kSsd);
  if (ssd == nullptr) return size_t{0};
  std::vector<Stored> stored;
  KVTIER_RETURN_IF_ERROR(ssd->ForEachStoredBlock([&](const BlockInfo& info, SlotId slot) {
    stored.push_back(Stored::Of(info, slot));
    return Status::Ok();
  }));
  // Parents before children, shallower blocks first (so that a policy's
  // recency puts a chain's first blocks behind its last, as a breadth-first
  // walk from the roots would): each block's depth found by walking its
  // chain up to a block already decided, or to a root, then a counting sort
  // by depth. Linear in the blocks.
  const StoredLinks links = LinkStored(stored);
  const std::vector<size_t>& parent_of = links.parent;
  constexpr uint32_t kUndecided = ~uint32_t{0};
  constexpr uint32_t kOrphan = kUndecided - 1;   // hangs below a block that was not stored
  constexpr uint32_t kWalking = kUndecided - 2;  // on the chain being walked
  std::vector<uint32_t> depth(stored.size(), kUndecided);
  std::vector<size_t> chain;
  uint32_t deepest = 0;
  for (size_t i = 0; i < stored.size(); ++i) {
    chain.clear();
    size_t at = i;
    while (at < stored.size() && depth[at] == kUndecided) {
      depth[at] = kWalking;
      chain.push_back(at);
      at = parent_of[at];
    }
    // Below a missing parent, an orphan, or in a cycle of records (met
    // again while walking): no root reaches it.
    uint32_t next = 0;  // the depth of the chain's top block
    if (at == kMissingParent ||
        (at < stored.size() && (depth[at] == kOrphan || depth[at] == kWalking))) {
      next = kOrphan;
    } else if (at < stored.size()) {
      next = depth[at] + 1;
    }
    for (size_t k = chain.size(); k-- > 0;) {
      depth[chain[k]] = next;
      if (next != kOrphan) deepest = std::max(deepest, next++);
    }
  }
  // The blocks moved into that order (orphans last), each with its
  // parent's position in it: read in the records' order and written to one
  // run per depth, so that the insertion below reads them as a stream.
  // Gathered in that order instead, a large index paid a cache miss for
  // almost every block.
  const uint32_t orphans = deepest + 1;
  auto bucket = [&](size_t i) { return depth[i] == kOrphan ? orphans : depth[i]; };
  std::vector<size_t> first(size_t{orphans} + 2, 0);  // of each depth in `placed`
  for (size_t i = 0; i < stored.size(); ++i) ++first[bucket(i) + 1];
  for (size_t d = 1; d < first.size(); ++d) first[d] += first[d - 1];
  const size_t rooted = first[orphans];
  std::vector<size_t> position(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) position[i] = first[bucket(i)]++;
  std::vector<Placed> placed(stored.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    const Stored& s = stored[i];
    const size_t p = parent_of[i];
    placed[position[i]] = {s.key,
                           s.checksum,
                           s.block_bytes,
                           p < stored.size() ? position[p] : Placed::kNoParent,
                           s.ns,
                           s.slot,
                           s.priority,
                           s.quantize,
                           links.duplicate[i]};
  }
  std::vector<Stored>().swap(stored);
  std::vector<size_t>().swap(position);
  std::vector<uint32_t>().swap(depth);

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
  constexpr size_t kAhead = 8;  // blocks whose parents' nodes are prefetched
  for (size_t k = 0; k < rooted; ++k) {
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

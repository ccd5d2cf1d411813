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

// StoredParents' answers for a block without a parent, and for one whose
// parent is not among the stored blocks.
constexpr size_t kNoParent = ~size_t{0};
constexpr size_t kMissingParent = kNoParent - 1;

// For each of `n` stored blocks (`info(i)`), the position of its parent among
// them (kNoParent for a chain's first block, kMissingParent when it was not
// stored), and whether it is a second copy of a key stored before it.
// Through an open-addressing table of positions by (tier namespace, key),
// hashed as the index hashes them (hand-made keys, as tests and traces
// have, cluster otherwise).
struct StoredLinks {
  std::vector<size_t> parent;
  std::vector<bool> duplicate;
};
template <typename Info>
StoredLinks LinkStored(size_t n, Info info) {
  std::vector<size_t> table(std::bit_ceil(2 * n + 1), kNoParent);
  const size_t mask = table.size() - 1;
  auto slot_of = [&](uint32_t ns, const BlockKey& key) {
    size_t at = static_cast<size_t>(
                    prefix_index::BlockKeyHash::Mix(key, uint64_t{ns} * 0x9e3779b97f4a7c15ull)) &
                mask;
    while (table[at] != kNoParent) {
      const BlockInfo& there = info(table[at]);
      if (there.ns == ns && there.key == key) break;
      at = (at + 1) & mask;
    }
    return at;
  };
  StoredLinks links{std::vector<size_t>(n, kNoParent), std::vector<bool>(n, false)};
  for (size_t i = 0; i < n; ++i) {
    const size_t at = slot_of(info(i).ns, info(i).key);
    if (table[at] == kNoParent) {
      table[at] = i;
    } else {
      links.duplicate[i] = true;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const BlockInfo& b = info(i);
    if (!b.parent) continue;
    const size_t p = table[slot_of(b.ns, *b.parent)];
    links.parent[i] = p == kNoParent ? kMissingParent : p;
  }
  return links;
}

}  // namespace

Result<size_t> CacheEngine::Recover() {
  Tier* ssd = tier(TierKind::kSsd);
  if (ssd == nullptr) return size_t{0};
  struct Stored {
    BlockInfo info;
    SlotId slot;
  };
  std::vector<Stored> stored;
  KVTIER_RETURN_IF_ERROR(ssd->ForEachStoredBlock([&](const BlockInfo& info, SlotId slot) {
    stored.push_back({info, slot});
    return Status::Ok();
  }));
  // Parents before children, shallower blocks first (so that a policy's
  // recency puts a chain's first blocks behind its last, as a breadth-first
  // walk from the roots would): each block's depth found by walking its
  // chain up to a block already decided, or to a root, then a counting sort
  // by depth. Linear in the blocks.
  const StoredLinks links =
      LinkStored(stored.size(), [&](size_t i) -> const BlockInfo& { return stored[i].info; });
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
  std::vector<size_t> first(size_t{deepest} + 2, 0);  // of each depth in `order`
  for (uint32_t d : depth) {
    if (d != kOrphan) ++first[d + 1];
  }
  for (size_t d = 1; d < first.size(); ++d) first[d] += first[d - 1];
  std::vector<size_t> order(first.back());
  for (size_t i = 0; i < stored.size(); ++i) {
    if (depth[i] != kOrphan) order[first[depth[i]]++] = i;
  }
  index_.Reserve(index_.size() + order.size());
  blocks_.reserve(index_.size() + order.size());
  // The entry each stored block became (kNoEntry: dropped), so that a
  // child finds its parent's without a lookup in the index.
  std::vector<EntryId> entry(stored.size(), kNoEntry);
  // Blocks already indexed (none, on a new engine) may collide with these.
  const bool check_index = index_.size() > 0;
  size_t restored = 0;
  constexpr size_t kAhead = 8;  // blocks whose index entries are prefetched
  for (size_t k = 0; k < order.size(); ++k) {
    if (k + kAhead < order.size()) {
      const size_t ahead = order[k + kAhead];
      const BlockInfo& a = stored[ahead].info;
      auto ahead_ns = NamespaceForTierId(a.ns);
      if (ahead_ns) {
        index_.PrefetchInsert(*ahead_ns, a.key, a.parent ? entry[parent_of[ahead]] : kNoEntry);
      }
    }
    const size_t i = order[k];
    const BlockInfo& info = stored[i].info;
    auto ns = NamespaceForTierId(info.ns);
    // A block kept in a form its namespace cannot have, or of another
    // size than that form's, is not the block its record names; nor is a
    // second record of a key, or a block whose parent was dropped just
    // above.
    const EntryId parent = info.parent ? entry[parent_of[i]] : kNoEntry;
    if (!ns || !CheckQuantize(LayoutOf(*ns), info.quantize).ok() ||
        StoredBytes(*ns, info.quantize) != info.block_bytes || links.duplicate[i] ||
        (info.parent && parent == kNoEntry) ||
        (check_index && index_.Find(*ns, info.key) != kNoEntry)) {
      ssd->FreeBlock(stored[i].slot, info);
      ssd->ForgetBlock(stored[i].slot, info).IgnoreError();
      continue;
    }
    MakeIndexRoom();
    const EntryId id = index_.Insert(*ns, info.key, parent);
    entry[i] = id;
    NewBlock(id, *ns, info.key);
    blocks_[id].state = State::kReady;
    blocks_[id].priority = info.priority;
    blocks_[id].checksum = info.checksum;
    blocks_[id].stored = info.quantize;
    EnterTier(id, TierKind::kSsd, stored[i].slot);
    index_.SetVisible(id, true);
    Emit(BlockEvent::Kind::kStored, id, TierKind::kSsd);
    ++restored;
  }
  // What no root reaches hangs below a block that did not survive.
  for (size_t i = 0; i < stored.size(); ++i) {
    if (depth[i] != kOrphan) continue;
    ssd->FreeBlock(stored[i].slot, stored[i].info);
    ssd->ForgetBlock(stored[i].slot, stored[i].info).IgnoreError();
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

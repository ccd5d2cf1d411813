// Warm restart: the blocks a persistent ssd tier kept from an earlier run
// re-indexed, parents before children, and the namespaces they belong to
// registered from the tier's own table.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

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
  // Children by (tier namespace, parent key); roots have no parent.
  std::map<std::pair<uint32_t, BlockKey>, std::vector<size_t>> children;
  std::vector<size_t> order;
  for (size_t i = 0; i < stored.size(); ++i) {
    const BlockInfo& info = stored[i].info;
    if (info.parent) {
      children[{info.ns, *info.parent}].push_back(i);
    } else {
      order.push_back(i);
    }
  }
  // Parents before children, breadth first from the roots.
  std::vector<EntryId> ids(stored.size(), kNoEntry);
  std::vector<bool> placed(stored.size(), false);
  for (size_t next = 0; next < order.size(); ++next) {
    const size_t i = order[next];
    placed[i] = true;
    auto it = children.find({stored[i].info.ns, stored[i].info.key});
    if (it == children.end()) continue;
    for (size_t c : it->second) order.push_back(c);
  }
  size_t restored = 0;
  for (size_t i : order) {
    const BlockInfo& info = stored[i].info;
    auto ns = NamespaceForTierId(info.ns);
    // A block kept in a form its namespace cannot have, or of another
    // size than that form's, is not the block its record names.
    if (!ns || !CheckQuantize(LayoutOf(*ns), info.quantize).ok() ||
        StoredBytes(*ns, info.quantize) != info.block_bytes ||
        index_.Find(*ns, info.key) != kNoEntry) {
      ssd->FreeBlock(stored[i].slot, info);
      ssd->ForgetBlock(stored[i].slot, info).IgnoreError();
      continue;
    }
    EntryId parent = kNoEntry;
    if (info.parent) {
      parent = index_.Find(*ns, *info.parent);
      if (parent == kNoEntry) {  // its parent was dropped just above
        ssd->FreeBlock(stored[i].slot, info);
        ssd->ForgetBlock(stored[i].slot, info).IgnoreError();
        continue;
      }
    }
    const EntryId id = index_.Insert(*ns, info.key, parent);
    if (blocks_.size() < index_.id_limit()) blocks_.resize(index_.id_limit());
    blocks_[id] = Block{};
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
    if (placed[i]) continue;
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

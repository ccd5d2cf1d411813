// The CacheEngine's hints: workers naming the chains of requests they will
// run soon, so that their blocks stay and those on the ssd (or only in the
// remote tier) come up to the host before they are asked for.
#include <algorithm>
#include <string>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

Result<HintResult> CacheEngine::Hint(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys,
                                     TimeNs until) {
  KVTIER_ASSIGN_OR_RETURN(HintResult out, HintLocal(owner, ns, keys, until));
  // What only the remote tier holds, past the local run, comes up too.
  if (remote_ != nullptr && out.protected_blocks < keys.size()) {
    PrefetchRemote(owner, ns, keys, until);
  }
  return out;
}

Result<HintResult> CacheEngine::HintLocal(uint64_t owner, NamespaceId ns,
                                          std::span<const BlockKey> keys, TimeNs until) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  ExpireHints();
  // Only the leading present run can ever hit; keys never cached are
  // nothing to protect.
  std::vector<EntryId> run;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id == kNoEntry || !index_.visible(id)) break;
    run.push_back(id);
  }
  const auto find_owner = [owner](HintState& h) {
    return std::find_if(h.owners.begin(), h.owners.end(),
                        [owner](const auto& o) { return o.first == owner; });
  };
  if (max_hinted_per_owner_ > 0) {
    uint64_t fresh = 0;
    for (EntryId id : run) {
      auto it = hints_.find(id);
      if (it == hints_.end() || find_owner(it->second) == it->second.owners.end()) ++fresh;
    }
    const auto have = hinted_by(owner);
    if (have + fresh > max_hinted_per_owner_) {
      ++stats_.hints_refused;
      return ResourceExhaustedError(
          "this hint would protect " + std::to_string(have + fresh) +
          " blocks for its session, more than the bound of " +
          std::to_string(max_hinted_per_owner_) + " (" + std::to_string(have) + " protected now, " +
          std::to_string(fresh) +
          " more asked); nothing was hinted: withdraw hints or let them expire first");
    }
  }
  HintResult out;
  for (EntryId id : run) {
    auto [it, inserted] = hints_.try_emplace(id);
    HintState& h = it->second;
    if (inserted) {
      h.until = h.soonest = until;
      hint_expiry_.insert({until, id});
      hint_order_.insert({until, id});
      blocks_[id].hinted = true;
      ++stats_.hinted_blocks;
      PolicyOf(blocks_[id].tier).Update(id, MetaOf(id));
    } else {
      if (until > h.until) {
        hint_expiry_.erase({h.until, id});
        h.until = until;
        hint_expiry_.insert({until, id});
      }
      if (until < h.soonest) {
        hint_order_.erase({h.soonest, id});
        h.soonest = until;
        hint_order_.insert({until, id});
      }
    }
    if (auto o = find_owner(h); o != h.owners.end()) {
      ++o->second;
    } else {
      h.owners.emplace_back(owner, 1);
      ++hinted_per_owner_[owner];
    }
    ++out.protected_blocks;
  }
  // Prefetch in chain order: a request reads its prefix from the start.
  // A block pinned where it is (being leased or written) stays.
  for (EntryId id : run) {
    Block& b = blocks_[id];
    if (!tiers_[Index(b.tier)]->io_bound() || b.promoting || b.pins > 0) continue;
    if (!StartPromotion(id, TierKind::kHost, /*waiter=*/0)) break;  // no room, queue full
    b.prefetched = true;
    ++stats_.prefetched_blocks;
    ++out.prefetching;
  }
  return out;
}

Result<size_t> CacheEngine::Unhint(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  size_t withdrawn = 0;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id == kNoEntry) continue;
    auto it = hints_.find(id);
    if (it == hints_.end()) continue;
    auto& owners = it->second.owners;
    auto o = std::find_if(owners.begin(), owners.end(),
                          [owner](const auto& e) { return e.first == owner; });
    if (o == owners.end()) continue;
    ++withdrawn;
    if (--o->second > 0) continue;
    owners.erase(o);
    if (--hinted_per_owner_[owner] == 0) hinted_per_owner_.erase(owner);
    if (owners.empty()) ReleaseHint(id, &stats_.hints_withdrawn);
  }
  return withdrawn;
}

void CacheEngine::DropHints(uint64_t owner) {
  remote_prefetches_.erase(owner);
  if (!hinted_per_owner_.contains(owner)) return;
  std::vector<EntryId> released;
  for (auto& [id, h] : hints_) {
    auto o = std::find_if(h.owners.begin(), h.owners.end(),
                          [owner](const auto& e) { return e.first == owner; });
    if (o == h.owners.end()) continue;
    h.owners.erase(o);
    if (h.owners.empty()) released.push_back(id);
  }
  hinted_per_owner_.erase(owner);
  for (EntryId id : released) ReleaseHint(id, &stats_.hints_withdrawn);
}

uint64_t CacheEngine::hinted_by(uint64_t owner) const {
  auto it = hinted_per_owner_.find(owner);
  return it == hinted_per_owner_.end() ? 0 : it->second;
}

void CacheEngine::ReleaseHint(EntryId id, uint64_t* counter) {
  auto it = hints_.find(id);
  if (it == hints_.end()) return;
  for (const auto& [owner, count] : it->second.owners) {
    auto o = hinted_per_owner_.find(owner);
    if (--o->second == 0) hinted_per_owner_.erase(o);
  }
  hint_expiry_.erase({it->second.until, id});
  hint_order_.erase({it->second.soonest, id});
  hints_.erase(it);
  ++*counter;
  Block& b = blocks_[id];
  b.hinted = false;
  PolicyOf(b.tier).Update(id, MetaOf(id));
}

void CacheEngine::ExpireHints() {
  if (hint_expiry_.empty()) return;
  const TimeNs now = clock_.Now();
  while (!hint_expiry_.empty() && hint_expiry_.begin()->first < now) {
    ReleaseHint(hint_expiry_.begin()->second, &stats_.hints_expired);
  }
}

bool CacheEngine::YieldHint(TierKind kind) {
  for (auto it = hint_order_.rbegin(); it != hint_order_.rend(); ++it) {
    const EntryId id = it->second;
    const Block& b = blocks_[id];
    if (b.tier != kind || b.pins > 0) continue;
    ReleaseHint(id, &stats_.hints_yielded);
    return true;
  }
  return false;
}

void CacheEngine::HintsUsed(std::span<const EntryId> run) {
  for (EntryId id : run) {
    Block& b = blocks_[id];
    if (b.hinted) {
      // One hint is used: the first owner's (the oldest hinter's).
      auto& owners = hints_.at(id).owners;
      if (--owners.front().second == 0) {
        const uint64_t owner = owners.front().first;
        owners.erase(owners.begin());
        if (--hinted_per_owner_[owner] == 0) hinted_per_owner_.erase(owner);
      }
      if (owners.empty()) ReleaseHint(id, &stats_.hints_used);
    }
    if (b.prefetched) {
      b.prefetched = false;
      ++stats_.prefetched_used;
    }
  }
}

}  // namespace kvtier::engine

// CacheEngine::CheckInvariants: every internal invariant, checked in
// O(blocks) for the tests.
#include <array>
#include <string>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

Status CacheEngine::CheckInvariants() const {
  auto fail = [](const std::string& what) { return InternalError("invariant: " + what); };
  std::vector<uint32_t> pins(index_.id_limit(), 0);
  for (const auto& [aid, rec] : allocations_) {
    for (EntryId e : rec.pending) ++pins[e];
    for (EntryId e : rec.pinned) ++pins[e];
  }
  for (const auto& [lid, run] : leases_) {
    for (EntryId e : run) ++pins[e];
  }
  std::array<uint64_t, kNumTierKinds> used{}, count{}, pinned{};
  uint64_t pending = 0, shadows = 0;
  for (EntryId id = 0; id < index_.id_limit(); ++id) {
    if (!index_.live(id)) continue;
    const Block& b = blocks_[id];
    const std::string name = "block " + index_.key(id).ToHex();
    if (tiers_[Index(b.tier)] == nullptr) return fail(name + " in an absent tier");
    if (b.pins != pins[id]) {
      return fail(name + " has " + std::to_string(b.pins) + " pins, holders say " +
                  std::to_string(pins[id]));
    }
    if (index_.visible(id) != (b.state == State::kReady)) return fail(name + " visibility");
    if ((b.state == State::kArriving || b.promoting) && b.pins == 0) {
      return fail(name + " moves unpinned");
    }
    if (b.state == State::kPending) ++pending;
    if ((b.state == State::kDoomed || index_.orphan(id)) && b.pins == 0) {
      return fail(name + " is an unpinned doomed or orphan block");
    }
    const EntryId p = index_.parent(id);
    if (p != kNoEntry && !index_.live(p)) return fail(name + " has a dead parent");
    uint32_t children = 0;
    for (EntryId c = index_.first_child(id); c != kNoEntry; c = index_.next_sibling(c)) {
      if (index_.parent(c) != id) return fail(name + " child link");
      if (blocks_[c].tier == b.tier) ++children;
    }
    if (children != b.children_in_tier) return fail(name + " children_in_tier");
    const size_t t = Index(b.tier);
    used[t] += tiers_[t]->SlotBytes(BytesInTier(id));
    if (b.has_shadow) {
      if (b.tier == TierKind::kSsd) return fail(name + " on the ssd with a shadow");
      used[Index(TierKind::kSsd)] +=
          tiers_[Index(TierKind::kSsd)]->SlotBytes(StoredBytes(index_.ns(id), b.stored));
      ++shadows;
    }
    if (b.shadow_pending && (!b.has_shadow || b.pins == 0)) return fail(name + " shadow state");
    ++count[t];
    if (b.pins > 0) ++pinned[t];
  }
  if (pending != pending_blocks_) return fail("pending block count");
  if (hint_expiry_.size() != hints_.size() || hint_order_.size() != hints_.size()) {
    return fail("hint expiry count");
  }
  std::unordered_map<uint64_t, uint64_t> per_owner;
  for (const auto& [id, h] : hints_) {
    if (!index_.live(id) || !blocks_[id].hinted) return fail("a hint on a block not hinted");
    if (!hint_expiry_.contains({h.until, id}) || !hint_order_.contains({h.soonest, id})) {
      return fail("a hint missing from the expiry or yield order");
    }
    if (h.owners.empty()) return fail("a hint without owners");
    for (const auto& [o, hints] : h.owners) {
      if (hints == 0) return fail("a hint owner with no hints");
      ++per_owner[o];
    }
  }
  if (per_owner != hinted_per_owner_) return fail("hinted blocks per owner");
  for (EntryId id = 0; id < index_.id_limit(); ++id) {
    if (index_.live(id) && blocks_[id].hinted && !hints_.contains(id)) {
      return fail("block " + index_.key(id).ToHex() + " hinted without a hint");
    }
  }
  if (shadows != shadows_) return fail("shadow count");
  for (size_t t = 0; t < kNumTierKinds; ++t) {
    if (tiers_[t] == nullptr) continue;
    const std::string tn(TierKindName(static_cast<TierKind>(t)));
    if (used[t] != tiers_[t]->used_bytes()) return fail(tn + " used bytes");
    if (used[t] > tiers_[t]->capacity_bytes()) return fail(tn + " over capacity");
    if (count[t] != policies_[t]->size()) return fail(tn + " policy size");
    if (pinned[t] != pinned_in_tier_[t]) return fail(tn + " pinned count");
  }
  return Status::Ok();
}

}  // namespace kvtier::engine

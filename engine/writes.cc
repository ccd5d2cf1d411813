// The write path and the other changes workers ask for: Allocate (slots
// reserved, invisible to lookups), Commit (published; write-through starts
// here), Abort, SetRetention (priorities) and Remove.
#include <memory>
#include <string>
#include <utility>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

Result<Allocation> CacheEngine::Allocate(NamespaceId ns, std::optional<BlockKey> parent,
                                         std::span<const BlockKey> keys, TierKind kind) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  KVTIER_RETURN_IF_ERROR(CheckTarget(kind));
  if (keys.empty()) return InvalidArgumentError("no keys to allocate");
  ExpireHints();

  AllocationRecord rec;
  rec.ns = ns;
  EntryId prev = kNoEntry;
  if (parent) {
    prev = index_.Find(ns, *parent);
    if (prev == kNoEntry || blocks_[prev].state != State::kReady) {
      return NotFoundError("the parent block is not cached; write the chain from its start");
    }
    Pin(prev);
    rec.pinned.push_back(prev);
  }

  const uint64_t bytes = block_bytes_[ns];
  Allocation out;
  out.block_bytes_ = bytes;
  out.states_.assign(keys.size(), WriteState::kSkipped);
  out.locations_.resize(keys.size());
  Status no_room;
  for (size_t i = 0; i < keys.size(); ++i) {
    EntryId id = index_.Find(ns, keys[i]);
    if (id != kNoEntry) {
      if (blocks_[id].state != State::kReady) break;  // someone else is writing it
      Pin(id);
      rec.pinned.push_back(id);
      out.states_[i] = WriteState::kExists;
      prev = id;
      continue;
    }
    // (The fingerprint only where a filter will ask for it.)
    const std::optional<uint64_t> admit =
        admission_[Index(kind)] != nullptr || PolicyOf(kind).filters_admission()
            ? std::optional(PolicyFingerprint(ns, keys[i]))
            : std::nullopt;
    bool kept_out = false;
    Result<SlotId> slot = MakeRoom(kind, bytes, /*yield_hints=*/true, admit, &kept_out);
    if (!slot) {
      // A block the admission filter keeps out is not an error: the tier
      // chose not to store it (and the rest of the chain, which would hang
      // under it), and the write says so with its blocks skipped.
      if (!kept_out) no_room = slot.status();
      break;
    }
    // Making room may have dropped an ancestor of the write (the pinned
    // blocks keep their own places, not their parents'): what is written
    // under it would go at the commit, so it is skipped instead of taking
    // more blocks' room.
    const EntryId top = !rec.pinned.empty() ? rec.pinned.front() : kNoEntry;
    if (top != kNoEntry && index_.orphan(top)) {
      tiers_[Index(kind)]->Free(*slot);
      no_room = ResourceExhaustedError("the " + std::string(TierKindName(kind)) +
                                       " tier dropped the chain's own prefix to make room");
      break;
    }
    MakeIndexRoom();
    id = index_.Insert(ns, keys[i], prev);
    NewBlock(id, ns, keys[i]).pins = 1;  // a pending block is pinned by its writer
    EnterTier(id, kind, *slot);
    ++pending_blocks_;
    rec.pending.push_back(id);
    out.states_[i] = WriteState::kAllocated;
    out.locations_[i] = LocationOf(id);
    prev = id;
  }

  if (rec.pending.empty() && !no_room.ok()) {
    for (auto it = rec.pinned.rbegin(); it != rec.pinned.rend(); ++it) Unpin(*it);
    return no_room;
  }
  out.engine_ = this;
  out.id_ = next_handle_id_++;
  allocations_.emplace(out.id_, std::move(rec));
  return out;
}

Status CacheEngine::CommitAllocation(uint64_t id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return InternalError("unknown allocation");
  AllocationRecord rec = std::move(it->second);
  allocations_.erase(it);
  for (EntryId e : rec.pending) {
    blocks_[e].state = State::kReady;
    index_.SetVisible(e, true);
    --pending_blocks_;
    ++stats_.committed_blocks;
    Emit(BlockEvent::Kind::kStored, e, blocks_[e].tier);
  }
  if (write_through_ && tier(TierKind::kSsd) != nullptr) {
    for (EntryId e : rec.pending) StartShadow(e);
  }
  if (remote_write_through_ && remote_ != nullptr) {
    for (EntryId e : rec.pending) WriteRemote(e);
  }
  // Last block first, so the chain's head ends up the most recent (as in
  // ReleaseLease). Unpin drops a block at once if an ancestor went meanwhile.
  for (auto p = rec.pending.rbegin(); p != rec.pending.rend(); ++p) Unpin(*p);
  for (auto p = rec.pinned.rbegin(); p != rec.pinned.rend(); ++p) Unpin(*p);
  return Status::Ok();
}

void CacheEngine::AbortAllocation(uint64_t id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return;
  AllocationRecord rec = std::move(it->second);
  allocations_.erase(it);
  // Last block first: a pending block's only children are later pending
  // blocks of the same allocation.
  for (auto p = rec.pending.rbegin(); p != rec.pending.rend(); ++p) {
    LeaveTier(*p);
    blocks_[*p].pins = 0;
    index_.Erase(*p);
    --pending_blocks_;
    ++stats_.aborted_blocks;
  }
  for (auto p = rec.pinned.rbegin(); p != rec.pinned.rend(); ++p) Unpin(*p);
}

Result<size_t> CacheEngine::SetRetention(NamespaceId ns, std::span<const BlockKey> keys,
                                         std::span<const uint8_t> priorities,
                                         std::span<const TimeNs> expires_at) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  if (priorities.size() != keys.size() || expires_at.size() != keys.size()) {
    return InvalidArgumentError("one priority and one expiry per key");
  }
  size_t updated = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (priorities[i] > eviction::kMaxPriority) {
      return InvalidArgumentError("priority " + std::to_string(priorities[i]) + " is above 100");
    }
    const EntryId id = index_.Find(ns, keys[i]);
    if (id == kNoEntry || blocks_[id].state == State::kDoomed) continue;
    Block& b = blocks_[id];
    b.priority = priorities[i];
    b.priority_until = expires_at[i];
    PolicyOf(b.tier).Update(id, MetaOf(id));
    ++updated;
  }
  return updated;
}

Result<size_t> CacheEngine::Remove(NamespaceId ns, std::span<const BlockKey> keys) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  size_t removed = 0;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id == kNoEntry ||
        (blocks_[id].state != State::kReady && blocks_[id].state != State::kArriving)) {
      continue;
    }
    ++removed;
    ++stats_.removed_blocks;
    if (blocks_[id].pins > 0) {
      if (blocks_[id].state == State::kReady)
        Emit(BlockEvent::Kind::kRemoved, id, blocks_[id].tier);
      blocks_[id].state = State::kDoomed;  // freed by its last Unpin
      index_.SetVisible(id, false);
    } else {
      Drop(id);
    }
  }
  if (remote_ != nullptr) {
    // Removed for every node: a removed block must not come back from the
    // shared tier either. Best effort.
    auto doomed = std::make_shared<std::vector<BlockKey>>(keys.begin(), keys.end());
    if (!SubmitRemote(
            [r = remote_.get(), id = remote_ns_[ns].id, doomed] { return r->Remove(id, *doomed); },
            [](const Status&) {})) {
      ++stats_.remote_write_dropped;
    }
  }
  return removed;
}

}  // namespace kvtier::engine

// The read path (DESIGN.md §3): Lookup (the leading present run, changing no
// recency), Acquire (pinning that run into the tier asked for, moving blocks
// between memory tiers on the engine's thread), their asynchronous forms
// (promotions from the ssd, and copies into a GPU arena, on the I/O pools;
// the reply waits for them, nobody else does) and the leases they make.
// Where a remote tier is configured, an async lookup or acquire whose local
// run ends on a block not cached here asks it for the rest first: one call
// into remote.cc (LookupRemote, AcquireWithRemote); without one, RemoteStart
// answers nothing and everything below stays in this file.
#include <array>
#include <utility>
#include <vector>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

Result<LookupResult> CacheEngine::Lookup(NamespaceId ns, std::span<const BlockKey> keys) {
  LookupResult result;
  KVTIER_RETURN_IF_ERROR(Lookup(ns, keys, &result));
  return result;
}

Status CacheEngine::Lookup(NamespaceId ns, std::span<const BlockKey> keys, LookupResult* found) {
  found->hits = 0;
  found->tiers.clear();
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  ExpireHints();
  TellReferences(ns, keys);
  if (lookup_ids_.size() < keys.size()) lookup_ids_.resize(keys.size());
  const size_t hits = index_.LeadingRun(ns, keys, lookup_ids_);
  found->tiers.resize(hits);
  // (Counted here, then added: an increment in memory a key is a chain of
  // dependent loads and stores.)
  std::array<uint64_t, kNumTierKinds> tier_hits{};
  for (size_t i = 0; i < hits; ++i) {
    const TierKind tier = blocks_[lookup_ids_[i]].tier;
    found->tiers[i] = tier;
    ++tier_hits[Index(tier)];
  }
  for (size_t t = 0; t < kNumTierKinds; ++t) stats_.tiers[t].lookup_hits += tier_hits[t];
  found->hits = hits;
  if (hits < keys.size()) {
    NamespaceUse& use = ns_use_[ns];
    (WasDropped(ns, keys[hits]) ? use.missed_evicted : use.missed_never_stored) +=
        keys.size() - hits;
  }
  ++stats_.lookups;
  stats_.lookup_keys += keys.size();
  stats_.lookup_hits += hits;
  return Status::Ok();
}

void CacheEngine::LookupAsync(NamespaceId ns, std::span<const BlockKey> keys,
                              std::function<void(Result<LookupResult>)> done) {
  // Blocks on their way in from the remote tier are found once they are in.
  if (!remote_reading_.empty()) {
    std::function<void()> retry = [this, ns,
                                   chain = std::vector<BlockKey>(keys.begin(), keys.end()),
                                   done]() mutable { LookupAsync(ns, chain, std::move(done)); };
    if (WaitForRemoteRead(ns, keys, retry)) return;
  }
  Result<LookupResult> local = Lookup(ns, keys);
  if (!local) return done(std::move(local));
  // The local run ends on a key not cached here at all: the remote tier,
  // if there is one, may hold the rest of the chain.
  const std::optional<size_t> from = RemoteStart(ns, keys);
  if (from && *from == local->hits) {
    return LookupRemote(ns, keys.subspan(*from), std::move(*local), std::move(done));
  }
  done(std::move(local));
}

Result<Lease> CacheEngine::Acquire(NamespaceId ns, std::span<const BlockKey> keys, TierKind kind) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  KVTIER_RETURN_IF_ERROR(CheckTarget(kind));
  ExpireHints();
  std::vector<EntryId> run = PinLeadingRun(ns, keys);
  // A block held by another lease or writer cannot move, and one on an
  // io_bound tier needs AcquireAsync; the lease stops before either, as it
  // does where `kind` has no room.
  for (size_t i = 0; i < run.size(); ++i) {
    const Block& b = blocks_[run[i]];
    if (LeavingFor(run[i], kind)) break;
    if (b.tier == kind) continue;
    if (b.pins > 1 || tiers_[Index(b.tier)]->io_bound() || !Move(run[i], kind).ok()) break;
  }
  return MakeLease(ns, std::move(run), kind);
}

void CacheEngine::AcquireAsync(NamespaceId ns, std::span<const BlockKey> keys, TierKind kind,
                               std::function<void(Result<Lease>)> done) {
  if (Status s = CheckNamespace(ns); !s.ok()) return done(s);
  if (Status s = CheckTarget(kind); !s.ok()) return done(s);
  if (!remote_reading_.empty()) {  // blocks on their way in from the remote tier
    std::function<void()> retry =
        [this, ns, chain = std::vector<BlockKey>(keys.begin(), keys.end()), kind, done]() mutable {
          AcquireAsync(ns, chain, kind, std::move(done));
        };
    if (WaitForRemoteRead(ns, keys, retry)) return;
  }
  // What only the remote tier holds past the local run comes into the host
  // first; then the acquire runs as it does without one.
  if (const std::optional<size_t> from = RemoteStart(ns, keys)) {
    return AcquireWithRemote(ns, keys, *from, kind, std::move(done));
  }
  AcquireLocal(ns, keys, kind, std::move(done));
}

void CacheEngine::AcquireLocal(NamespaceId ns, std::span<const BlockKey> keys, TierKind kind,
                               std::function<void(Result<Lease>)> done) {
  ExpireHints();
  std::vector<EntryId> run = PinLeadingRun(ns, keys);
  const uint64_t pending_id = next_handle_id_++;
  PendingAcquire pending{ns, kind, {}, 0, std::move(done)};
  for (size_t i = 0; i < run.size(); ++i) {
    Block& b = blocks_[run[i]];
    if (LeavingFor(run[i], kind)) break;
    if (b.promoting) {  // to `kind`: wait for it with the others
      promotions_[run[i]].waiters.push_back(pending_id);
      ++pending.outstanding;
      continue;
    }
    if (b.tier == kind) continue;
    if (PromotesAsync(run[i], kind)) {
      if (b.pins > 1 || !StartPromotion(run[i], kind, pending_id)) break;
      ++pending.outstanding;
      continue;
    }
    if (b.pins > 1 || !Move(run[i], kind).ok()) break;
  }
  pending.run = std::move(run);
  pending_acquires_.emplace(pending_id, std::move(pending));
  if (pending_acquires_[pending_id].outstanding == 0) FinishAcquire(pending_id);
}

std::vector<EntryId> CacheEngine::LeadingRun(NamespaceId ns, std::span<const BlockKey> keys) const {
  std::vector<EntryId> run(keys.size());
  run.resize(index_.LeadingRun(ns, keys, run));
  return run;
}

std::vector<EntryId> CacheEngine::PinLeadingRun(NamespaceId ns, std::span<const BlockKey> keys) {
  std::vector<EntryId> run = LeadingRun(ns, keys);
  // The policies hear of the pins with the touches in Served (a Touch
  // carries the pinned state as an Update would): one call per block, not two.
  for (EntryId id : run) Pin(id, /*tell_policy=*/false);
  HintsUsed(run);
  Served(ns, run);
  return run;
}

void CacheEngine::Served(NamespaceId ns, std::span<const EntryId> run) {
  // Touch the last block first so a chain's head is the most recent: the
  // tail of a prefix goes before the blocks it depends on.
  for (auto it = run.rbegin(); it != run.rend(); ++it) {
    Block& b = blocks_[*it];
    PolicyOf(b.tier).Touch(*it, MetaOf(*it));
    ++stats_.tiers[Index(b.tier)].hits;
    ++ns_use_[ns].hit_blocks[Index(b.from_remote ? TierKind::kRemote : b.tier)];
    b.from_remote = false;
  }
}

Result<size_t> CacheEngine::Touch(NamespaceId ns, std::span<const BlockKey> keys) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  ExpireHints();
  // Every key present, not only a leading run: a worker's TOUCH carries the
  // blocks of several direct reads at once (each read's chain in order).
  std::vector<EntryId> run;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id != kNoEntry && index_.visible(id)) run.push_back(id);
  }
  HintsUsed(run);
  Served(ns, run);
  stats_.acquired_blocks += run.size();
  stats_.acquired_tokens += run.size() * namespaces_[ns].layout.block_tokens;
  return run.size();
}

void CacheEngine::FinishAcquire(uint64_t pending_id) {
  auto it = pending_acquires_.find(pending_id);
  PendingAcquire p = std::move(it->second);
  pending_acquires_.erase(it);
  p.done(MakeLease(p.ns, std::move(p.run), p.tier));
}

Lease CacheEngine::MakeLease(NamespaceId ns, std::vector<EntryId> run, TierKind kind) {
  size_t kept = 0;
  while (kept < run.size() && blocks_[run[kept]].tier == kind &&
         blocks_[run[kept]].state == State::kReady && !LeavingFor(run[kept], kind)) {
    ++kept;
  }
  for (size_t i = run.size(); i > kept; --i) Unpin(run[i - 1]);
  ns_use_[ns].failed_loads += run.size() - kept;
  run.resize(kept);

  Lease lease;
  lease.block_bytes_ = block_bytes_[ns];
  lease.locations_.reserve(run.size());
  for (EntryId id : run) lease.locations_.push_back(LocationOf(id));
  stats_.acquired_blocks += run.size();
  stats_.acquired_tokens += run.size() * namespaces_[ns].layout.block_tokens;
  lease.engine_ = this;
  lease.id_ = next_handle_id_++;
  leases_.emplace(lease.id_, std::move(run));
  return lease;
}

void CacheEngine::ReleaseLease(uint64_t id) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  std::vector<EntryId> run = std::move(it->second);
  leases_.erase(it);
  // Last block first, so the chain's head ends up the most recent.
  for (auto p = run.rbegin(); p != run.rend(); ++p) Unpin(*p);
}

}  // namespace kvtier::engine

#include "tiers/cache_engine.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <map>
#include <utility>

namespace kvtier::tiers {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

namespace {

// The remote tier's name and layout for a namespace's blocks: those of the
// form they are kept in, so nodes that keep a model's blocks in fp8 share
// them among themselves, never with nodes that keep them as written.
RemoteNamespace RemoteNamespaceOf(const NamespaceSpec& spec) {
  const Layout stored = StoredLayout(spec.layout, spec.quantize_lower);
  return {RemoteNamespaceId(spec.model, spec.salt, stored), stored};
}

}  // namespace

// ---------------------------------------------------------------- handles

Allocation::Allocation(Allocation&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      id_(other.id_),
      block_bytes_(other.block_bytes_),
      states_(std::move(other.states_)),
      locations_(std::move(other.locations_)) {}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Abort();
    engine_ = std::exchange(other.engine_, nullptr);
    id_ = other.id_;
    block_bytes_ = other.block_bytes_;
    states_ = std::move(other.states_);
    locations_ = std::move(other.locations_);
  }
  return *this;
}

Allocation::~Allocation() { Abort(); }

size_t Allocation::allocated() const {
  return static_cast<size_t>(std::count(states_.begin(), states_.end(), WriteState::kAllocated));
}

std::span<std::byte> Allocation::Bytes(size_t i) const {
  assert(open() && states_[i] == WriteState::kAllocated);
  return engine_->BytesAt(locations_[i], block_bytes_);
}

Status Allocation::Commit() {
  assert(open());
  CacheEngine* engine = std::exchange(engine_, nullptr);
  return engine->CommitAllocation(id_);
}

void Allocation::Abort() {
  if (CacheEngine* engine = std::exchange(engine_, nullptr)) engine->AbortAllocation(id_);
}

Lease::Lease(Lease&& other) noexcept
    : engine_(std::exchange(other.engine_, nullptr)),
      id_(other.id_),
      block_bytes_(other.block_bytes_),
      locations_(std::move(other.locations_)) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    engine_ = std::exchange(other.engine_, nullptr);
    id_ = other.id_;
    block_bytes_ = other.block_bytes_;
    locations_ = std::move(other.locations_);
  }
  return *this;
}

Lease::~Lease() { Release(); }

std::span<const std::byte> Lease::Bytes(size_t i) const {
  assert(open());
  return engine_->BytesAt(locations_[i], block_bytes_);
}

void Lease::Release() {
  if (CacheEngine* engine = std::exchange(engine_, nullptr)) engine->ReleaseLease(id_);
}

// ---------------------------------------------------------------- engine

Result<std::unique_ptr<CacheEngine>> CacheEngine::Create(const EngineOptions& options,
                                                         std::unique_ptr<Tier> device,
                                                         std::unique_ptr<Tier> host,
                                                         std::unique_ptr<Tier> ssd,
                                                         std::unique_ptr<RemoteTier> remote) {
  if (options.clock == nullptr) return InvalidArgumentError("EngineOptions.clock is null");
  if (host == nullptr) return InvalidArgumentError("the host tier is required");
  if (host->kind() != TierKind::kHost) return InvalidArgumentError("host tier of the wrong kind");
  if (device != nullptr && device->kind() != TierKind::kDevice) {
    return InvalidArgumentError("device tier of the wrong kind");
  }
  if (ssd != nullptr && ssd->kind() != TierKind::kSsd) {
    return InvalidArgumentError("ssd tier of the wrong kind");
  }
  for (const Tier* t : {device.get(), host.get()}) {
    if (t != nullptr && t->io_bound()) {
      return InvalidArgumentError("only the ssd tier may do blocking I/O");
    }
  }
  if (ssd != nullptr && ssd->io_bound() && options.io == nullptr) {
    return InvalidArgumentError("an io_bound ssd tier needs EngineOptions.io");
  }
  if (remote != nullptr && options.remote_io == nullptr) {
    return InvalidArgumentError("a remote tier needs EngineOptions.remote_io");
  }
  std::unique_ptr<CacheEngine> engine(new CacheEngine(options, std::move(device), std::move(host),
                                                      std::move(ssd), std::move(remote)));
  const std::pair<TierKind, const std::string*> wanted[] = {
      {TierKind::kDevice, &options.device_policy},
      {TierKind::kHost, &options.host_policy},
      {TierKind::kSsd, &options.ssd_policy}};
  for (const auto& [kind, name] : wanted) {
    if (engine->tier(kind) == nullptr) continue;
    auto policy = eviction::NewPolicy(*name, *options.clock);
    if (!policy) return policy.status().WithContext(std::string(TierKindName(kind)) + " tier");
    (*policy)->SetVictimsDemoted(engine->LowerTier(kind).has_value());
    engine->policies_[Index(kind)] = std::move(policy).value();
    engine->references_wanted_ |= engine->policies_[Index(kind)]->wants_references();
  }
  return engine;
}

CacheEngine::CacheEngine(const EngineOptions& options, std::unique_ptr<Tier> device,
                         std::unique_ptr<Tier> host, std::unique_ptr<Tier> ssd,
                         std::unique_ptr<RemoteTier> remote)
    : clock_(*options.clock),
      io_(options.io),
      copy_(options.copy != nullptr ? options.copy : options.io),
      ssd_pause_ns_(options.ssd_pause_ns),
      write_through_(options.ssd_write_through),
      log_(options.log),
      remote_(std::move(remote)),
      remote_io_(options.remote_io),
      remote_write_through_(options.remote_write_through),
      record_events_(options.record_events),
      events_ready_(options.events_ready),
      max_hinted_per_owner_(options.max_hinted_blocks_per_owner) {
  tiers_[Index(TierKind::kDevice)] = std::move(device);
  tiers_[Index(TierKind::kHost)] = std::move(host);
  tiers_[Index(TierKind::kSsd)] = std::move(ssd);
  for (size_t i = 0; i < kNumTierKinds; ++i) stats_.tiers[i].kind = static_cast<TierKind>(i);
}

CacheEngine::~CacheEngine() {
  assert(allocations_.empty() && leases_.empty() &&
         "Allocations and Leases must be destroyed before the engine");
  assert(moves_in_flight_ == 0 && "every I/O completion must run before the engine goes");
  assert(remote_in_flight_ == 0 && "every remote completion must run before the engine goes");
}

Result<NamespaceId> CacheEngine::AddNamespace(const NamespaceSpec& spec) {
  KVTIER_RETURN_IF_ERROR(spec.layout.Validate());
  KVTIER_RETURN_IF_ERROR(CheckQuantize(spec.layout, spec.quantize_lower));
  for (size_t i = 0; i < namespaces_.size(); ++i) {
    NamespaceSpec& known = namespaces_[i];
    if (known.model != spec.model || known.salt != spec.salt) continue;
    if (known.layout != spec.layout) {
      return InvalidArgumentError("namespace '" + spec.model + "' is registered with layout " +
                                  known.layout.ToString() + ", not " + spec.layout.ToString());
    }
    if (!ns_decided_[i]) {  // restored from the ssd: the first worker decides
      known.quantize_lower = spec.quantize_lower;
      ns_decided_[i] = true;
      remote_ns_[i] = RemoteNamespaceOf(known);
    } else if (known.quantize_lower != spec.quantize_lower) {
      return InvalidArgumentError(
          "namespace '" + spec.model + "' keeps its lower tiers as quantize_lower " +
          std::string(QuantizeName(known.quantize_lower)) + " (the first worker's choice), not " +
          std::string(QuantizeName(spec.quantize_lower)) +
          ": give every worker of a model the same setting");
    }
    return static_cast<NamespaceId>(i);
  }
  const uint64_t bytes = spec.layout.BlockBytes();
  for (const auto& t : tiers_) {
    if (t != nullptr && t->SlotBytes(bytes) > t->capacity_bytes()) {
      return InvalidArgumentError("a block of " + std::to_string(bytes) +
                                  " bytes does not fit the " +
                                  std::string(TierKindName(t->kind())) + " tier");
    }
  }
  uint32_t tier_ns = 0;
  if (Tier* ssd = tier(TierKind::kSsd)) {
    KVTIER_ASSIGN_OR_RETURN(tier_ns, ssd->RegisterNamespace(spec.model, spec.salt, spec.layout));
  }
  namespaces_.push_back(spec);
  block_bytes_.push_back(bytes);
  tier_ns_.push_back(tier_ns);
  ns_decided_.push_back(true);
  remote_ns_.push_back(RemoteNamespaceOf(spec));
  return static_cast<NamespaceId>(namespaces_.size() - 1);
}

const NamespaceSpec* CacheEngine::FindNamespace(NamespaceId ns) const {
  return ns < namespaces_.size() ? &namespaces_[ns] : nullptr;
}

std::optional<NamespaceId> CacheEngine::FindNamespace(std::string_view model,
                                                      std::string_view salt) const {
  for (size_t i = 0; i < namespaces_.size(); ++i) {
    if (namespaces_[i].model == model && namespaces_[i].salt == salt) {
      return static_cast<NamespaceId>(i);
    }
  }
  return std::nullopt;
}

Status CacheEngine::CheckNamespace(NamespaceId ns) const {
  if (ns >= namespaces_.size()) return InvalidArgumentError("unknown namespace");
  return Status::Ok();
}

Status CacheEngine::CheckTarget(TierKind kind) const {
  if (kind == TierKind::kSsd || kind == TierKind::kRemote) {
    return InvalidArgumentError("blocks are read and written in the device or host tier");
  }
  if (tier(kind) == nullptr) {
    return InvalidArgumentError("there is no " + std::string(TierKindName(kind)) + " tier");
  }
  return Status::Ok();
}

Result<LookupResult> CacheEngine::Lookup(NamespaceId ns, std::span<const BlockKey> keys) {
  KVTIER_RETURN_IF_ERROR(CheckNamespace(ns));
  ExpireHints();
  TellReferences(ns, keys);
  LookupResult result;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id == kNoEntry || !index_.visible(id)) break;
    result.tiers.push_back(blocks_[id].tier);
    ++stats_.tiers[Index(blocks_[id].tier)].lookup_hits;
  }
  result.hits = result.tiers.size();
  ++stats_.lookups;
  stats_.lookup_keys += keys.size();
  stats_.lookup_hits += result.hits;
  return result;
}

// A block's fingerprint for its policy (BlockMeta::fingerprint): the same
// in the tier's Insert as in the lookups' chains (Referenced), so that an
// adaptive policy can tell which of the tier's blocks it samples.
namespace {
uint64_t Fingerprint(NamespaceId ns, const BlockKey& key) {
  const uint64_t salt = (uint64_t{ns} + 1) * 0x9e3779b97f4a7c15ULL;  // namespaces apart
  return prefix_index::BlockKeyHash{}(key) ^ salt;
}
}  // namespace

void CacheEngine::TellReferences(NamespaceId ns, std::span<const BlockKey> keys) {
  if (!references_wanted_) return;
  chain_fingerprints_.clear();
  for (const BlockKey& key : keys) chain_fingerprints_.push_back(Fingerprint(ns, key));
  for (const auto& p : policies_) {
    if (p != nullptr && p->wants_references()) p->Referenced(chain_fingerprints_);
  }
}

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
    Result<SlotId> slot = MakeRoom(kind, bytes);
    if (!slot) {
      no_room = slot.status();
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
    id = index_.Insert(ns, keys[i], prev);
    if (blocks_.size() < index_.id_limit()) blocks_.resize(index_.id_limit());
    blocks_[id] = Block{};
    blocks_[id].pins = 1;  // a pending block is pinned by its writer
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

std::vector<EntryId> CacheEngine::PinLeadingRun(NamespaceId ns, std::span<const BlockKey> keys) {
  std::vector<EntryId> run;
  for (const BlockKey& key : keys) {
    const EntryId id = index_.Find(ns, key);
    if (id == kNoEntry || !index_.visible(id)) break;
    run.push_back(id);
  }
  // The policies hear of the pins with the touches below (a Touch carries
  // the pinned state as an Update would): one call per block, not two.
  for (EntryId id : run) Pin(id, /*tell_policy=*/false);
  HintsUsed(run);
  // Touch the last block first so a chain's head is the most recent: the
  // tail of a prefix goes before the blocks it depends on.
  for (auto it = run.rbegin(); it != run.rend(); ++it) {
    const Block& b = blocks_[*it];
    PolicyOf(b.tier).Touch(*it, MetaOf(*it));
    ++stats_.tiers[Index(b.tier)].hits;
  }
  return run;
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

Lease CacheEngine::MakeLease(NamespaceId ns, std::vector<EntryId> run, TierKind kind) {
  size_t kept = 0;
  while (kept < run.size() && blocks_[run[kept]].tier == kind &&
         blocks_[run[kept]].state == State::kReady && !LeavingFor(run[kept], kind)) {
    ++kept;
  }
  for (size_t i = run.size(); i > kept; --i) Unpin(run[i - 1]);
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

// ---------------------------------------------------------------- internals

uint64_t CacheEngine::BlockBytes(EntryId id) const { return block_bytes_[index_.ns(id)]; }

uint64_t CacheEngine::StoredBytes(NamespaceId ns, Quantize q) const {
  return q == Quantize::kOff ? block_bytes_[ns] : StoredLayout(LayoutOf(ns), q).BlockBytes();
}

uint64_t CacheEngine::BytesInTier(EntryId id) const {
  const Block& b = blocks_[id];
  return b.tier == TierKind::kSsd ? StoredBytes(index_.ns(id), b.stored) : BlockBytes(id);
}

eviction::BlockMeta CacheEngine::MetaOf(EntryId id) const {
  const Block& b = blocks_[id];
  eviction::BlockMeta meta;
  meta.size_bytes = BytesInTier(id);
  meta.priority = b.priority;
  meta.priority_expires_at = b.priority_until;
  meta.pinned = b.pins > 0 || b.hinted;  // a hint protects as a pin does, until it yields
  meta.children_in_tier = b.children_in_tier;
  // (Also lets S3-FIFO's ghosts survive id reuse.)
  meta.fingerprint = Fingerprint(index_.ns(id), index_.key(id));
  return meta;
}

BlockLocation CacheEngine::LocationOf(EntryId id) const {
  const Block& b = blocks_[id];
  return BlockLocation{b.tier, b.slot, tiers_[Index(b.tier)]->SlotOffset(b.slot)};
}

std::span<std::byte> CacheEngine::BytesAt(const BlockLocation& loc, uint64_t bytes) {
  return tiers_[Index(loc.tier)]->HostView(loc.slot, bytes);
}

std::optional<TierKind> CacheEngine::LowerTier(TierKind kind) const {
  for (size_t i = Index(kind) + 1; i < kNumTierKinds; ++i) {
    if (tiers_[i] != nullptr) return static_cast<TierKind>(i);
  }
  return std::nullopt;
}

void CacheEngine::Pin(EntryId id, bool tell_policy) {
  Block& b = blocks_[id];
  if (b.pins++ == 0) {
    ++pinned_in_tier_[Index(b.tier)];
    if (tell_policy) PolicyOf(b.tier).Update(id, MetaOf(id));
  }
}

void CacheEngine::Unpin(EntryId id) {
  Block& b = blocks_[id];
  assert(b.pins > 0);
  if (--b.pins > 0) return;
  --pinned_in_tier_[Index(b.tier)];
  if (b.state == State::kDoomed || index_.orphan(id)) {
    Drop(id);
    return;
  }
  PolicyOf(b.tier).Update(id, MetaOf(id));
}

Result<SlotId> CacheEngine::MakeRoom(TierKind kind, uint64_t bytes, bool yield_hints) {
  Tier& t = *tiers_[Index(kind)];
  for (;;) {
    Result<SlotId> slot = t.Allocate(bytes);
    if (slot || slot.status().code() != StatusCode::kResourceExhausted) return slot;
    const std::optional<EntryId> victim = PolicyOf(kind).Victim();
    if (!victim) {
      if (yield_hints && YieldHint(kind)) continue;
      return ResourceExhaustedError("the " + std::string(TierKindName(kind)) +
                                    " tier is full of pinned blocks");
    }
    Evict(*victim);
  }
}

void CacheEngine::Evict(EntryId id) {
  const TierKind from = blocks_[id].tier;
  ++stats_.tiers[Index(from)].evictions;
  // Leaving the node's memory: written back to the remote tier, from a copy
  // made now (whether it goes to the ssd or nowhere).
  if (from == TierKind::kHost && remote_ != nullptr) WriteRemote(id);
  const std::optional<TierKind> lower = LowerTier(from);
  if (lower && tiers_[Index(*lower)]->io_bound()) {
    if (!DemoteAsync(id, *lower)) {
      ++stats_.demotions_dropped;
      // Making room below may have dropped it already (an orphan).
      if (index_.live(id) && blocks_[id].pins == 0) Drop(id);
    }
    return;
  }
  if (lower) {
    Pin(id);  // so that making room below cannot pick it
    const Status moved = Move(id, *lower);
    Unpin(id);  // may drop it, if an ancestor went while it moved
    if (moved.ok() || !index_.live(id) || blocks_[id].tier != from) return;
  }
  Drop(id);
}

Status CacheEngine::Move(EntryId id, TierKind to) {
  const TierKind from = blocks_[id].tier;
  assert(blocks_[id].pins > 0 && from != to);
  const uint64_t bytes = BlockBytes(id);
  // A simulated ssd (replay) accounts a block in the form it would be kept
  // in; a real one is io_bound and never moved here.
  const Quantize form = to == TierKind::kSsd ? LowerForm(index_.ns(id)) : Quantize::kOff;
  const uint64_t to_bytes = StoredBytes(index_.ns(id), form);
  KVTIER_ASSIGN_OR_RETURN(const SlotId slot, MakeRoom(to, to_bytes));

  Tier& src = *tiers_[Index(from)];
  Tier& dst = *tiers_[Index(to)];
  const SlotId old_slot = blocks_[id].slot;
  const std::span<std::byte> src_view = src.HostView(old_slot, bytes);
  const std::span<std::byte> dst_view = dst.HostView(slot, bytes);
  Status copied;
  if (!src.holds_bytes() || !dst.holds_bytes()) {
    // A simulation: nothing to copy.
  } else if (to_bytes != bytes || BytesInTier(id) != bytes) {
    copied = FailedPreconditionError("a quantized block moves through the I/O path");
  } else if (!src_view.empty() && !dst_view.empty()) {
    std::memcpy(dst_view.data(), src_view.data(), bytes);
  } else if (!src_view.empty()) {
    copied = dst.Write(slot, src_view);
  } else if (!dst_view.empty()) {
    copied = src.Read(old_slot, dst_view);
  } else {
    std::vector<std::byte> bounce(bytes);
    copied = src.Read(old_slot, bounce);
    if (copied.ok()) copied = dst.Write(slot, bounce);
  }
  if (!copied.ok()) {
    dst.Free(slot);
    return copied;
  }

  Emit(BlockEvent::Kind::kRemoved, id, from);
  LeaveTier(id);
  if (to == TierKind::kSsd) blocks_[id].stored = form;
  EnterTier(id, to, slot);
  Emit(BlockEvent::Kind::kStored, id, to);
  TierStats& in = stats_.tiers[Index(to)];
  in.bytes_in += to_bytes;
  if (Index(to) < Index(from)) {
    ++in.promotions_in;
  } else {
    ++in.demotions_in;
  }
  return Status::Ok();
}

void CacheEngine::Drop(EntryId id) {
  assert(blocks_[id].pins == 0);
  // Iterative, since a chain can be thousands of blocks deep.
  std::vector<EntryId> stack{id};
  while (!stack.empty()) {
    const EntryId e = stack.back();
    stack.pop_back();
    for (EntryId c = index_.first_child(e); c != kNoEntry; c = index_.next_sibling(c)) {
      if (blocks_[c].pins == 0) stack.push_back(c);  // pinned ones go at their last Unpin
    }
    if (e != id || index_.orphan(e)) ++stats_.orphan_drops;
    if (blocks_[e].hinted) ReleaseHint(e, &stats_.hints_withdrawn);
    if (blocks_[e].state == State::kReady) Emit(BlockEvent::Kind::kRemoved, e, blocks_[e].tier);
    FreeShadow(e);
    LeaveTier(e);
    index_.Erase(e);
    ++stats_.dropped_blocks;
  }
}

void CacheEngine::EnterTier(EntryId id, TierKind kind, SlotId slot) {
  Block& b = blocks_[id];
  b.tier = kind;
  b.slot = slot;
  b.children_in_tier = 0;
  for (EntryId c = index_.first_child(id); c != kNoEntry; c = index_.next_sibling(c)) {
    if (blocks_[c].tier == kind) ++b.children_in_tier;
  }
  if (b.pins > 0) ++pinned_in_tier_[Index(kind)];
  PolicyOf(kind).Insert(id, MetaOf(id));
  AdjustParentChildren(id, kind, +1);
}

void CacheEngine::LeaveTier(EntryId id, bool free_slot) {
  const Block& b = blocks_[id];
  if (b.pins > 0) --pinned_in_tier_[Index(b.tier)];
  PolicyOf(b.tier).Erase(id);
  Tier* t = tiers_[Index(b.tier)].get();
  if (free_slot) t->Free(b.slot);
  if (free_slot && t->io_bound()) {
    // Best effort: a record left behind (queue full) points at a slot whose
    // bytes no longer match its checksum, so it can only ever be a miss.
    if (!io_->Submit([t, info = InfoOf(id)] { return t->ForgetBlock(info); },
                     [](const Status&) {})) {
      ++stats_.stale_records;
    }
  }
  AdjustParentChildren(id, b.tier, -1);
}

void CacheEngine::AdjustParentChildren(EntryId id, TierKind kind, int delta) {
  const EntryId p = index_.parent(id);
  if (p == kNoEntry || blocks_[p].tier != kind) return;
  blocks_[p].children_in_tier =
      static_cast<uint32_t>(static_cast<int64_t>(blocks_[p].children_in_tier) + delta);
  PolicyOf(kind).Update(p, MetaOf(p));
}

// ---------------------------------------------------------------- stats

EngineStats CacheEngine::Stats() const {
  EngineStats s = stats_;
  for (size_t i = 0; i < kNumTierKinds; ++i) {
    TierStats& ts = s.tiers[i];
    const Tier* t = tiers_[i].get();
    ts.present = t != nullptr;
    if (t == nullptr) continue;
    ts.emulated = t->emulated();
    ts.description = t->description();
    ts.policy = std::string(policies_[i]->name());
    ts.adaptive = policies_[i]->adaptive_report();
    ts.capacity_bytes = t->capacity_bytes();
    ts.used_bytes = t->used_bytes();
    ts.blocks = policies_[i]->size();
    ts.pinned_blocks = pinned_in_tier_[i];
  }
  s.namespaces = namespaces_.size();
  s.index_entries = index_.size();
  s.index_bytes = index_.MemoryBytes();
  s.pending_blocks = pending_blocks_;
  s.open_allocations = allocations_.size();
  s.open_leases = leases_.size();
  s.moves_in_flight = moves_in_flight_;
  s.shadow_blocks = shadows_;
  s.ssd_paused = clock_.Now() < ssd_paused_until_;
  s.hinted_now = hints_.size();
  s.remote_present = remote_ != nullptr;
  if (remote_ != nullptr) {
    s.remote_description = remote_->description();
    s.remote = remote_->stats();
    s.remote_in_flight = remote_in_flight_;
  }
  return s;
}

}  // namespace kvtier::tiers

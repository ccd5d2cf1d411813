// The CacheEngine's core (engine/cache_engine.h): construction, namespaces,
// what the policies are told, and the block's life in the tiers — pins,
// making room, eviction and demotion, moves between memory tiers, drops,
// and tier membership. The other concerns have files of their own, named
// for them: handles.cc, lookup_acquire.cc, writes.cc, moves.cc,
// write_through.cc, recovery.cc, remote.cc, hints.cc, events.cc, stats.cc,
// checks.cc. One class, one thread (the header's contract).
#include "engine/cache_engine.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;
using tiers::RemoteNamespaceId;

namespace {

// The remote tier's name and layout for a namespace's blocks: those of the
// form they are kept in, so nodes that keep a model's blocks in fp8 share
// them among themselves, never with nodes that keep them as written.
RemoteNamespace RemoteNamespaceOf(const NamespaceSpec& spec) {
  const Layout stored = StoredLayout(spec.layout, spec.quantize_lower);
  return {RemoteNamespaceId(spec.model, spec.salt, stored), stored,
          tiers::NamespaceFingerprint(spec.model, spec.salt, stored.ToString())};
}

}  // namespace

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
    bool below = false;
    for (size_t i = 0; i < Index(kind); ++i) below = below || engine->tiers_[i] != nullptr;
    (*policy)->SetBelowAnotherTier(below);
    engine->policies_[Index(kind)] = std::move(policy).value();
    engine->references_wanted_ |= engine->policies_[Index(kind)]->wants_references();
  }
  const std::pair<TierKind, const std::string*> admissions[] = {
      {TierKind::kDevice, &options.device_admission},
      {TierKind::kHost, &options.host_admission},
      {TierKind::kSsd, &options.ssd_admission}};
  for (const auto& [kind, name] : admissions) {
    auto filter = eviction::NewAdmissionFilter(*name);
    if (!filter) return filter.status().WithContext(std::string(TierKindName(kind)) + " tier");
    if (engine->tier(kind) == nullptr) continue;
    engine->owned_admission_[Index(kind)] = std::move(filter).value();
    engine->admission_[Index(kind)] = engine->owned_admission_[Index(kind)].get();
  }
  if (options.host_admission_filter != nullptr) {
    engine->admission_[Index(TierKind::kHost)] = options.host_admission_filter;
  }
  for (const eviction::AdmissionFilter* f : engine->admission_) {
    engine->references_wanted_ |= f != nullptr;
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
      ssd_budget_per_day_(options.ssd_write_budget_per_day),
      ssd_budget_bytes_(static_cast<double>(options.ssd_write_budget_per_day) / 24),
      ssd_budget_at_(options.clock->Now()),
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
  ns_use_.push_back(NamespaceUse{spec.model, spec.layout.block_tokens, {}, 0, 0, 0});
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

uint64_t CacheEngine::PolicyFingerprint(NamespaceId ns, const BlockKey& key) {
  const uint64_t salt = (uint64_t{ns} + 1) * 0x9e3779b97f4a7c15ULL;  // namespaces apart
  return prefix_index::BlockKeyHash{}(key) ^ salt;
}

CacheEngine::Block& CacheEngine::NewBlock(EntryId id, NamespaceId ns, const BlockKey& key) {
  if (blocks_.size() < index_.id_limit()) blocks_.resize(index_.id_limit());
  Block& b = blocks_[id];
  b = Block{};
  b.ns = ns;
  b.fingerprint = PolicyFingerprint(ns, key);
  return b;
}

void CacheEngine::MakeIndexRoom(size_t more) {
  // The index keeps its table up to 7/8 full, where linear probing's runs
  // grow long: an erase re-hashes the key of every slot up to the run's
  // end (about 30 at 7/8), and in replay, at tier sizes that left the
  // table that full, erasing took a third of the time. Reserved ahead, the
  // table stays at most half full (Reserve(r) makes at least 8r/7 slots);
  // its nodes are reserved too, but pages never written cost no memory.
  // Room for many entries at once (a restart's) is the room that adding
  // them one by one would end with, reserved in one step: each step on
  // the way would re-hash every entry before it.
  const size_t want = index_.size() + more;
  if (want <= index_room_) return;
  size_t reserve = 0;
  while (index_room_ < want) {
    reserve = (std::max(index_room_, index_.size()) + 1) * 7 / 2;
    index_room_ = reserve * 4 / 7;
  }
  index_.Reserve(reserve);
}

void CacheEngine::TellReferences(NamespaceId ns, std::span<const BlockKey> keys) {
  if (!references_wanted_) return;
  const std::span<const uint64_t> chain = chains_.Of(
      ns, keys, [](NamespaceId n, const BlockKey& key) { return PolicyFingerprint(n, key); });
  for (const auto& p : policies_) {
    if (p != nullptr && p->wants_references()) p->Referenced(chain);
  }
  for (size_t i = 0; i < kNumTierKinds; ++i) {
    eviction::AdmissionFilter* f = admission_[i];
    if (f == nullptr) continue;
    // What it remembers grows with the tier (in doublings: rarely told);
    // the ssd's, which decides what enters it from the host, with both (an
    // ssd that refuses most blocks holds few, and a sketch sized to those
    // few would forget every lookup before the block leaves the host).
    size_t held = policies_[i]->size();
    if (static_cast<TierKind>(i) == TierKind::kSsd)
      held += policies_[Index(TierKind::kHost)]->size();
    if (held > admission_sized_[i]) {
      admission_sized_[i] = 2 * held;
      f->SetCapacity(admission_sized_[i]);
    }
    f->Referenced(chain);
  }
}

uint64_t CacheEngine::BlockBytes(EntryId id) const { return block_bytes_[blocks_[id].ns]; }

uint64_t CacheEngine::StoredBytes(NamespaceId ns, Quantize q) const {
  return q == Quantize::kOff ? block_bytes_[ns] : StoredLayout(LayoutOf(ns), q).BlockBytes();
}

uint64_t CacheEngine::BytesInTier(EntryId id) const {
  const Block& b = blocks_[id];
  return b.tier == TierKind::kSsd ? StoredBytes(b.ns, b.stored) : block_bytes_[b.ns];
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
  meta.fingerprint = b.fingerprint;
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

Result<SlotId> CacheEngine::MakeRoom(TierKind kind, uint64_t bytes, bool yield_hints,
                                     std::optional<uint64_t> admit, bool* kept_out) {
  Tier& t = *tiers_[Index(kind)];
  const uint64_t slot_bytes = t.SlotBytes(bytes);
  for (;;) {
    // A full tier (its capacity is never exceeded, tier.h) is not asked:
    // its refusal is a Status built on the heap, once per eviction, and in
    // replay that cost as much as the eviction itself.
    const bool full =
        slot_bytes <= t.capacity_bytes() && t.used_bytes() + slot_bytes > t.capacity_bytes();
    if (!full) {
      Result<SlotId> slot = t.Allocate(bytes);
      if (slot || slot.status().code() != StatusCode::kResourceExhausted) return slot;
    }
    const std::optional<EntryId> victim = PolicyOf(kind).Victim();
    if (!victim) {
      if (yield_hints && YieldHint(kind)) continue;
      return ResourceExhaustedError("the " + std::string(TierKindName(kind)) +
                                    " tier is full of pinned blocks");
    }
    if (admit && !Admitted(kind, *admit, blocks_[*victim].fingerprint)) {
      ++stats_.tiers[Index(kind)].admission_refused;
      if (kept_out != nullptr) *kept_out = true;
      return ResourceExhaustedError("the " + std::string(TierKindName(kind)) +
                                    " tier's admission filter kept the block out");
    }
    Evict(*victim);
  }
}

bool CacheEngine::SsdAdmits(EntryId id) {
  eviction::AdmissionFilter* filter = admission_[Index(TierKind::kSsd)];
  if (filter == nullptr || filter->Admit(blocks_[id].fingerprint, 0)) return true;
  ++stats_.tiers[Index(TierKind::kSsd)].admission_refused;
  return false;
}

bool CacheEngine::Admitted(TierKind kind, uint64_t candidate, uint64_t victim) {
  eviction::AdmissionFilter* filter = admission_[Index(kind)];
  if (filter != nullptr && !filter->Admit(candidate, victim)) return false;
  eviction::AdmissionFilter* followed = PolicyOf(kind).admission();
  return followed == nullptr || followed->Admit(candidate, victim);
}

void CacheEngine::Evict(EntryId id) {
  const TierKind from = blocks_[id].tier;
  ++stats_.tiers[Index(from)].evictions;
  // Leaving the node's memory: written back to the remote tier, from a copy
  // made now (whether it goes to the ssd or nowhere).
  if (from == TierKind::kHost && remote_ != nullptr) WriteRemote(id);
  const std::optional<TierKind> lower = LowerTier(from);
  if (lower == TierKind::kSsd && !blocks_[id].has_shadow && !SsdAdmits(id)) {
    Drop(id);
    return;
  }
  if (lower && tiers_[Index(*lower)]->io_bound()) {
    if (!DemoteAsync(id, *lower)) {
      ++stats_.demotions_dropped;
      // Making room below may have dropped it already (an orphan).
      if (index_.live(id) && blocks_[id].pins == 0) Drop(id);
    }
    return;
  }
  if (lower) {
    const uint64_t to_ssd =
        *lower == TierKind::kSsd ? StoredBytes(index_.ns(id), LowerForm(index_.ns(id))) : 0;
    if (to_ssd == 0 || SsdBudgetAllows(to_ssd)) {
      Pin(id);  // so that making room below cannot pick it
      const Status moved = Move(id, *lower);
      Unpin(id);  // may drop it, if an ancestor went while it moved
      if (moved.ok()) SpendSsdBudget(to_ssd);
      if (moved.ok() || !index_.live(id) || blocks_[id].tier != from) return;
    }
  }
  Drop(id);
}

bool CacheEngine::SsdBudgetAllows(uint64_t bytes) {
  if (ssd_budget_per_day_ == 0) return true;
  const TimeNs now = clock_.Now();
  const double per_ns = static_cast<double>(ssd_budget_per_day_) / (86400.0 * kNsPerSec);
  const double full = static_cast<double>(ssd_budget_per_day_) / 24;
  if (now > ssd_budget_at_) {
    ssd_budget_bytes_ =
        std::min(full, ssd_budget_bytes_ + per_ns * static_cast<double>(now - ssd_budget_at_));
    ssd_budget_at_ = now;
  }
  if (ssd_budget_bytes_ >= static_cast<double>(bytes)) return true;
  ++stats_.ssd_budget_refused;
  return false;
}

void CacheEngine::SpendSsdBudget(uint64_t bytes) {
  if (ssd_budget_per_day_ != 0) ssd_budget_bytes_ -= static_cast<double>(bytes);
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
  // Iterative, since a chain can be thousands of blocks deep. The stack is
  // a member, not allocated per drop; entries below `base` would be a drop
  // this one runs inside of.
  std::vector<EntryId>& stack = drop_stack_;
  const size_t base = stack.size();
  stack.push_back(id);
  while (stack.size() > base) {
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
    RememberDropped(e);
    index_.Erase(e);
    ++stats_.dropped_blocks;
  }
}

namespace {
// 2^18 fingerprints (2 MiB): the dropped blocks a miss is told apart by.
constexpr size_t kDroppedSlots = size_t{1} << 18;

uint64_t DroppedFingerprint(NamespaceId ns, const BlockKey& key) {
  return prefix_index::BlockKeyHash::Mix(key, 0x9e3779b97f4a7c15ULL * (uint64_t{ns} + 1)) | 1;
}
}  // namespace

void CacheEngine::RememberDropped(EntryId id) {
  if (dropped_.empty()) dropped_.assign(kDroppedSlots, 0);
  const uint64_t f = DroppedFingerprint(index_.ns(id), index_.key(id));
  dropped_[f % kDroppedSlots] = f;
}

bool CacheEngine::WasDropped(NamespaceId ns, const BlockKey& key) const {
  if (dropped_.empty()) return false;
  const uint64_t f = DroppedFingerprint(ns, key);
  return dropped_[f % kDroppedSlots] == f;
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
  if (free_slot && t->io_bound()) {
    // A record left behind (queue full) goes when the slot is next written.
    const BlockInfo info = InfoOf(id);
    t->FreeBlock(b.slot, info);
    if (!io_->Submit([t, slot = b.slot, info] { return t->ForgetBlock(slot, info); },
                     [](const Status&) {})) {
      ++stats_.stale_records;
    }
  } else if (free_slot) {
    t->Free(b.slot);
  }
  AdjustParentChildren(id, b.tier, -1);
}

void CacheEngine::AdjustParentChildren(EntryId id, TierKind kind, int delta) {
  const EntryId p = index_.parent(id);
  if (p == kNoEntry || blocks_[p].tier != kind) return;
  Block& b = blocks_[p];
  b.children_in_tier = static_cast<uint32_t>(static_cast<int64_t>(b.children_in_tier) + delta);
  // A pinned parent's policy hears of its children with its unpin
  // (eviction_policy.h): every block written under a parent that the write
  // pins saves a call.
  if (b.pins > 0 || b.hinted) return;
  PolicyOf(kind).Update(p, MetaOf(p));
}

void CacheEngine::LogLimited(LogLimit& limit, const std::string& line) {
  const TimeNs now = clock_.Now();
  if (limit.last != INT64_MIN && now - limit.last < 10 * kNsPerSec) {
    ++limit.unreported;
    return;
  }
  if (log_) {
    log_(limit.unreported == 0 ? line
                               : line + " (and " + std::to_string(limit.unreported) +
                                     " more like it since the last report)");
  }
  limit.last = now;
  limit.unreported = 0;
}

}  // namespace kvtier::engine

// CacheEngine::Stats: the counters kept as things happen, and the gauges
// (occupancy, pins, moves in flight) read now.
#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

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
    ts.admission = admission_[i] != nullptr ? std::string(admission_[i]->name()) : "off";
    ts.adaptive = policies_[i]->adaptive_report();
    ts.capacity_bytes = t->capacity_bytes();
    ts.used_bytes = t->used_bytes();
    ts.blocks = policies_[i]->size();
    ts.pinned_blocks = pinned_in_tier_[i];
  }
  s.namespaces = namespaces_.size();
  s.namespace_use = ns_use_;
  s.index_entries = index_.size();
  s.index_bytes = index_.MemoryBytes();
  s.pending_blocks = pending_blocks_;
  s.open_allocations = allocations_.size();
  s.open_leases = leases_.size();
  s.moves_in_flight = moves_in_flight_;
  s.shadow_blocks = shadows_;
  s.ssd_paused = clock_.Now() < ssd_paused_until_;
  s.hinted_now = hints_.size();
  if (const Tier* ssd = tier(TierKind::kSsd); ssd != nullptr) {
    s.ssd_sealed_by_key = ssd->SealedBlocksByKey();
    s.ssd_rejected_by_cause = ssd->RejectedByCause();
  }
  s.remote_present = remote_ != nullptr;
  if (remote_ != nullptr) {
    s.remote_description = remote_->description();
    s.remote = remote_->stats();
    s.remote_in_flight = remote_in_flight_;
  }
  return s;
}

}  // namespace kvtier::engine

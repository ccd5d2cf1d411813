// Block events (EngineOptions::record_events): a block became readable in a
// tier, or stopped being readable there, recorded in order for the daemon's
// KV-event feed (daemon/event_feed.h), which the engine knows nothing of.
#include <utility>
#include <vector>

#include "engine/cache_engine.h"

namespace kvtier::engine {

using prefix_index::EntryId;
using prefix_index::kNoEntry;

void CacheEngine::Emit(BlockEvent::Kind kind, EntryId id, TierKind tier) {
  if (!record_events_) return;
  BlockEvent e{kind, index_.ns(id), tier, index_.key(id), std::nullopt};
  if (kind == BlockEvent::Kind::kStored) {
    const EntryId parent = index_.parent(id);
    if (parent != kNoEntry) e.parent = index_.key(parent);
  }
  if (events_.empty() && events_ready_) events_ready_();
  events_.push_back(std::move(e));
}

void CacheEngine::TakeEvents(std::vector<BlockEvent>* out) {
  out->clear();
  out->swap(events_);
}

}  // namespace kvtier::engine

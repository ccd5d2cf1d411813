#include "daemon/event_feed.h"

#include <map>

namespace kvtier::daemon {

using engine::BlockEvent;

const char* MediumOf(tiers::TierKind tier) {
  switch (tier) {
    case tiers::TierKind::kDevice:
      return "GPU";
    case tiers::TierKind::kHost:
      return "CPU";
    case tiers::TierKind::kSsd:
      return "STORAGE";
    case tiers::TierKind::kRemote:
      return "REMOTE";
  }
  return "";
}

EventFeed::EventFeed(engine::CacheEngine& engine, KvEventPublisher& publisher,
                     std::string topic_prefix)
    : engine_(engine), publisher_(publisher), prefix_(std::move(topic_prefix)) {}

void EventFeed::Cleared() {
  KvEvent e;
  e.kind = KvEvent::Kind::kAllCleared;
  publisher_.Publish(prefix_, {std::move(e)});
}

void EventFeed::Flush() {
  engine_.TakeEvents(&scratch_);
  if (scratch_.empty()) return;
  // Namespaces in the order they first appear; events in order within each.
  std::map<prefix_index::NamespaceId, std::vector<KvEvent>> batches;
  std::vector<prefix_index::NamespaceId> order;
  for (const BlockEvent& e : scratch_) {
    auto [it, fresh] = batches.try_emplace(e.ns);
    if (fresh) order.push_back(e.ns);
    std::vector<KvEvent>& out = it->second;
    const uint64_t hash = e.key.lo;
    const KvEvent::Kind kind =
        e.kind == BlockEvent::Kind::kStored ? KvEvent::Kind::kStored : KvEvent::Kind::kRemoved;
    const std::string medium = MediumOf(e.tier);
    if (!out.empty() && out.back().kind == kind && out.back().medium == medium) {
      KvEvent& prev = out.back();
      if (kind == KvEvent::Kind::kRemoved ||
          (e.parent && e.parent->lo == prev.block_hashes.back())) {
        prev.block_hashes.push_back(hash);  // the same chain, one event
        continue;
      }
    }
    KvEvent ev;
    ev.kind = kind;
    ev.block_hashes.push_back(hash);
    ev.medium = medium;
    if (kind == KvEvent::Kind::kStored) {
      if (e.parent) ev.parent_hash = e.parent->lo;
      const engine::NamespaceSpec* spec = engine_.FindNamespace(e.ns);
      ev.block_size = spec != nullptr ? spec->layout.block_tokens : 0;
    }
    out.push_back(std::move(ev));
  }
  for (prefix_index::NamespaceId ns : order) {
    const engine::NamespaceSpec* spec = engine_.FindNamespace(ns);
    publisher_.Publish(prefix_ + (spec != nullptr ? spec->model : std::string()),
                       std::move(batches[ns]));
  }
}

}  // namespace kvtier::daemon

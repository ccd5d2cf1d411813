// EventFeed: turns the engine's block events into KV-event batches for the
// publisher (daemon/kv_events.h), one batch per namespace per flush (daemon/main.cc:
// events.flush_us), under the topic `prefix + model`. The engine knows no ZeroMQ; the publisher
// knows no tiers; this is the wiring between them.
//
// Mapping (vLLM's schema): a block's hash is the low 64 bits of its key (the
// integer form vLLM sends); consecutive stored blocks of one chain in one
// tier become one BlockStored with the chain's parent; the medium is "GPU",
// "CPU", "STORAGE" (vLLM's name for offloaded storage) or "REMOTE" for the device, host, ssd and
// remote tiers; block_size is the namespace's tokens per block. kvtierd sees keys, never tokens, so
// token_ids is empty: a router computes kvtier's keys from its tokens with the deployment secret
// (docs/operations.md, "KV events").
//
// Thread-safety: Flush() runs on the engine's thread.
#pragma once

#include <string>
#include <vector>

#include "daemon/kv_events.h"
#include "engine/cache_engine.h"

namespace kvtier::daemon {

class EventFeed {
 public:
  // Both must outlive the feed.
  EventFeed(engine::CacheEngine& engine, KvEventPublisher& publisher, std::string topic_prefix);

  // Publishes what the engine recorded since the last Flush.
  void Flush();
  // Publishes one AllBlocksCleared under the bare topic prefix: a new
  // daemon tells routers to forget what an earlier one said (those
  // subscribed to the prefix, or replaying from 0).
  void Cleared();

 private:
  engine::CacheEngine& engine_;
  KvEventPublisher& publisher_;
  const std::string prefix_;
  std::vector<engine::BlockEvent> scratch_;
};

// The medium vLLM's events name a tier by.
const char* MediumOf(tiers::TierKind tier);

}  // namespace kvtier::daemon

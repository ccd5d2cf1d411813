// Helpers shared by the eviction policy tests.
#pragma once

#include <vector>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction::testing {

inline BlockMeta Meta(bool pinned = false) {
  BlockMeta m;
  m.size_bytes = 4096;
  m.pinned = pinned;
  return m;
}

// Evicts until nothing is evictable; the order of the victims.
inline std::vector<BlockId> Drain(EvictionPolicy& p) {
  std::vector<BlockId> order;
  while (auto v = p.Victim()) {
    order.push_back(*v);
    p.Erase(*v);
  }
  return order;
}

}  // namespace kvtier::eviction::testing

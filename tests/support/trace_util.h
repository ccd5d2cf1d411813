// Test support (replay tests) for traces built by hand: requests whose blocks are numbers
// chosen by the test, each number standing for itself as an id.
#pragma once

#include <algorithm>
#include <cstdint>

#include "replay/trace.h"

namespace kvtier::replay {

// Names block n of `t` as id n of file 0 (as many as the largest number
// used), and counts the references: what ReadTraces would have made of the
// same ids in one file.
inline void NameBlocksByNumber(Trace* t) {
  uint32_t largest = 0;
  t->block_refs = 0;
  for (const TraceRequest& r : t->requests) {
    for (uint32_t b : r.blocks) largest = std::max(largest, b);
    t->block_refs += r.blocks.size();
  }
  t->blocks.resize(static_cast<size_t>(largest) + 1);
  for (uint32_t b = 0; b <= largest; ++b) t->blocks[b] = TraceBlock{0, b};
}

}  // namespace kvtier::replay

// kvtier replay --live: see replay_live.cc.
#pragma once

#include "cli/cli_common.h"
#include "replay/trace.h"

namespace kvtier::cli {

struct LiveOptions {
  ConnectFlags conn;             // socket, model, salt (the layout is derived)
  uint64_t block_bytes = 16384;  // about this many bytes per block
  bool trace_speed = false;      // false: as fast as possible
  bool quiet = false;
};

// Returns the exit code: 0, or 2 when a byte read back was wrong or an
// operation failed.
int RunLive(const replay::Trace& trace, const LiveOptions& options);

}  // namespace kvtier::cli

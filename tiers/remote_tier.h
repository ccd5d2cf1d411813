// The remote tier: blocks on a Redis Cluster (or one Redis server) that the
// kvtierd nodes of a deployment share, below each node's own tiers.
//
// It is not a slot Tier: the cluster's contents are not the node's (other
// nodes write them, the cluster's maxmemory policy evicts them), so the
// engine neither indexes nor accounts them. It asks instead: a lookup whose
// local run ends asks the cluster for the rest of the chain, an acquire reads
// those blocks into the host tier, and a block leaving the node's memory is
// written out. Every call blocks on the network and runs on the engine's
// remote I/O threads; none can take the node down: failures become misses
// and a pause (tiers/internal/remote_store.h has the details).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/layout.h"
#include "common/result.h"
#include "prefix_index/block_key.h"

namespace kvtier::tiers {

// A namespace as every node names it: `id` is RemoteNamespaceId(model, salt,
// layout), the same on every node.
struct RemoteNamespace {
  uint64_t id = 0;
  Layout layout;
};
uint64_t RemoteNamespaceId(const std::string& model, const std::string& salt, const Layout& layout);

struct RemoteStats {
  uint64_t lookups = 0;         // lookups that asked the cluster
  uint64_t lookup_keys = 0;     // keys asked for (EXISTS)
  uint64_t lookup_hits = 0;     // of which present, in the leading run
  uint64_t negative_hits = 0;   // lookups the negative cache answered
  uint64_t reads = 0;           // blocks asked for (GET)
  uint64_t read_hits = 0;       // read back, verified and served
  uint64_t read_misses = 0;     // absent: never written, or evicted by the cluster
  uint64_t corrupt = 0;         // read back but not exactly the block: a miss
  uint64_t writes = 0;          // blocks written
  uint64_t write_failures = 0;  // refused (maxmemory, noeviction) or failed
  uint64_t bytes_read = 0;      // payload bytes served
  uint64_t bytes_written = 0;   // payload bytes written
  uint64_t errors = 0;          // calls the cluster failed (unreachable, timeouts)
  uint64_t pauses = 0;          // times the tier paused after an error
  bool paused = false;
  std::string last_error;
};

struct RemoteTierOptions {
  // "host:port" of cluster nodes to read the slot map from (any one that
  // answers will do), or of the one server.
  std::vector<std::string> seeds;
  // AUTH password (requirepass); empty: none.
  std::string password;
  // Before every key, so that deployments sharing a cluster never meet.
  // Default "kvtier".
  std::string key_prefix = "kvtier";
  // Connections kept per cluster node. Default 4.
  int connections_per_node = 4;
  // Connecting to a node; one that does not accept in time is down for the
  // call. Default 200 ms.
  TimeNs connect_timeout_ns = 200 * kNsPerMs;
  // Each read or write on a connection. Default 1 s.
  TimeNs command_timeout_ns = kNsPerSec;
  // After a failure the tier answers at once (misses, dropped writes) for
  // this long, then tries again. Default 5 s.
  TimeNs pause_ns = 5 * kNsPerSec;
  // A key found missing is not asked for again for this long. Default 1 s.
  TimeNs negative_ttl_ns = kNsPerSec;
  const Clock* clock = &SystemClock();
  // One line per event worth an operator's attention, rate-limited.
  std::function<void(const std::string&)> note;
};

class RemoteTier {
 public:
  virtual ~RemoteTier() = default;

  // How many leading `keys` the cluster holds (one pipelined round).
  virtual size_t CountLeading(uint64_t ns, std::span<const prefix_index::BlockKey> keys) = 0;
  // Reads the leading blocks into `outs` (one span per key, the block's
  // size), stopping at the first one missing or not exactly right. Returns
  // how many were read and verified.
  virtual size_t ReadLeading(const RemoteNamespace& ns,
                             std::span<const prefix_index::BlockKey> keys,
                             std::span<const std::span<std::byte>> outs) = 0;
  // Writes one block.
  virtual Status Write(const RemoteNamespace& ns, const prefix_index::BlockKey& key,
                       std::span<const std::byte> payload) = 0;
  // Deletes blocks. Best effort.
  virtual Status Remove(uint64_t ns, std::span<const prefix_index::BlockKey> keys) = 0;

  virtual RemoteStats stats() const = 0;
  virtual bool paused() const = 0;
  virtual std::string description() const = 0;
};

// Connects and checks `deployment_secret` against the one the cluster
// recorded under the key prefix (FailedPrecondition for another: its keys
// would never meet the other nodes'). Unavailable when no seed answers.
Result<std::unique_ptr<RemoteTier>> NewRemoteTier(const RemoteTierOptions& options,
                                                  std::span<const std::byte> deployment_secret);

// A verifier of a deployment secret, 32 hex digits: a hash of it under a
// label, never the secret. The cluster keeps it (`<prefix>:deployment`), and
// so does an ssd directory whose blocks are keyed under it
// (SsdTierOptions::keys_secret_id).
std::string DeploymentSecretVerifier(std::span<const std::byte> deployment_secret);

}  // namespace kvtier::tiers

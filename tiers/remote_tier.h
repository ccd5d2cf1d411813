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

#include <array>
#include <cstddef>
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
#include "tiers/block_seal.h"

namespace kvtier::tiers {

// A namespace as every node names it: `id` is RemoteNamespaceId(model, salt,
// layout), the same on every node; `fingerprint` is NamespaceFingerprint of
// the same (tiers/block_seal.h), what a sealed value is bound to.
struct RemoteNamespace {
  uint64_t id = 0;
  Layout layout;
  std::array<std::byte, 32> fingerprint{};
};
uint64_t RemoteNamespaceId(const std::string& model, const std::string& salt, const Layout& layout);

struct RemoteStats {
  uint64_t lookups = 0;        // lookups that asked the cluster
  uint64_t lookup_keys = 0;    // keys asked for (EXISTS)
  uint64_t lookup_hits = 0;    // of which present, in the leading run
  uint64_t negative_hits = 0;  // lookups the negative cache answered
  uint64_t reads = 0;          // blocks asked for (GET)
  uint64_t read_hits = 0;      // read back, verified and served
  uint64_t read_misses = 0;    // absent: never written, or evicted by the cluster
  uint64_t corrupt = 0;        // read back but not exactly the block: a miss
  // Of `corrupt`, by cause: sealed where this node seals nothing or in the
  // clear where it seals, or under a key it does not hold (rotated out);
  // older than max_age (a replay of an old value); the rest are another
  // block's value, damaged bytes, or garbage.
  uint64_t corrupt_sealing = 0;
  uint64_t corrupt_stale = 0;
  uint64_t writes = 0;          // blocks written
  uint64_t write_failures = 0;  // refused (maxmemory, noeviction) or failed
  uint64_t bytes_read = 0;      // payload bytes served
  uint64_t bytes_written = 0;   // payload bytes written
  uint64_t errors = 0;          // calls the cluster failed (unreachable, timeouts)
  uint64_t pauses = 0;          // times the tier paused after an error
  bool paused = false;
  std::string last_error;
};

// TLS to every cluster node (RemoteTierOptions::tls).
struct RemoteTls {
  bool enabled = false;
  // PEM file of the CA(s) that sign the nodes' certificates; empty: the
  // system's store.
  std::string ca_file;
  // This node's certificate and key (PEM), for nodes that ask for one
  // (Redis does by default: tls-auth-clients yes). Both or neither.
  std::string cert_file, key_file;
  // The name checked in each node's certificate; empty: the host as the
  // slot map names it (an IP address is checked as one).
  std::string server_name;
  // Certificate verification. On by default; off only for a test set-up
  // (the daemon warns).
  bool verify = true;
};

struct RemoteTierOptions {
  // "host:port" of cluster nodes to read the slot map from (any one that
  // answers will do), or of the one server.
  std::vector<std::string> seeds;
  // AUTH: an ACL user and its password, or the password alone
  // (requirepass, the user "default"); both empty: none.
  std::string username;
  std::string password;
  RemoteTls tls;
  // Seals every value written (AES-256-GCM, tiers/block_seal.h) and opens
  // every value read; null: values in the clear, XXH3-checked. Nodes that
  // share a cluster share the key ring.
  std::shared_ptr<BlockSealer> sealer;
  // Sealed values written longer ago than this (seconds) are stale: a miss,
  // as a replay of an old value would be. Writes then ask Redis to expire
  // values after it too. 0: values never go stale.
  uint64_t max_age_s = 0;
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

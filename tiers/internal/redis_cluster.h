// A Redis Cluster client for the remote tier: connections opened by hiredis
// (which has no cluster support of its own), commands and replies moved by
// resp.h (no copy of a value on either side); the slot map read with
// CLUSTER SLOTS, each command sent to the node serving its key's slot,
// MOVED and ASK redirections followed, a small pool of connections per node, and the
// commands of one Run pipelined: written to every node involved first, then
// the replies read, so a batch costs one round trip per node, overlapped.
// A single Redis server (cluster support disabled) works too: it serves
// every slot.
//
// Failures are per command, never an exception and never a hang: a node that
// does not answer within the timeout, refuses the connection or closes it
// fails the commands sent to it (Unavailable), its connection is dropped, and
// the next Run re-reads the slot map (a failover promotes a replica; a
// resharding moves slots).
//
// Thread-safety: Run and Refresh may be called from any number of threads
// at once; the slot map is shared under a lock, connections are taken from
// and returned to a node's pool, never shared by two calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "tiers/internal/cluster_slots.h"
#include "tiers/internal/resp.h"
#include "tiers/remote_tier.h"

namespace kvtier::tiers::internal {

struct RedisOptions {
  // Nodes to read the slot map from; any one that answers will do. At least
  // one.
  std::vector<Endpoint> seeds;
  // AUTH on every connection: as the ACL user `username` with `password`,
  // or with the password alone (requirepass); both empty: none.
  std::string username;
  std::string password;
  // TLS on every connection (tiers/remote_tier.h); off by default.
  tiers::RemoteTls tls;
  // Connections kept per node; a call that finds all of a node's busy waits
  // for one (at most command_timeout). Default 4: the engine's I/O threads.
  int connections_per_node = 4;
  // Connecting to a node: a node that does not accept within this is down
  // for this call. Default 200 ms.
  std::chrono::milliseconds connect_timeout{200};
  // Each read or write on a connection: a node that stalls longer fails the
  // call's commands to it. Default 1 s (a 2 MiB value moves in ~1 ms).
  std::chrono::milliseconds command_timeout{1000};
  // Redirections followed for one command before giving up. Default 5.
  int max_redirects = 5;
};

class RedisCluster {
 public:
  // Reads the slot map from the first seed that answers. Unavailable when
  // none does; InvalidArgument for an empty seed list.
  static Result<std::unique_ptr<RedisCluster>> Connect(const RedisOptions& options);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // Sends every command to its key's node, pipelined, following
  // redirections; one result per command, in order. A Redis error reply
  // other than a redirection (OOM, CLUSTERDOWN, WRONGTYPE) is an ok result
  // of type kError; a node that cannot be reached or stalls is Unavailable.
  std::vector<Result<RedisReply>> Run(std::span<const RedisCommand> commands);
  // Like Run, but hands each reply to `each(index, reply)` as it is read (in
  // the order replies arrive, not the commands'), so a caller can use and
  // free it at once instead of holding the whole batch: each index exactly
  // once, failures included.
  using ReplyFn = std::function<void(size_t index, Result<RedisReply> reply)>;
  void RunEach(std::span<const RedisCommand> commands, const ReplyFn& each);

  // Re-reads the slot map from any node known (the map's, then the seeds).
  Status Refresh();

  // False for a single server with cluster support disabled.
  bool cluster_mode() const;
  // The masters the map names now, "host:port".
  std::vector<std::string> masters() const;

 private:
  class Impl;
  explicit RedisCluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::tiers::internal

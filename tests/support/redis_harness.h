// Test support: a real Redis Cluster (or a single server) on loopback ports,
// from Debian's redis-server and `redis-cli --cluster create`, torn down
// (killed, its directory removed) when the harness goes. The remote tier's
// tests and the two-node daemon tests run against it; faults are real ones:
// a master killed, a replica promoted, slots moved, maxmemory reached.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/temp_dir.h"

namespace kvtier::testing {

struct RedisClusterSpec {
  int masters = 3;
  int replicas_per_master = 0;
  // false: one plain server (cluster support disabled); masters must be 1.
  bool cluster = true;
  // maxmemory of each node ("" for none) and its policy.
  std::string maxmemory;
  std::string maxmemory_policy = "allkeys-lru";
  // cluster-node-timeout: how soon a dead master is failed over.
  int node_timeout_ms = 1000;
};

class RedisHarness {
 public:
  // Starts the nodes, creates the cluster and waits until every node says
  // cluster_state:ok. Null on failure (the reason is printed).
  static std::unique_ptr<RedisHarness> Start(const RedisClusterSpec& spec = {});
  ~RedisHarness();

  int nodes() const { return static_cast<int>(ports_.size()); }
  uint16_t port(int node) const { return ports_[static_cast<size_t>(node)]; }
  std::string address(int node) const;  // "127.0.0.1:port"
  // The addresses of every node, for a client's seed list.
  std::vector<std::string> seeds() const;
  // "127.0.0.1:p1,127.0.0.1:p2,...": the form kvtierd's --remote-seeds takes.
  std::string seed_list() const;

  // redis-cli -p <port of node> <args...>; its standard output.
  std::string Cli(int node, const std::vector<std::string>& args) const;
  // The same with -c (follows redirections), against the first live node.
  std::string ClusterCli(const std::vector<std::string>& args) const;

  // SIGKILLs a node (its data is lost: no persistence).
  void Kill(int node);
  bool alive(int node) const { return pids_[static_cast<size_t>(node)] > 0; }
  // SIGKILLs every node.
  void KillAll();
  // The node serving `slot` now, by asking a live node (-1 if none).
  int MasterOf(uint16_t slot) const;
  // Waits (up to `seconds`) until every live node reports cluster_state:ok
  // and every live replica has synced with its master.
  bool WaitHealthy(int seconds = 30) const;
  // Moves `count` slots from node `from` to node `to` with
  // `redis-cli --cluster reshard` (keys migrated, MOVED/ASK during it).
  bool Reshard(int from, int to, int count) const;

 private:
  RedisHarness() = default;
  bool StartNode(size_t i, const RedisClusterSpec& spec);
  std::string NodeId(int node) const;

  TempDir dir_{"/tmp/kvtier-redis"};  // the nodes' logs and cluster files
  std::vector<uint16_t> ports_;
  std::vector<pid_t> pids_;
};

}  // namespace kvtier::testing

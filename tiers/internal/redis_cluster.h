// A Redis Cluster client for the remote tier, over hiredis (which has no
// cluster support of its own): the slot map read with CLUSTER SLOTS, each
// command sent to the node serving its key's slot, MOVED and ASK
// redirections followed, a small pool of connections per node, and the
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

struct redisReply;

namespace kvtier::tiers::internal {

struct RedisOptions {
  // Nodes to read the slot map from; any one that answers will do. At least
  // one.
  std::vector<Endpoint> seeds;
  // AUTH with this password on every connection (requirepass); empty: none.
  std::string password;
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

// One reply, owned. Views into it are valid while it lives.
class RedisReply {
 public:
  enum class Type : uint8_t { kNil, kString, kInteger, kStatus, kError, kArray };

  RedisReply() = default;
  explicit RedisReply(redisReply* raw);
  RedisReply(RedisReply&&) noexcept = default;
  RedisReply& operator=(RedisReply&&) noexcept = default;

  Type type() const;
  // kString, kStatus, kError: the bytes; otherwise empty.
  std::string_view str() const;
  // kInteger: the value; otherwise 0.
  int64_t integer() const;
  // kArray: the elements, unowned views into this reply.
  size_t elements() const;
  const redisReply* element(size_t i) const;
  const redisReply* raw() const { return raw_.get(); }

 private:
  struct Free {
    void operator()(redisReply* r) const;
  };
  std::unique_ptr<redisReply, Free> raw_;
};

// One command: its arguments, viewed (they must outlive the Run), and
// which of them is the key that routes it (index 1 for GET/SET/EXISTS/DEL).
struct RedisCommand {
  std::vector<std::string_view> args;
  size_t key_arg = 1;
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

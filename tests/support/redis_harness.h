// Test support: a real Redis Cluster (or a single server) on loopback ports,
// from Debian's redis-server and `redis-cli --cluster create`, torn down
// (killed, its directory removed) when the harness goes. The remote tier's
// tests and the two-node daemon tests run against it; faults are real ones:
// a master killed, a replica promoted, slots moved, maxmemory reached.
// Optionally the nodes speak only TLS (certificates made per harness with the
// openssl command-line tool) and refuse clients that do not log in as an ACL
// user; the harness' own redis-cli calls then do both.
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

  // TLS only: each node listens on a TLS port (plain port 0), its cluster bus
  // and replication over TLS too, presenting a server certificate for
  // 127.0.0.1 and localhost signed by the harness' CA (ca_file()); a client
  // must present a certificate from that CA too (tls-auth-clients yes), such
  // as client_cert_file(). Costs ~0.1 s of openssl runs at Start. Needs the
  // openssl command-line tool on PATH (Start fails, saying so, without it).
  bool tls = false;
  // With tls: the nodes present a certificate signed by an unrelated CA
  // (rogue_ca_file()) instead, so a client that trusts only ca_file() must
  // refuse them. The nodes (and the harness' redis-cli) trust both CAs.
  bool rogue_server_cert = false;

  // ACL: with acl_user set, every node has that user (all keys, channels and
  // commands) with password acl_password (then required, not empty), the
  // default user is off (a client that does not AUTH is refused with
  // NOAUTH), and replicas log in to their master as that user.
  std::string acl_user;
  std::string acl_password;
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

  // Whether the nodes speak only TLS (RedisClusterSpec::tls).
  bool tls() const { return tls_; }
  // PEM files under the harness' directory, empty without tls. ca_file():
  // the CA of the client certificate and (unless rogue_server_cert) of the
  // nodes' certificates. client_cert_file(), client_key_file(): a client
  // certificate from that CA and its key (unencrypted). rogue_ca_file(): an
  // unrelated CA, which signed the nodes' certificates with
  // rogue_server_cert and nothing otherwise.
  std::string ca_file() const;
  std::string client_cert_file() const;
  std::string client_key_file() const;
  std::string rogue_ca_file() const;

  // redis-cli -p <port of node> <args...>; its standard output. With tls or
  // an ACL user, redis-cli gets the certificates or the login too.
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
  bool MakeCertificates(bool rogue_server_cert);
  bool StartNode(size_t i, const RedisClusterSpec& spec);
  std::string NodeId(int node) const;
  // "redis-cli" and the TLS and login flags every call to it needs.
  std::vector<std::string> CliCommand() const;
  std::string TlsFile(const std::string& name) const;

  TempDir dir_{"/tmp/kvtier-redis"};  // the nodes' logs and cluster files
  std::vector<uint16_t> ports_;
  std::vector<pid_t> pids_;
  bool tls_ = false;
  // The CA bundle the nodes and the harness' redis-cli trust, and the
  // certificate and key the nodes present (files under dir_/tls).
  std::string trusted_ca_;
  std::string node_cert_;
  std::string node_key_;
  std::string acl_user_;
  std::string acl_password_;
};

}  // namespace kvtier::testing

// Two kvtierd processes (two nodes) sharing a remote tier on a real Redis
// Cluster, through the real client: a prefix written through one is found and
// read byte-exact through the other (write-through at once, write-back after
// the first evicts it), and the cluster's failures (a master killed, a
// resharding, maxmemory, the whole cluster stopped) turn into misses, never
// into wrong bytes or failed requests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "support/daemon_client.h"
#include "support/redis_harness.h"

namespace kvtier::testing {
namespace {

using client::Client;
using client::ClientOptions;
using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::WireTier;
using protocol::WireWriteState;

constexpr uint64_t kBlockBytes = 16 * 1024;  // Layout{2, 2, 64, fp16, 16}

uint64_t Num(const std::string& s) { return s.empty() ? 0 : std::stoull(s); }

class RemoteTest : public ::testing::Test {
 protected:
  void StartCluster(const RedisClusterSpec& spec = {}) {
    redis_ = RedisHarness::Start(spec);
    ASSERT_NE(redis_, nullptr);
    dir_.emplace("/tmp/kvtier-secret");
    secret_ = WriteSecret("a", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  }
  void TearDown() override { nodes_.clear(); }
  std::string WriteSecret(const std::string& name, const std::string& hex) {
    const std::string path = *dir_ / (name + ".secret");
    std::ofstream(path) << hex << "\n";
    std::filesystem::permissions(
        path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return path;
  }
  std::vector<std::string> NodeArgs(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"--remote-seeds", redis_->seed_list(), "--remote-secret-file",
                                     secret_};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  Daemon* StartNode(std::vector<std::string> extra = {}) {
    auto d = Daemon::Start(NodeArgs(std::move(extra)));
    EXPECT_NE(d, nullptr);
    if (!d) return nullptr;
    nodes_.push_back(std::move(d));
    return nodes_.back().get();
  }
  // Node A (with `a_args`) and node B on the cluster, a client on each.
  struct TwoNodes {
    Daemon* node_a = nullptr;
    Daemon* node_b = nullptr;
    std::unique_ptr<Client> a, b;
  };
  TwoNodes StartTwoNodes(std::vector<std::string> a_args = {}) {
    TwoNodes t;
    t.node_a = StartNode(std::move(a_args));
    t.node_b = StartNode();
    if (t.node_a != nullptr && t.node_b != nullptr) {
      t.a = Connect(*t.node_a);
      t.b = Connect(*t.node_b);
    }
    return t;
  }
  static std::unique_ptr<Client> Connect(Daemon& d) {
    return ConnectClient(TestClientOptions(d.socket(), "llama-test", "remote-test"), &d);
  }
  static std::vector<BlockKey> Put(Client& c, const std::vector<TokenId>& tokens) {
    return PutPattern(c, tokens);
  }
  // Acquires `keys` in the host; every leased block must be exactly its
  // block. Returns how many were leased.
  static size_t AcquireChecked(Client& c, const std::vector<BlockKey>& keys, size_t* wrong) {
    auto lease = c.Acquire(keys);
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    if (!lease.ok()) return 0;
    for (size_t i = 0; i < lease->size(); ++i) {
      if (!MatchesPattern(lease->Bytes(i), keys[i])) ++*wrong;
    }
    const size_t n = lease->size();
    EXPECT_TRUE(lease->Release().ok());
    return n;
  }
  // Waits until `bytes` of blocks are written through to the ssd tier and
  // no write is still under way.
  static bool WaitOnDisk(Client& c, uint64_t bytes) {
    for (int i = 0; i < 200; ++i) {
      if (Num(StatsOf(c)["tier.ssd.used_bytes"]) >= bytes && StatsOf(c)["moves_in_flight"] == "0") {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }
  // Waits until the node's STATS entry reaches `at_least`.
  static bool WaitStat(Client& c, const std::string& name, uint64_t at_least) {
    for (int i = 0; i < 200; ++i) {
      if (Num(StatsOf(c)[name]) >= at_least) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return false;
  }

  std::unique_ptr<RedisHarness> redis_;
  std::optional<TempDir> dir_;  // the secrets, and sockets of nodes started by hand
  std::string secret_;
  std::vector<std::unique_ptr<Daemon>> nodes_;
};

TEST_F(RemoteTest, WriteThroughAPrefixIsReadByteExactThroughAnotherNodeAtOnce) {
  StartCluster();
  auto [node_a, node_b, a, b] = StartTwoNodes({"--remote-write-through"});
  ASSERT_TRUE(a && b);
  const auto tokens = RandomPrompt(1, 10);
  const auto keys = Put(*a, tokens);
  ASSERT_EQ(b->Keys(tokens), keys);  // one deployment secret: the same keys
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 10));
  auto found = b->Lookup(keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->tiers, std::vector<WireTier>(10, WireTier::kRemote));
  size_t wrong = 0;
  EXPECT_EQ(AcquireChecked(*b, keys, &wrong), 10u);
  EXPECT_EQ(wrong, 0u);
  // Now in B's own host tier.
  EXPECT_EQ(b->Lookup(keys)->tiers, std::vector<WireTier>(10, WireTier::kHost));
  EXPECT_EQ(StatsOf(*b)["tier.remote.hits"], "10");
  // Inline GET reaches the remote tier as well.
  const auto other = Put(*a, RandomPrompt(2, 3));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 13));
  auto got = b->GetInline(other);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->hits, 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        MatchesPattern(std::span(got->data).subspan(i * kBlockBytes, kBlockBytes), other[i]));
  }
}

TEST_F(RemoteTest, WriteBackAPrefixReachesAnotherNodeAfterTheFirstEvictsIt) {
  StartCluster();
  // 64 blocks of host: two more prompts of 32 evict the first.
  auto [node_a, node_b, a, b] = StartTwoNodes({"--host-capacity", "1MiB", "--host-slab", "1MiB"});
  ASSERT_TRUE(a && b);
  const auto keys = Put(*a, RandomPrompt(3, 8));
  EXPECT_EQ(StatsOf(*a)["tier.remote.written_blocks"], "0");  // still in A's memory
  Put(*a, RandomPrompt(4, 32));
  Put(*a, RandomPrompt(5, 32));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 8));
  auto found = b->Lookup(keys);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->tiers.size(), 8u);
  size_t wrong = 0;
  EXPECT_EQ(AcquireChecked(*b, keys, &wrong), 8u);
  EXPECT_EQ(wrong, 0u);
}

TEST_F(RemoteTest, ANodeWithAnotherDeploymentSecretIsRefused) {
  StartCluster();
  ASSERT_NE(StartNode(), nullptr);
  const std::string other =
      WriteSecret("b", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100");
  std::string log;
  const int status = RunDaemonToExit(
      {"--socket", *dir_ / "b.sock", "--no-reserve-memory", "--ssd-dir", "", "--metrics-address",
       "", "--remote-seeds", redis_->seed_list(), "--remote-secret-file", other},
      &log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
  EXPECT_NE(log.find("another deployment secret"), std::string::npos) << log;
  // Without the secret file at all: a clear error too.
  const int no_secret = RunDaemonToExit({"--socket", *dir_ / "c.sock", "--no-reserve-memory",
                                         "--ssd-dir", "", "--remote-seeds", redis_->seed_list()},
                                        &log);
  EXPECT_TRUE(WIFEXITED(no_secret) && WEXITSTATUS(no_secret) != 0);
  EXPECT_NE(log.find("remote.secret_file"), std::string::npos) << log;
}

TEST_F(RemoteTest, AnSsdDirectoryKeyedUnderAnotherSecretIsRefused) {
  StartCluster();
  const std::string ssd = *dir_ / "ssd";
  // Written through, so the blocks are on disk when the node stops.
  const std::vector<std::string> ssd_args = {
      "--ssd-dir",     ssd,      "--ssd-capacity",     "64MiB",
      "--ssd-prepare", "sparse", "--ssd-write-through"};
  {
    // This node's blocks, keyed under its ssd directory's own secret.
    auto alone = Daemon::Start(ssd_args);
    ASSERT_NE(alone, nullptr);
    auto c = Connect(*alone);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(Put(*c, RandomPrompt(11, 3)).size(), 3u);
    ASSERT_TRUE(WaitOnDisk(*c, 3 * 16384));
  }
  std::vector<std::string> args = {"--socket", *dir_ / "r.sock", "--no-reserve-memory",
                                   "--metrics-address", ""};
  args.insert(args.end(), ssd_args.begin(), ssd_args.end());
  for (const std::string& a : NodeArgs()) args.push_back(a);
  std::string log;
  const int status = RunDaemonToExit(args, &log);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
  EXPECT_NE(log.find("hashed under the directory's own secret"), std::string::npos) << log;
  // An empty directory joins the deployment, and then refuses another one.
  std::filesystem::remove_all(ssd);
  {
    Daemon* node = StartNode(ssd_args);
    ASSERT_NE(node, nullptr);
    auto c = Connect(*node);
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(Put(*c, RandomPrompt(12, 3)).size(), 3u);
    ASSERT_TRUE(WaitOnDisk(*c, 3 * 16384));
    nodes_.clear();
  }
  const std::string other =
      WriteSecret("b", "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100");
  args.back() = other;             // --remote-secret-file
  redis_ = RedisHarness::Start();  // a fresh cluster, so only the directory objects
  ASSERT_NE(redis_, nullptr);
  args[args.size() - 3] = redis_->seed_list();
  const int other_status = RunDaemonToExit(args, &log);
  EXPECT_TRUE(WIFEXITED(other_status) && WEXITSTATUS(other_status) != 0) << log;
  EXPECT_NE(log.find("hashed under the deployment secret"), std::string::npos) << log;
}

// The remote tier as docs/security.md sets it up: a TLS-only cluster with
// an ACL user, the nodes' blocks sealed under shared block keys. Blocks move
// between nodes byte-exact, the cluster holds only sealed values, and each
// missing or wrong piece of the set-up stops a node at start with a clear
// error.
TEST_F(RemoteTest, SealedBlocksMoveBetweenNodesOverTlsWithAnAclUser) {
  RedisClusterSpec spec;
  spec.tls = true;
  spec.acl_user = "kvtier-node";
  spec.acl_password = "node password";
  StartCluster(spec);
  const std::string keys_file = WriteSecret("keys", "1:" + std::string(64, 'd'));
  const std::string password = WriteSecret("password", "node password");
  auto config = [&](const std::string& name, const std::string& password_file, bool tls = true,
                    bool sealed = true) {
    const std::string path = *dir_ / (name + ".toml");
    std::ofstream out(path);
    out << "[server]\nblock_keys_file = \"" << (sealed ? keys_file : "") << "\"\n"
        << "[remote]\nusername = \"kvtier-node\"\npassword_file = \"" << password_file << "\"\n";
    if (tls) {
      out << "tls = true\ntls_ca_file = \"" << redis_->ca_file() << "\"\ntls_cert_file = \""
          << redis_->client_cert_file() << "\"\ntls_key_file = \"" << redis_->client_key_file()
          << "\"\n";
    }
    return path;
  };
  const std::string good = config("good", password);
  Daemon* node_a = StartNode({"--config", good, "--remote-write-through"});
  Daemon* node_b = StartNode({"--config", good});
  ASSERT_TRUE(node_a != nullptr && node_b != nullptr);
  auto a = Connect(*node_a);
  auto b = Connect(*node_b);
  ASSERT_TRUE(a && b);
  const auto keys = Put(*a, RandomPrompt(21, 6));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 6));
  size_t wrong = 0;
  EXPECT_EQ(AcquireChecked(*b, keys, &wrong), 6u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(StatsOf(*b)["tier.remote.hits"], "6");
  EXPECT_EQ(StatsOf(*b)["tier.remote.corrupt"], "0");
  const std::string log = node_a->Log();
  // The log names the cipher's library (ipsec-mb or OpenSSL) and the key.
  EXPECT_NE(log.find("are sealed (AES-256-GCM, "), std::string::npos) << log;
  EXPECT_NE(log.find(") under block key 1;"), std::string::npos) << log;
  EXPECT_EQ(log.find("not encrypted"), std::string::npos) << log;
  // Every block value on the cluster is sealed (format version 2 at byte 4).
  size_t values = 0;
  for (int n = 0; n < redis_->nodes(); ++n) {
    std::istringstream names(redis_->Cli(n, {"KEYS", "kvtier:*:*"}));
    for (std::string name; std::getline(names, name);) {
      if (name.empty()) continue;
      const std::string value = redis_->Cli(n, {"GET", name});
      ASSERT_GT(value.size(), 8u) << name;
      EXPECT_EQ(value[4], '\x02') << name;
      ++values;
    }
  }
  EXPECT_GE(values, 6u);

  // What stops a node at start, each with a clear error.
  struct Case {
    std::string what, config, expect;
    std::vector<std::string> args = {};
  };
  const std::string readable = WriteSecret("readable", "node password");
  std::filesystem::permissions(readable, std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  const std::string wrong_password = WriteSecret("wrong", "not the password");
  const std::vector<Case> cases = {
      {"a wrong password", config("wrong", wrong_password), "AUTH as kvtier-node failed"},
      {"a world-readable password file", config("readable", readable), "has mode 0604"},
      {"TLS off", config("plain", password, false), "remote tier"},
      {"no block keys", config("nokeys", password, true, false), "are sealed"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {
        "--socket", *dir_ / "x.sock", "--no-reserve-memory", "--metrics-address", "",
        "--config", c.config};
    for (const std::string& arg : NodeArgs()) args.push_back(arg);
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string out;
    const int status = RunDaemonToExit(args, &out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << c.what << ": " << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << c.what << ": " << out;
  }
}

TEST_F(RemoteTest, AClusterStoppedLeavesTheNodeServingItsOwnTiers) {
  StartCluster();
  auto [node_a, node_b, a, b] = StartTwoNodes({"--remote-write-through"});
  ASSERT_TRUE(a && b);
  const auto shared = Put(*a, RandomPrompt(6, 4));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 4));
  redis_->KillAll();
  // B's lookups and acquires of what only the cluster had: misses, no errors.
  auto found = b->Lookup(shared);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->tiers.size(), 0u);
  size_t wrong = 0;
  EXPECT_EQ(AcquireChecked(*b, shared, &wrong), 0u);
  // Both nodes keep serving their own tiers.
  for (Client* c : {a.get(), b.get()}) {
    const auto keys = Put(*c, RandomPrompt(7, 5));
    EXPECT_EQ(c->Lookup(keys)->tiers.size(), 5u);
    EXPECT_EQ(AcquireChecked(*c, keys, &wrong), 5u);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(StatsOf(*b)["tier.remote.paused"], "1");
  EXPECT_TRUE(node_a->Alive() && node_b->Alive());
  EXPECT_NE(node_b->Log().find("remote tier paused"), std::string::npos) << node_b->Log();
}

TEST_F(RemoteTest, AFullClusterGivesMissesNotErrors) {
  RedisClusterSpec spec;
  spec.maxmemory = "4mb";
  StartCluster(spec);
  auto [node_a, node_b, a, b] = StartTwoNodes({"--remote-write-through"});
  ASSERT_TRUE(a && b);
  // 1,200 blocks of 16 KiB: 19 MiB against 3 x 4 MiB of cluster.
  std::vector<std::vector<BlockKey>> prompts;
  for (uint32_t p = 0; p < 120; ++p) prompts.push_back(Put(*a, RandomPrompt(100 + p, 10)));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 1200))
      << StatsOf(*a)["tier.remote.write_dropped"];
  size_t hits = 0, wrong = 0;
  for (const auto& keys : prompts) {
    auto found = b->Lookup(keys);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    hits += AcquireChecked(*b, keys, &wrong);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(hits, 0u);
  EXPECT_LT(hits, 1200u);  // the cluster evicted the rest: misses
  EXPECT_EQ(StatsOf(*b)["tier.remote.errors"], "0");
}

TEST_F(RemoteTest, AMasterKilledUnderLoadGivesMissesNeverWrongBytesAndWritesResume) {
  RedisClusterSpec spec;
  spec.replicas_per_master = 1;
  StartCluster(spec);
  auto [node_a, node_b, a, b] = StartTwoNodes({"--remote-write-through"});
  ASSERT_TRUE(a && b);
  std::vector<std::vector<BlockKey>> prompts;
  for (uint32_t p = 0; p < 40; ++p) prompts.push_back(Put(*a, RandomPrompt(200 + p, 6)));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 240));
  size_t wrong = 0, leased = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (p == 10) redis_->Kill(redis_->MasterOf(0));
    leased += AcquireChecked(*b, prompts[p], &wrong);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(leased, 0u);
  ASSERT_TRUE(redis_->WaitHealthy());
  // Writes resume once the replica has taken over (and the pause ran out).
  const uint64_t before = Num(StatsOf(*a)["tier.remote.written_blocks"]);
  bool resumed = false;
  for (uint32_t p = 0; p < 100 && !resumed; ++p) {
    Put(*a, RandomPrompt(300 + p, 4));
    resumed = WaitStat(*a, "tier.remote.written_blocks", before + 4);
  }
  EXPECT_TRUE(resumed) << node_a->Log();
}

TEST_F(RemoteTest, AReshardingUnderLoadFailsNoRequest) {
  StartCluster();
  auto [node_a, node_b, a, b] = StartTwoNodes({"--remote-write-through"});
  ASSERT_TRUE(a && b);
  std::vector<std::vector<BlockKey>> prompts;
  for (uint32_t p = 0; p < 60; ++p) prompts.push_back(Put(*a, RandomPrompt(400 + p, 5)));
  ASSERT_TRUE(WaitStat(*a, "tier.remote.written_blocks", 300));
  std::atomic<bool> done{false};
  std::thread reshard([&] {
    const int from = redis_->MasterOf(0);
    EXPECT_TRUE(redis_->Reshard(from, (from + 1) % 3, 1000));
    done = true;
  });
  size_t wrong = 0, leased = 0;
  for (const auto& keys : prompts) leased += AcquireChecked(*b, keys, &wrong);
  reshard.join();
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(leased, 300u);  // MOVED and ASK followed: every block found
  EXPECT_EQ(StatsOf(*b)["tier.remote.errors"], "0");
}

}  // namespace
}  // namespace kvtier::testing

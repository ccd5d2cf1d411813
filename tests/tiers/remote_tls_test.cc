// The remote tier over TLS and with Redis ACL users, against real Redis
// Clusters that listen on TLS only, with certificates the harness makes
// (tests/support/redis_harness.h): blocks move byte-exact through TLS,
// redirections during a resharding are followed over TLS too, and every
// way a connection must be refused is: a node whose certificate another CA
// signed, a certificate that does not name the node, no client certificate,
// plaintext to a TLS port, a wrong password, no AUTH at all.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "support/redis_harness.h"
#include "tiers/internal/cluster_slots.h"
#include "tiers/internal/redis_cluster.h"
#include "tiers/internal/remote_store.h"
#include "tiers/remote_blocks.h"

namespace kvtier::tiers::internal {
namespace {

using kvtier::testing::RedisClusterSpec;
using kvtier::testing::RedisHarness;

constexpr char kUser[] = "kvtier-node";
constexpr char kPassword[] = "s3cret pass";

RedisOptions TlsOptions(const RedisHarness& h) {
  RedisOptions o;
  for (const std::string& s : h.seeds()) o.seeds.push_back(*ParseEndpoint(s));
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.command_timeout = std::chrono::milliseconds(3000);
  o.tls.enabled = true;
  o.tls.ca_file = h.ca_file();
  o.tls.cert_file = h.client_cert_file();
  o.tls.key_file = h.client_key_file();
  return o;
}

std::string Why(const Status& s) { return s.ToString(); }

// One TLS cluster with an ACL user for the suite.
class RemoteTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RedisClusterSpec spec;
    spec.tls = true;
    spec.acl_user = kUser;
    spec.acl_password = kPassword;
    shared_ = RedisHarness::Start(spec).release();
  }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(shared_, nullptr); }
  static RedisOptions Options() {
    RedisOptions o = TlsOptions(*shared_);
    o.username = kUser;
    o.password = kPassword;
    return o;
  }
  static RedisHarness* shared_;
};

RedisHarness* RemoteTlsTest::shared_ = nullptr;

TEST_F(RemoteTlsTest, BlocksMoveByteExactAndRedirectionsAreFollowedOverTls) {
  RemoteStoreOptions o;
  o.redis = Options();
  o.key_prefix = "tls";
  auto store = RemoteStore::Open(o, std::vector<std::byte>(32, std::byte{1}));
  ASSERT_TRUE(store.ok()) << Why(store.status());
  const Layout l = SmallLayout(64);  // 8 KiB blocks: several TLS records each
  const RemoteNamespace ns{RemoteNamespaceId("m", "", l), l,
                           NamespaceFingerprint("m", "", l.ToString())};
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 300; ++i) keys.push_back({i * 7919 + 1, ~i});
  for (const BlockKey& k : keys) {
    ASSERT_TRUE((*store)->Write(ns, k, Payload(k, l.BlockBytes())).ok());
  }
  EXPECT_NE((*store)->description().find("3 masters"), std::string::npos);
  // Read everything while slots move from node 0 to node 1: MOVED and ASK
  // send the client to other nodes, over TLS as well.
  std::atomic<bool> done{false};
  std::atomic<size_t> hits{0}, wrong{0};
  std::thread reader([&] {
    while (!done.load()) {
      for (const BlockKey& k : keys) {
        std::vector<std::byte> buf(l.BlockBytes());
        std::span<std::byte> out(buf);
        if ((*store)->ReadLeading(ns, std::span(&k, 1), std::span(&out, 1)) == 1) {
          ++hits;
          if (buf != Payload(k, l.BlockBytes())) ++wrong;
        }
      }
    }
  });
  const bool moved = shared_->Reshard(0, 1, 400);
  done.store(true);
  reader.join();
  ASSERT_TRUE(moved);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(hits.load(), keys.size());
  // After the resharding every block is still there, read through TLS.
  std::vector<std::vector<std::byte>> bufs(keys.size(), std::vector<std::byte>(l.BlockBytes()));
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  EXPECT_EQ((*store)->ReadLeading(ns, keys, outs), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(bufs[i], Payload(keys[i], l.BlockBytes()));
}

TEST_F(RemoteTlsTest, AuthIsRequiredAndAWrongPasswordIsAClearError) {
  RedisOptions none = Options();
  none.username.clear();
  none.password.clear();
  auto refused = RedisCluster::Connect(none);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("NOAUTH"), std::string::npos) << Why(refused.status());
  RedisOptions wrong = Options();
  wrong.password = "not it";
  auto bad = RedisCluster::Connect(wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("AUTH as kvtier-node failed"), std::string::npos)
      << Why(bad.status());
  EXPECT_EQ(bad.status().message().find("not it"), std::string::npos);  // never echoed
  EXPECT_TRUE(RedisCluster::Connect(Options()).ok());
}

TEST_F(RemoteTlsTest, PlaintextToATlsPortAndTlsWithoutAClientCertificateFail) {
  RedisOptions plain = Options();
  plain.tls.enabled = false;
  EXPECT_FALSE(RedisCluster::Connect(plain).ok());
  RedisOptions anonymous = Options();
  anonymous.tls.cert_file.clear();
  anonymous.tls.key_file.clear();
  auto refused = RedisCluster::Connect(anonymous);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

TEST_F(RemoteTlsTest, TheCertificateMustNameTheNode) {
  RedisOptions other_name = Options();
  other_name.tls.server_name = "cache.example.com";
  auto refused = RedisCluster::Connect(other_name);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("does not name cache.example.com"), std::string::npos)
      << Why(refused.status());
  RedisOptions localhost = Options();
  localhost.tls.server_name = "localhost";  // in the certificate too
  EXPECT_TRUE(RedisCluster::Connect(localhost).ok());
}

TEST_F(RemoteTlsTest, FilesThatCannotBeLoadedAreNamed) {
  RedisOptions o = Options();
  o.tls.ca_file = "/nonexistent/ca.pem";
  auto missing = RedisCluster::Connect(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("/nonexistent/ca.pem"), std::string::npos);
  o = Options();
  o.tls.key_file = shared_->ca_file();  // a certificate, not the key
  auto wrong_key = RedisCluster::Connect(o);
  ASSERT_FALSE(wrong_key.ok());
  EXPECT_EQ(wrong_key.status().code(), StatusCode::kInvalidArgument);
}

TEST(RemoteTlsRogueTest, ANodeWhoseCertificateAnotherCaSignedIsRefused) {
  RedisClusterSpec spec;
  spec.tls = true;
  spec.rogue_server_cert = true;
  spec.masters = 1;
  spec.cluster = false;
  auto redis = RedisHarness::Start(spec);
  ASSERT_NE(redis, nullptr);
  RedisOptions o = TlsOptions(*redis);
  auto refused = RedisCluster::Connect(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is refused"), std::string::npos)
      << Why(refused.status());
  // The same node is reached when its CA is the one trusted, and with
  // verification off (a test set-up only).
  o.tls.ca_file = redis->rogue_ca_file();
  EXPECT_TRUE(RedisCluster::Connect(o).ok());
  o = TlsOptions(*redis);
  o.tls.verify = false;
  EXPECT_TRUE(RedisCluster::Connect(o).ok());
}

}  // namespace
}  // namespace kvtier::tiers::internal

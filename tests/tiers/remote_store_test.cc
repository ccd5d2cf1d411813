// The remote tier's client and store against a real Redis Cluster
// (tests/support/redis_harness.h): routing, pipelining, redirections during
// a resharding, the value format's checks, the deployment secret, and the
// failures (a master killed, the cluster gone, maxmemory).
#include "tiers/internal/remote_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "support/redis_harness.h"
#include "tiers/internal/checksum.h"
#include "tiers/internal/redis_cluster.h"
#include "tiers/remote_blocks.h"

namespace kvtier::tiers::internal {
namespace {

using kvtier::testing::RedisClusterSpec;
using kvtier::testing::RedisHarness;

RedisOptions OptionsFor(const RedisHarness& h) {
  RedisOptions o;
  for (const std::string& s : h.seeds()) o.seeds.push_back(*ParseEndpoint(s));
  o.connect_timeout = std::chrono::milliseconds(200);
  o.command_timeout = std::chrono::milliseconds(2000);
  return o;
}

std::vector<std::byte> Secret(uint8_t fill) { return std::vector<std::byte>(32, std::byte{fill}); }

std::vector<BlockKey> Chain(uint64_t seed, size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back({seed * 1000003 + i, ~(seed + i * 7)});
  return keys;
}

// One cluster for the suite (starting one takes ~2 s); each test keeps to
// keys of its own (its name as the key prefix).
class RemoteStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { shared_ = RedisHarness::Start().release(); }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    redis_ = shared_;
    ASSERT_NE(redis_, nullptr);
  }
  static std::string Prefix() {
    return std::string("t-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::unique_ptr<RemoteStore> Open(const Clock* clock = &SystemClock(),
                                    std::vector<std::byte> secret = Secret(7)) {
    RemoteStoreOptions o;
    o.redis = OptionsFor(*redis_);
    o.clock = clock;
    o.key_prefix = Prefix();
    auto store = RemoteStore::Open(o, secret);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store ? std::move(*store) : nullptr;
  }
  RemoteNamespace Ns() const { return {RemoteNamespaceId("m", "", SmallLayout()), SmallLayout()}; }

  static RedisHarness* shared_;
  RedisHarness* redis_ = nullptr;
};

RedisHarness* RemoteStoreTest::shared_ = nullptr;

// A cluster of its own: the test stops it.
class RemoteStoreDownTest : public RemoteStoreTest {
 protected:
  void SetUp() override {
    own_ = RedisHarness::Start();
    redis_ = own_.get();
    ASSERT_NE(redis_, nullptr);
  }
  std::unique_ptr<RedisHarness> own_;
};

TEST(RemoteValueTest, AValueDecodesOnlyAsTheBlockItWasMadeFor) {
  const RemoteNamespace ns{RemoteNamespaceId("m", "", SmallLayout()), SmallLayout()};
  const BlockKey key{7, 9};
  const std::vector<std::byte> payload = Payload(key, ns.layout.BlockBytes());
  const std::vector<std::byte> value = EncodeRemoteValue(ns, key, payload);
  ASSERT_EQ(value.size(), kRemoteHeaderBytes + payload.size());
  const std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  std::vector<std::byte> out(payload.size());
  ASSERT_TRUE(DecodeRemoteValue(text, ns, key, out).ok());
  EXPECT_EQ(out, payload);
  EXPECT_NE(DecodeRemoteValue(text, ns, BlockKey{7, 10}, out).message().find("block key"),
            std::string::npos);
  RemoteNamespace other = ns;
  other.id ^= 1;
  EXPECT_NE(DecodeRemoteValue(text, other, key, out).message().find("namespace"),
            std::string::npos);
  other = ns;
  other.layout.dtype = DType::kBFloat16;
  EXPECT_NE(DecodeRemoteValue(text, other, key, out).message().find("layout"), std::string::npos);
  std::string flipped(text);
  flipped.back() = static_cast<char>(flipped.back() ^ 0x40);
  EXPECT_NE(DecodeRemoteValue(flipped, ns, key, out).message().find("checksum"), std::string::npos);
  EXPECT_EQ(DecodeRemoteValue(text.substr(1), ns, key, out).code(), StatusCode::kCorruption);
}

// An MLA latent namespace: its kind in the header (@49) and in its id, and a
// block of one kind never decodes as the other's. K/V ids are those of
// kvtierds from before kinds, so that they still share blocks.
TEST(RemoteValueTest, TheLayoutKindIsInTheHeaderAndTheIdOfALatentNamespaceOnly) {
  EXPECT_EQ(RemoteNamespaceId("m", "", SmallLayout()), 0x6c9caf3b6241d941ULL);
  Layout kv = SmallLayout();
  kv.kv_heads = 1;
  Layout latent = kv;
  latent.kind = KvKind::kLatent;
  EXPECT_NE(RemoteNamespaceId("m", "", latent), RemoteNamespaceId("m", "", kv));

  const RemoteNamespace ns{RemoteNamespaceId("m", "", latent), latent};
  const BlockKey key{7, 9};
  const std::vector<std::byte> payload = Payload(key, latent.BlockBytes());
  const std::vector<std::byte> value = EncodeRemoteValue(ns, key, payload);
  EXPECT_EQ(value[48], static_cast<std::byte>(DType::kFloat16));
  EXPECT_EQ(value[49], std::byte{1});
  for (size_t i = 50; i < 56; ++i) EXPECT_EQ(value[i], std::byte{0}) << i;
  const std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  std::vector<std::byte> out(payload.size());
  ASSERT_TRUE(DecodeRemoteValue(text, ns, key, out).ok());
  EXPECT_EQ(out, payload);
  // A header whose kind byte alone differs (a K/V block of that size, say)
  // is another layout; so is an unknown kind.
  std::vector<std::byte> forged = value;
  forged[49] = std::byte{0};
  const std::string_view forged_text(reinterpret_cast<const char*>(forged.data()), forged.size());
  EXPECT_NE(DecodeRemoteValue(forged_text, ns, key, out).message().find("another layout"),
            std::string::npos);
  forged[49] = std::byte{2};
  EXPECT_NE(DecodeRemoteValue(forged_text, ns, key, out).message().find("another layout"),
            std::string::npos);
  const RemoteNamespace as_kv{ns.id, kv};
  std::vector<std::byte> kv_out(kv.BlockBytes());
  std::string doubled(text);
  doubled.append(payload.size(), '\0');
  EXPECT_EQ(DecodeRemoteValue(doubled, as_kv, key, kv_out).code(), StatusCode::kCorruption);
}

TEST(RedisClusterSingleServerTest, ServesEverySlotFromOneServer) {
  RedisClusterSpec spec;
  spec.cluster = false;
  spec.masters = 1;
  auto redis = RedisHarness::Start(spec);
  ASSERT_NE(redis, nullptr);
  auto cluster = RedisCluster::Connect(OptionsFor(*redis));
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_FALSE((*cluster)->cluster_mode());
  std::vector<std::string> names;
  for (int i = 0; i < 50; ++i) names.push_back("k" + std::to_string(i));
  std::vector<RedisCommand> sets, gets;
  for (const auto& n : names) sets.push_back({{"SET", n, n}, 1});
  for (const auto& n : names) gets.push_back({{"GET", n}, 1});
  for (const auto& r : (*cluster)->Run(sets)) ASSERT_TRUE(r.ok());
  auto got = (*cluster)->Run(gets);
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(got[i].ok());
    EXPECT_EQ(got[i]->str(), names[i]);
  }
}

TEST_F(RemoteStoreTest, RoutesEachKeyToTheMasterOfItsSlot) {
  auto cluster = RedisCluster::Connect(OptionsFor(*redis_));
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_TRUE((*cluster)->cluster_mode());
  EXPECT_EQ((*cluster)->masters().size(), 3u);
  std::vector<std::string> names, values;
  for (int i = 0; i < 300; ++i) {
    names.push_back("key:" + std::to_string(i));
    values.push_back(std::string(static_cast<size_t>(100 + i), static_cast<char>('a' + i % 26)));
  }
  std::vector<RedisCommand> sets, gets;
  for (size_t i = 0; i < names.size(); ++i) sets.push_back({{"SET", names[i], values[i]}, 1});
  for (const auto& n : names) gets.push_back({{"GET", n}, 1});
  for (const auto& r : (*cluster)->Run(sets)) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->str(), "OK");
  }
  auto got = (*cluster)->Run(gets);
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(got[i].ok());
    EXPECT_EQ(got[i]->str(), values[i]);
  }
  // Each key sits on the node the cluster says serves its slot: asked
  // without -c, that node answers with the value, not a redirection.
  for (size_t i = 0; i < names.size(); i += 37) {
    const int node = redis_->MasterOf(KeySlot(names[i]));
    ASSERT_GE(node, 0);
    EXPECT_EQ(redis_->Cli(node, {"GET", names[i]}), values[i] + "\n");
  }
}

TEST_F(RemoteStoreTest, FollowsMovedAndAskThroughAResharding) {
  auto cluster = RedisCluster::Connect(OptionsFor(*redis_));
  ASSERT_TRUE(cluster.ok());
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) names.push_back("r:" + std::to_string(i));
  std::vector<RedisCommand> sets, gets;
  for (const auto& n : names) sets.push_back({{"SET", n, n}, 1});
  for (const auto& n : names) gets.push_back({{"GET", n}, 1});
  for (const auto& r : (*cluster)->Run(sets)) ASSERT_TRUE(r.ok());
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, wrong{0}, rounds{0};
  std::thread reader([&] {
    while (!done.load()) {
      auto got = (*cluster)->Run(gets);
      for (size_t i = 0; i < names.size(); ++i) {
        if (!got[i].ok() || got[i]->type() == RedisReply::Type::kError) {
          ++failures;
        } else if (got[i]->str() != names[i]) {
          ++wrong;
        }
      }
      ++rounds;
    }
  });
  const int from = redis_->MasterOf(0);  // the reshard moves a node's lowest slots first
  ASSERT_GE(from, 0);
  EXPECT_TRUE(redis_->Reshard(from, (from + 1) % 3, 600));
  done = true;
  reader.join();
  EXPECT_GT(rounds.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(redis_->MasterOf(0), (from + 1) % 3);
  auto got = (*cluster)->Run(gets);
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(got[i].ok());
    EXPECT_EQ(got[i]->str(), names[i]);
  }
}

TEST_F(RemoteStoreTest, WritesAndReadsBlocksByteExact) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  const RemoteNamespace ns = Ns();
  const size_t bytes = ns.layout.BlockBytes();
  const std::vector<BlockKey> keys = Chain(1, 40);
  for (size_t i = 0; i < 30; ++i)
    ASSERT_TRUE(store->Write(ns, keys[i], Payload(keys[i], bytes)).ok());
  EXPECT_EQ(store->CountLeading(ns.id, keys), 30u);
  std::vector<std::vector<std::byte>> bufs(keys.size(), std::vector<std::byte>(bytes));
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  EXPECT_EQ(store->ReadLeading(ns, keys, outs), 30u);
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(bufs[i], Payload(keys[i], bytes)) << i;
  // Another namespace never sees them.
  RemoteNamespace other = ns;
  other.id = RemoteNamespaceId("m", "tenant-b", ns.layout);
  EXPECT_EQ(store->CountLeading(other.id, keys), 0u);
  EXPECT_EQ(store->ReadLeading(other, keys, outs), 0u);
  const RemoteStats s = store->stats();
  EXPECT_EQ(s.writes, 30u);
  EXPECT_EQ(s.read_hits, 30u);
  EXPECT_EQ(s.bytes_read, 30 * bytes);
  EXPECT_EQ(s.corrupt, 0u);
}

TEST_F(RemoteStoreTest, AKeyFoundMissingIsNotAskedForUntilItsTtlEnds) {
  ManualClock clock(1'000 * kNsPerSec);
  auto a = Open(&clock);
  auto b = Open(&clock);  // another node
  const RemoteNamespace ns = Ns();
  const std::vector<BlockKey> keys = Chain(2, 3);
  EXPECT_EQ(a->CountLeading(ns.id, keys), 0u);
  ASSERT_TRUE(b->Write(ns, keys[0], Payload(keys[0], ns.layout.BlockBytes())).ok());
  EXPECT_EQ(a->CountLeading(ns.id, keys), 0u);  // negative cache
  EXPECT_EQ(a->stats().negative_hits, 1u);
  clock.Advance(2 * kNsPerSec);
  EXPECT_EQ(a->CountLeading(ns.id, keys), 1u);
  // A node's own write ends its negative entry at once.
  EXPECT_EQ(a->CountLeading(ns.id, keys), 1u);
  ASSERT_TRUE(a->Write(ns, keys[1], Payload(keys[1], ns.layout.BlockBytes())).ok());
  EXPECT_EQ(a->CountLeading(ns.id, keys), 2u);
}

TEST_F(RemoteStoreTest, AValueThatIsNotExactlyTheBlockIsAMiss) {
  auto store = Open();
  const RemoteNamespace ns = Ns();
  const size_t bytes = ns.layout.BlockBytes();
  const std::vector<BlockKey> keys = Chain(3, 4);
  for (const BlockKey& k : keys) ASSERT_TRUE(store->Write(ns, k, Payload(k, bytes)).ok());
  auto cluster = RedisCluster::Connect(OptionsFor(*redis_));
  ASSERT_TRUE(cluster.ok());
  const std::string k1 = store->KeyOf(ns.id, keys[1]), k2 = store->KeyOf(ns.id, keys[2]),
                    k3 = store->KeyOf(ns.id, keys[3]);
  // keys[1]: another block's whole value (a valid header, the wrong key).
  RedisCommand get{{"GET", k3}, 1};
  auto v3 = (*cluster)->Run(std::span(&get, 1));
  ASSERT_TRUE(v3[0].ok());
  const std::string other(v3[0]->str());
  RedisCommand set1{{"SET", k1, other}, 1};
  ASSERT_TRUE((*cluster)->Run(std::span(&set1, 1))[0].ok());
  std::vector<std::vector<std::byte>> bufs(keys.size(), std::vector<std::byte>(bytes));
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  EXPECT_EQ(store->ReadLeading(ns, keys, outs), 1u);
  EXPECT_EQ(store->stats().corrupt, 1u);
  // keys[2] as the first key asked: one payload byte flipped.
  RedisCommand get2{{"GET", k2}, 1};
  auto v2 = (*cluster)->Run(std::span(&get2, 1));
  std::string flipped(v2[0]->str());
  flipped[kRemoteHeaderBytes + 100] = static_cast<char>(flipped[kRemoteHeaderBytes + 100] ^ 1);
  RedisCommand set2{{"SET", k2, flipped}, 1};
  ASSERT_TRUE((*cluster)->Run(std::span(&set2, 1))[0].ok());
  EXPECT_EQ(store->ReadLeading(ns, std::span(keys).subspan(2), std::span(outs).subspan(2)), 0u);
  // Garbage, and a value of the wrong length.
  redis_->ClusterCli({"SET", k3, "garbage"});
  EXPECT_EQ(store->ReadLeading(ns, std::span(keys).subspan(3), std::span(outs).subspan(3)), 0u);
  EXPECT_EQ(store->stats().corrupt, 3u);
  EXPECT_EQ(store->ReadLeading(ns, keys, outs), 1u);  // keys[0] is intact
  EXPECT_EQ(bufs[0], Payload(keys[0], bytes));
}

TEST_F(RemoteStoreTest, RefusesANodeWithAnotherDeploymentSecret) {
  auto first = Open(&SystemClock(), Secret(1));
  ASSERT_NE(first, nullptr);
  RemoteStoreOptions o;
  o.redis = OptionsFor(*redis_);
  o.key_prefix = Prefix();
  auto second = RemoteStore::Open(o, Secret(2));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("another deployment secret"), std::string::npos);
  auto same = RemoteStore::Open(o, Secret(1));
  EXPECT_TRUE(same.ok());
  o.key_prefix = Prefix() + "-other-deployment";
  EXPECT_TRUE(RemoteStore::Open(o, Secret(2)).ok());
}

TEST_F(RemoteStoreDownTest, AClusterGoneTurnsIntoMissesAndAPauseThatRetriesByItself) {
  ManualClock clock(1'000 * kNsPerSec);
  auto store = Open(&clock);
  const RemoteNamespace ns = Ns();
  const size_t bytes = ns.layout.BlockBytes();
  const std::vector<BlockKey> keys = Chain(4, 8);
  for (const BlockKey& k : keys) ASSERT_TRUE(store->Write(ns, k, Payload(k, bytes)).ok());
  redis_->KillAll();
  std::vector<std::vector<std::byte>> bufs(keys.size(), std::vector<std::byte>(bytes));
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  EXPECT_EQ(store->ReadLeading(ns, keys, outs), 0u);
  EXPECT_TRUE(store->paused());
  EXPECT_EQ(store->stats().pauses, 1u);
  const uint64_t errors = store->stats().errors;
  // Paused: answered at once, without asking the (dead) cluster.
  EXPECT_EQ(store->CountLeading(ns.id, keys), 0u);
  EXPECT_EQ(store->Write(ns, keys[0], bufs[0]).code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->stats().errors, errors);
  // After the pause it tries again (and pauses again: still gone).
  clock.Advance(6 * kNsPerSec);
  EXPECT_EQ(store->CountLeading(ns.id, keys), 0u);
  EXPECT_GT(store->stats().errors, errors);
  EXPECT_EQ(store->stats().pauses, 2u);
}

TEST(RemoteStoreFailoverTest, AKilledMasterGivesMissesNeverWrongBytesAndWritesResume) {
  RedisClusterSpec spec;
  spec.replicas_per_master = 1;
  auto redis = RedisHarness::Start(spec);
  ASSERT_NE(redis, nullptr);
  RemoteStoreOptions o;
  o.redis = OptionsFor(*redis);
  o.pause_ns = 200 * kNsPerMs;
  o.negative_ttl_ns = 0;
  auto store = RemoteStore::Open(o, Secret(9));
  ASSERT_TRUE(store.ok());
  const RemoteNamespace ns{RemoteNamespaceId("m", "", SmallLayout()), SmallLayout()};
  const size_t bytes = ns.layout.BlockBytes();
  const std::vector<BlockKey> keys = Chain(5, 200);
  for (const BlockKey& k : keys) ASSERT_TRUE((*store)->Write(ns, k, Payload(k, bytes)).ok());
  const int victim = redis->MasterOf(KeySlot((*store)->KeyOf(ns.id, keys[0])));
  ASSERT_GE(victim, 0);
  redis->Kill(victim);
  // Until the replica takes over: reads are misses or the right bytes.
  size_t wrong = 0;
  bool healthy = false;
  for (int round = 0; round < 100 && !healthy; ++round) {
    for (size_t i = 0; i < keys.size(); i += 10) {
      std::vector<std::byte> buf(bytes);
      std::span<std::byte> out(buf);
      if ((*store)->ReadLeading(ns, std::span(&keys[i], 1), std::span(&out, 1)) == 1 &&
          buf != Payload(keys[i], bytes)) {
        ++wrong;
      }
    }
    healthy = redis->MasterOf(KeySlot((*store)->KeyOf(ns.id, keys[0]))) >= 0 &&
              redis->MasterOf(KeySlot((*store)->KeyOf(ns.id, keys[0]))) != victim;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(wrong, 0u);
  ASSERT_TRUE(healthy) << "the replica was not promoted:\n"
                       << redis->Cli((victim + 1) % redis->nodes(), {"CLUSTER", "NODES"});
  ASSERT_TRUE(redis->WaitHealthy());
  // Writes resume after the failover, once the pause has run out.
  bool wrote = false;
  for (int attempt = 0; attempt < 50 && !wrote; ++attempt) {
    wrote = (*store)->Write(ns, keys[0], Payload(keys[0], bytes)).ok();
    if (!wrote) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(wrote);
  std::vector<std::byte> buf(bytes);
  std::span<std::byte> out(buf);
  EXPECT_EQ((*store)->ReadLeading(ns, std::span(&keys[0], 1), std::span(&out, 1)), 1u);
  EXPECT_EQ(buf, Payload(keys[0], bytes));
}

TEST_F(RemoteStoreDownTest, AMasterKilledWithoutAReplicaGivesMissesNeverWrongBytes) {
  RemoteStoreOptions o;
  o.redis = OptionsFor(*redis_);
  o.pause_ns = 100 * kNsPerMs;
  o.negative_ttl_ns = 0;
  o.key_prefix = Prefix();
  auto store = RemoteStore::Open(o, Secret(4));
  ASSERT_TRUE(store.ok());
  const RemoteNamespace ns = Ns();
  const size_t bytes = ns.layout.BlockBytes();
  const std::vector<BlockKey> keys = Chain(8, 120);
  for (const BlockKey& k : keys) ASSERT_TRUE((*store)->Write(ns, k, Payload(k, bytes)).ok());
  redis_->Kill(redis_->MasterOf(KeySlot((*store)->KeyOf(ns.id, keys[0]))));
  // No replica takes over: the dead master's keys are gone for good, and
  // once the others notice, the cluster refuses every key (CLUSTERDOWN).
  size_t wrong = 0, hits = 0;
  for (int round = 0; round < 30; ++round) {
    for (size_t i = 0; i < keys.size(); i += 7) {
      std::vector<std::byte> buf(bytes);
      std::span<std::byte> out(buf);
      if ((*store)->ReadLeading(ns, std::span(&keys[i], 1), std::span(&out, 1)) == 1) {
        ++hits;
        wrong += buf != Payload(keys[i], bytes) ? 1u : 0u;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT((*store)->stats().errors, 0u);
  EXPECT_GT((*store)->stats().pauses, 0u);
  // A write to a dead slot fails cleanly, never hangs past the timeouts.
  EXPECT_FALSE((*store)->Write(ns, keys[0], Payload(keys[0], bytes)).ok());
}

TEST(RemoteStoreMaxmemoryTest, AFullClusterEvictsOurValuesAsMissesWithoutErrors) {
  RedisClusterSpec spec;
  spec.maxmemory = "4mb";
  auto redis = RedisHarness::Start(spec);
  ASSERT_NE(redis, nullptr);
  RemoteStoreOptions o;
  o.redis = OptionsFor(*redis);
  auto store = RemoteStore::Open(o, Secret(3));
  ASSERT_TRUE(store.ok());
  Layout big = SmallLayout();
  big.block_tokens = 256;  // 32 KiB blocks; 1,000 of them far exceed 3 x 4 MiB
  const RemoteNamespace ns{RemoteNamespaceId("m", "", big), big};
  const std::vector<BlockKey> keys = Chain(6, 1000);
  size_t failed = 0;
  for (const BlockKey& k : keys)
    failed += (*store)->Write(ns, k, Payload(k, big.BlockBytes())).ok() ? 0u : 1u;
  EXPECT_EQ(failed, 0u);
  EXPECT_FALSE((*store)->paused());
  size_t hits = 0, wrong = 0;
  for (const BlockKey& k : keys) {
    std::vector<std::byte> buf(big.BlockBytes());
    std::span<std::byte> out(buf);
    if ((*store)->ReadLeading(ns, std::span(&k, 1), std::span(&out, 1)) == 1) {
      ++hits;
      wrong += buf != Payload(k, big.BlockBytes()) ? 1u : 0u;
    }
  }
  EXPECT_GT(hits, 0u);
  EXPECT_LT(hits, keys.size());  // evicted by the cluster: misses
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ((*store)->stats().errors, 0u);
}

}  // namespace
}  // namespace kvtier::tiers::internal

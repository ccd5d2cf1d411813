// Sealed values on the remote tier, against a real Redis Cluster: what a
// node with block keys writes holds no plaintext, and what a Redis node
// returns is served only when it is exactly the block asked for, sealed
// under a key of the ring and fresh. Each attack a node (or whoever writes to
// it) could make is tried here: another namespace's or key's value with its
// header rewritten to pass, changed bytes, garbage, a value in the clear, a
// stale value, a forged write time, a rotated-out key. Every one is a miss,
// counted by cause, and the store keeps serving the intact blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "support/redis_harness.h"
#include "tiers/block_seal.h"
#include "tiers/internal/remote_store.h"
#include "tiers/remote_blocks.h"

namespace kvtier::tiers::internal {
namespace {

using kvtier::testing::RedisHarness;

std::shared_ptr<BlockSealer> Sealer(const std::string& ring) {
  Result<KeyRing> keys = KeyRing::Parse(ring);
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return std::make_shared<BlockSealer>(*std::move(keys));
}
const std::string kKey1 = "1:" + std::string(64, 'a');
const std::string kKey2 = "2:" + std::string(64, 'b');

RemoteNamespace NsOf(const std::string& model, const std::string& salt) {
  const Layout l = SmallLayout();
  return {RemoteNamespaceId(model, salt, l), l, NamespaceFingerprint(model, salt, l.ToString())};
}

class RemoteSealTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { shared_ = RedisHarness::Start().release(); }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(shared_, nullptr); }
  static std::string Prefix() {
    return std::string("s-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  RemoteStoreOptions Options(std::shared_ptr<BlockSealer> sealer) {
    RemoteStoreOptions o;
    for (const std::string& s : shared_->seeds()) o.redis.seeds.push_back(*ParseEndpoint(s));
    o.redis.command_timeout = std::chrono::milliseconds(2000);
    o.key_prefix = Prefix();
    o.sealer = std::move(sealer);
    o.unix_seconds = [this] { return now_s_; };
    return o;
  }
  std::unique_ptr<RemoteStore> Open(std::shared_ptr<BlockSealer> sealer, uint64_t max_age_s = 0) {
    RemoteStoreOptions o = Options(std::move(sealer));
    o.max_age_s = max_age_s;
    auto store = RemoteStore::Open(o, std::vector<std::byte>(32, std::byte{7}));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store ? std::move(*store) : nullptr;
  }
  // The raw value of a block, and a way to put any bytes there.
  std::string Get(const std::string& name) {
    RedisCommand get{{"GET", name}, 1};
    auto r = Cluster().Run(std::span(&get, 1));
    EXPECT_TRUE(r[0].ok());
    return r[0].ok() ? std::string(r[0]->str()) : std::string();
  }
  void Set(const std::string& name, const std::string& value) {
    RedisCommand set{{"SET", name, value}, 1};
    auto r = Cluster().Run(std::span(&set, 1));
    ASSERT_TRUE(r[0].ok());
  }
  RedisCluster& Cluster() {
    if (!cluster_) {
      RedisOptions o;
      for (const std::string& s : shared_->seeds()) o.seeds.push_back(*ParseEndpoint(s));
      cluster_ = std::move(*RedisCluster::Connect(o));
    }
    return *cluster_;
  }
  // Whether `store` serves `key` of `ns`, and then with exactly its bytes.
  static bool Serves(RemoteStore& store, const RemoteNamespace& ns, const BlockKey& key) {
    std::vector<std::byte> buf(ns.layout.BlockBytes());
    std::span<std::byte> out(buf);
    if (store.ReadLeading(ns, std::span(&key, 1), std::span(&out, 1)) != 1) return false;
    EXPECT_EQ(buf, Payload(key, buf.size())) << "a wrong byte was served";
    return true;
  }

  static RedisHarness* shared_;
  std::unique_ptr<RedisCluster> cluster_;
  uint64_t now_s_ = 1'800'000'000;
};

RedisHarness* RemoteSealTest::shared_ = nullptr;

TEST(RemoteSealValueTest, ASealedValueOpensOnlyAsItsBlockAndHoldsNoPlaintext) {
  auto sealer = Sealer(kKey1);
  const RemoteNamespace ns = NsOf("m", "");
  const BlockKey key{7, 9};
  const std::vector<std::byte> payload = Payload(key, ns.layout.BlockBytes());
  std::vector<std::byte> header(kSealedRemoteHeaderBytes), body(payload.size()),
      tag(kSealedRemoteTrailerBytes);
  ASSERT_TRUE(SealRemoteValue(*sealer, ns, key, 1000, payload, body, header, tag).ok());
  EXPECT_EQ(header[4], std::byte{kSealedRemoteFormatVersion});
  // No 16-byte run of the plaintext is left in the ciphertext.
  EXPECT_EQ(std::search(body.begin(), body.end(), payload.begin() + 64, payload.begin() + 80),
            body.end());
  RemoteFault fault = RemoteFault::kOther;
  std::vector<std::byte> opened = body;
  ASSERT_TRUE(OpenRemoteValue(*sealer, header, ns, key, opened, tag, 1000, 0, &fault).ok());
  EXPECT_EQ(fault, RemoteFault::kNone);
  EXPECT_EQ(opened, payload);
  // Another namespace (the same id field, another fingerprint: a forged
  // header), another key, a flipped bit: none opens.
  RemoteNamespace forged = ns;
  forged.fingerprint = NamespaceFingerprint("m", "tenant-b", ns.layout.ToString());
  opened = body;
  EXPECT_EQ(OpenRemoteValue(*sealer, header, forged, key, opened, tag, 1000, 0, &fault).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(fault, RemoteFault::kOther);
  opened = body;
  opened[3] ^= std::byte{1};
  EXPECT_EQ(OpenRemoteValue(*sealer, header, ns, key, opened, tag, 1000, 0, &fault).code(),
            StatusCode::kCorruption);
  // The header's tag field is zero (the tag trails): anything else is
  // refused, so no byte of a value goes unchecked.
  std::vector<std::byte> marked = header;
  marked[kSealedRemoteHeaderBytes - 1] ^= std::byte{1};
  opened = body;
  EXPECT_EQ(OpenRemoteValue(*sealer, marked, ns, key, opened, tag, 1000, 0, &fault).code(),
            StatusCode::kCorruption);
  // Stale: older than max_age, before any decryption.
  opened = body;
  EXPECT_EQ(OpenRemoteValue(*sealer, header, ns, key, opened, tag, 1000 + 61, 60, &fault).code(),
            StatusCode::kCorruption);
  EXPECT_EQ(fault, RemoteFault::kStale);
  opened = body;
  EXPECT_TRUE(OpenRemoteValue(*sealer, header, ns, key, opened, tag, 1000 + 60, 60, &fault).ok());
}

TEST_F(RemoteSealTest, BlocksRoundTripSealedAndTheClusterHoldsNoPlaintext) {
  auto store = Open(Sealer(kKey1));
  ASSERT_NE(store, nullptr);
  const RemoteNamespace ns = NsOf("m", "");
  const size_t bytes = ns.layout.BlockBytes();
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 20; ++i) keys.push_back({100 + i, ~i});
  for (const BlockKey& k : keys) ASSERT_TRUE(store->Write(ns, k, Payload(k, bytes)).ok());
  EXPECT_EQ(store->CountLeading(ns.id, keys), keys.size());
  std::vector<std::vector<std::byte>> bufs(keys.size(), std::vector<std::byte>(bytes));
  std::vector<std::span<std::byte>> outs(bufs.begin(), bufs.end());
  ASSERT_EQ(store->ReadLeading(ns, keys, outs), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(bufs[i], Payload(keys[i], bytes)) << i;
  const std::string raw = Get(store->KeyOf(ns.id, keys[0]));
  ASSERT_EQ(raw.size(), kSealedRemoteHeaderBytes + bytes + kSealedRemoteTrailerBytes);
  const std::vector<std::byte> plain = Payload(keys[0], bytes);
  const std::string_view needle(reinterpret_cast<const char*>(plain.data()) + 100, 16);
  EXPECT_EQ(raw.find(needle), std::string::npos);
  EXPECT_EQ(store->stats().corrupt, 0u);
  // A second node with the same keys (another writer id) reads them.
  auto other = Open(Sealer(kKey1));
  EXPECT_TRUE(Serves(*other, ns, keys[5]));
}

TEST_F(RemoteSealTest, EveryValueThatIsNotItsBlockIsAMissCountedByCause) {
  const uint64_t max_age = 3600;
  auto store = Open(Sealer(kKey1), max_age);
  ASSERT_NE(store, nullptr);
  const RemoteNamespace ns = NsOf("m", ""), other_ns = NsOf("m", "tenant-b");
  const size_t bytes = ns.layout.BlockBytes();
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 10; ++i) keys.push_back({200 + i, i * 31});
  for (const BlockKey& k : keys) ASSERT_TRUE(store->Write(ns, k, Payload(k, bytes)).ok());
  // Writes with a max age ask Redis to expire the values too.
  const std::string ttl = shared_->ClusterCli({"TTL", store->KeyOf(ns.id, keys[0])});
  EXPECT_GT(std::stoll(ttl), 0) << ttl;
  EXPECT_LE(std::stoll(ttl), static_cast<long long>(max_age));
  auto name = [&](size_t i) { return store->KeyOf(ns.id, keys[i]); };

  // 1. Another namespace's value of the same block key, its header's
  //    namespace id rewritten to this one's: only the seal can tell.
  ASSERT_TRUE(store->Write(other_ns, keys[1], Payload(keys[0], bytes)).ok());
  std::string foreign = Get(store->KeyOf(other_ns.id, keys[1]));
  for (size_t b = 0; b < 8; ++b) foreign[8 + b] = static_cast<char>(ns.id >> (8 * b));
  Set(name(1), foreign);
  // 2. Another key's value, its header's key rewritten.
  std::string moved = Get(name(3));
  for (size_t b = 0; b < 8; ++b) {
    moved[16 + b] = static_cast<char>(keys[2].hi >> (8 * b));
    moved[24 + b] = static_cast<char>(keys[2].lo >> (8 * b));
  }
  Set(name(2), moved);
  // 3. The right length, one ciphertext byte changed.
  std::string flipped = Get(name(3));
  flipped[kSealedRemoteHeaderBytes + 7] =
      static_cast<char>(flipped[kSealedRemoteHeaderBytes + 7] ^ 4);
  Set(name(3), flipped);
  // 4. The right length, the tag changed.
  std::string tagged = Get(name(4));
  tagged.back() = static_cast<char>(tagged.back() ^ 1);  // the tag trails the ciphertext
  Set(name(4), tagged);
  // 5. Garbage.
  Set(name(5), "garbage");
  // 6. The block in the clear (a node without keys, or someone writing one):
  //    the right bytes, but not sealed.
  const std::vector<std::byte> clear = EncodeRemoteValue(ns, keys[6], Payload(keys[6], bytes));
  Set(name(6), std::string(reinterpret_cast<const char*>(clear.data()), clear.size()));
  for (size_t i = 1; i <= 6; ++i) EXPECT_FALSE(Serves(*store, ns, keys[i])) << "attack " << i;
  RemoteStats s = store->stats();
  EXPECT_EQ(s.corrupt, 6u);
  EXPECT_EQ(s.corrupt_sealing, 1u);  // the clear value
  EXPECT_EQ(s.corrupt_stale, 0u);
  // 7. Stale: a value sealed longer than max_age ago, replayed (as a
  //    restored snapshot of a node would return it).
  const uint64_t written = now_s_;
  const std::string old7 = Get(name(7));
  // 8. The same, its write time rewritten to look fresh.
  std::string forged8 = Get(name(8));
  now_s_ += max_age + 10;
  for (size_t b = 0; b < 8; ++b) forged8[64 + b] = static_cast<char>(now_s_ >> (8 * b));
  Set(name(7), old7);
  Set(name(8), forged8);
  ASSERT_GT(now_s_ - written, max_age);
  EXPECT_FALSE(Serves(*store, ns, keys[7]));
  EXPECT_FALSE(Serves(*store, ns, keys[8]));
  s = store->stats();
  EXPECT_EQ(s.corrupt, 8u);
  EXPECT_EQ(s.corrupt_stale, 1u);  // the replayed old one; the forged one does not open
  EXPECT_EQ(s.read_hits, 0u);
  // The store keeps serving: keys[0] was untouched (written before the
  // clock moved, so it is stale too now); a fresh write of it is served.
  EXPECT_FALSE(Serves(*store, ns, keys[0]));
  ASSERT_TRUE(store->Write(ns, keys[0], Payload(keys[0], bytes)).ok());
  EXPECT_TRUE(Serves(*store, ns, keys[0]));
  // keys[9], rewritten fresh, is served by a node whose clock is the same.
  ASSERT_TRUE(store->Write(ns, keys[9], Payload(keys[9], bytes)).ok());
  EXPECT_TRUE(Serves(*store, ns, keys[9]));
}

// Blocks of several parts (each sealed just before it is sent) written
// while slots move: a redirected SET is sent again, whole, and every block
// reads back byte-exact.
TEST_F(RemoteSealTest, BlocksSealedAsTheyAreSentSurviveRedirections) {
  auto store = Open(Sealer(kKey1));
  ASSERT_NE(store, nullptr);
  const Layout l = SmallLayout(1024);  // 128 KiB blocks: two parts each
  const RemoteNamespace ns{RemoteNamespaceId("m", "", l), l,
                           NamespaceFingerprint("m", "", l.ToString())};
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < 120; ++i) keys.push_back({500 + i, i * 13});
  std::atomic<bool> done{false};
  std::atomic<size_t> failed{0};
  std::thread writer([&] {
    while (!done.load()) {
      for (const BlockKey& k : keys) {
        if (!store->Write(ns, k, Payload(k, l.BlockBytes())).ok()) ++failed;
      }
    }
  });
  const bool moved = shared_->Reshard(1, 2, 300);
  done.store(true);
  writer.join();
  ASSERT_TRUE(moved);
  EXPECT_EQ(failed.load(), 0u);
  for (const BlockKey& k : keys) ASSERT_TRUE(store->Write(ns, k, Payload(k, l.BlockBytes())).ok());
  size_t served = 0;
  for (const BlockKey& k : keys) served += Serves(*store, ns, k) ? 1u : 0u;
  EXPECT_EQ(served, keys.size());
  EXPECT_EQ(store->stats().corrupt, 0u);
}

TEST_F(RemoteSealTest, RotationOpensOldValuesAndARotatedOutKeyIsAMiss) {
  const RemoteNamespace ns = NsOf("m", "");
  const size_t bytes = ns.layout.BlockBytes();
  const BlockKey old_key{300, 1}, new_key{301, 2};
  auto before = Open(Sealer(kKey1));
  ASSERT_TRUE(before->Write(ns, old_key, Payload(old_key, bytes)).ok());
  // Key 2 current, key 1 still in the ring: the old value opens, new ones
  // are sealed under key 2.
  auto rotated = Open(Sealer(kKey2 + "," + kKey1));
  EXPECT_TRUE(Serves(*rotated, ns, old_key));
  ASSERT_TRUE(rotated->Write(ns, new_key, Payload(new_key, bytes)).ok());
  const std::string raw = Get(rotated->KeyOf(ns.id, new_key));
  EXPECT_EQ(static_cast<uint8_t>(raw[kRemoteHeaderBytes + 4]), 2u);  // the seal's key id
  // Key 1 gone: its values are misses, by cause "sealing"; key 2's open.
  auto after = Open(Sealer(kKey2));
  EXPECT_FALSE(Serves(*after, ns, old_key));
  EXPECT_EQ(after->stats().corrupt_sealing, 1u);
  EXPECT_TRUE(Serves(*after, ns, new_key));
  // The wrong key entirely (the same id, other bytes): a miss, never a crash.
  auto wrong = Open(Sealer("2:" + std::string(64, 'c')));
  EXPECT_FALSE(Serves(*wrong, ns, new_key));
  EXPECT_EQ(wrong->stats().corrupt, 1u);
}

TEST_F(RemoteSealTest, ANodeWithoutKeysIsRefusedWhereTheBlocksAreSealed) {
  RemoteStoreOptions clear = Options(nullptr);
  // Before any sealed node: a clear node opens (today's behaviour).
  auto early = RemoteStore::Open(clear, std::vector<std::byte>(32, std::byte{7}));
  ASSERT_TRUE(early.ok());
  auto sealed = Open(Sealer(kKey1));
  ASSERT_NE(sealed, nullptr);
  auto refused = RemoteStore::Open(clear, std::vector<std::byte>(32, std::byte{7}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("sealed"), std::string::npos)
      << refused.status().ToString();
  // The clear node that was already running and the sealed one never serve
  // each other's values: misses, by cause "sealing".
  const RemoteNamespace ns = NsOf("m", "");
  const size_t bytes = ns.layout.BlockBytes();
  const BlockKey a{400, 1}, b{401, 2};
  ASSERT_TRUE((*early)->Write(ns, a, Payload(a, bytes)).ok());
  ASSERT_TRUE(sealed->Write(ns, b, Payload(b, bytes)).ok());
  EXPECT_FALSE(Serves(*sealed, ns, a));
  EXPECT_FALSE(Serves(**early, ns, b));
  EXPECT_EQ(sealed->stats().corrupt_sealing, 1u);
  EXPECT_EQ((*early)->stats().corrupt_sealing, 1u);
}

}  // namespace
}  // namespace kvtier::tiers::internal

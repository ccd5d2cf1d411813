// The engine with a remote tier on a real Redis Cluster: two engines (two
// nodes) sharing it, write-back and write-through, lookups and acquires
// that reach the cluster, values gone wrong, and the block events.
#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "engine/cache_engine.h"
#include "engine_test_util.h"
#include "quantize_test_util.h"
#include "support/redis_harness.h"
#include "tiers/internal/redis_cluster.h"
#include "tiers/remote_tier.h"

namespace kvtier::engine {
namespace {

using kvtier::testing::RedisHarness;
using testing::Chain;
using testing::Fill;
using testing::Matches;
using testing::SmallLayout;

constexpr uint64_t kBlock = 4096;

// One node: a host tier of `host_blocks`, the shared cluster below it, and
// a manual executor that runs the remote calls when the test says.
struct Node {
  ManualExecutor remote_io;
  std::unique_ptr<CacheEngine> engine;
  NamespaceId ns = 0;

  ~Node() { remote_io.RunAll(); }
  // Runs the remote calls queued so far (and those their completions queue).
  void Settle() { remote_io.RunAll(); }
};

class RemoteEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = RedisHarness::Start().release(); }
  static void TearDownTestSuite() {
    delete redis_;
    redis_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(redis_, nullptr); }

  std::unique_ptr<Node> MakeNode(uint64_t host_blocks, bool write_through = false,
                                 bool events = false, Layout layout = SmallLayout(),
                                 Quantize quantize_lower = Quantize::kOff) {
    auto node = std::make_unique<Node>();
    tiers::RemoteTierOptions ro;
    ro.seeds = redis_->seeds();
    // Each test its own deployment: nothing leaks between tests.
    ro.key_prefix =
        std::string("t-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto remote = tiers::NewRemoteTier(ro, std::vector<std::byte>(32, std::byte{5}));
    EXPECT_TRUE(remote.ok()) << remote.status().ToString();
    const uint64_t block = AlignUp(layout.BlockBytes(), kBlock);
    auto host = tiers::NewHostTier({host_blocks * block, 16 * block, false});
    EXPECT_TRUE(host.ok());
    EngineOptions o;
    o.remote_io = &node->remote_io;
    o.remote_write_through = write_through;
    o.record_events = events;
    auto engine = CacheEngine::Create(o, nullptr, std::move(host).value(), nullptr,
                                      std::move(remote).value());
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    node->engine = std::move(engine).value();
    node->ns = *node->engine->AddNamespace({"model", "", layout, quantize_lower});
    return node;
  }

  static LookupResult LookUp(Node& n, std::span<const BlockKey> keys) {
    LookupResult out;
    n.engine->LookupAsync(n.ns, keys, [&](Result<LookupResult> r) {
      ASSERT_TRUE(r.ok());
      out = *r;
    });
    n.Settle();
    return out;
  }

  // Acquires in the host and checks every leased block's bytes.
  static size_t AcquireChecked(Node& n, std::span<const BlockKey> keys) {
    size_t got = 0;
    n.engine->AcquireAsync(n.ns, keys, TierKind::kHost, [&](Result<Lease> lease) {
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      for (size_t i = 0; i < lease->size(); ++i) {
        EXPECT_TRUE(Matches(lease->Bytes(i), keys[i])) << "block " << i;
      }
      got = lease->size();
    });
    n.Settle();
    return got;
  }

  static size_t Write(Node& n, std::span<const BlockKey> keys) {
    auto a = n.engine->Allocate(n.ns, std::nullopt, keys, TierKind::kHost);
    if (!a.ok()) return 0;
    for (size_t i = 0; i < a->size(); ++i) {
      if (a->state(i) == WriteState::kAllocated) Fill(a->Bytes(i), keys[i]);
    }
    const size_t n_written = a->allocated();
    EXPECT_TRUE(a->Commit().ok());
    n.Settle();
    return n_written;
  }

  static RedisHarness* redis_;
};

RedisHarness* RemoteEngineTest::redis_ = nullptr;

TEST_F(RemoteEngineTest, WriteBackPublishesWhatLeavesTheHostAndAnotherNodeReadsIt) {
  auto a = MakeNode(/*host_blocks=*/4);
  auto b = MakeNode(/*host_blocks=*/16);
  const std::vector<BlockKey> keys = Chain(1, 4);
  ASSERT_EQ(Write(*a, keys), 4u);
  // Nothing has left A's memory: B finds nothing.
  EXPECT_EQ(LookUp(*b, keys).hits, 0u);
  // Another chain fills A's host: the first chain is evicted, written out.
  ASSERT_EQ(Write(*a, Chain(2, 4)), 4u);
  EXPECT_EQ(a->engine->Stats().remote_written_blocks, 4u);
  // B's negative cache (1 s) remembers the miss above; a fresh node asks.
  auto c = MakeNode(16);
  const LookupResult found = LookUp(*c, keys);
  EXPECT_EQ(found.hits, 4u);
  EXPECT_EQ(found.tiers, std::vector<TierKind>(4, TierKind::kRemote));
  EXPECT_EQ(AcquireChecked(*c, keys), 4u);
  // Now in C's host tier.
  const LookupResult local = LookUp(*c, keys);
  EXPECT_EQ(local.tiers, std::vector<TierKind>(4, TierKind::kHost));
  EXPECT_EQ(c->engine->Stats().remote_fetched_blocks, 4u);
  // The namespace's hits name the tier that supplied them: the cluster, not
  // the host the blocks were read into; a second acquire finds them in the host.
  const EngineStats first = c->engine->Stats();
  const NamespaceUse& use = first.namespace_use.at(c->ns);
  EXPECT_EQ(use.hit_blocks[static_cast<size_t>(TierKind::kRemote)], 4u);
  EXPECT_EQ(use.hit_blocks[static_cast<size_t>(TierKind::kHost)], 0u);
  EXPECT_EQ(AcquireChecked(*c, keys), 4u);
  const EngineStats second = c->engine->Stats();
  const NamespaceUse& again = second.namespace_use.at(c->ns);
  EXPECT_EQ(again.hit_blocks[static_cast<size_t>(TierKind::kRemote)], 4u);
  EXPECT_EQ(again.hit_blocks[static_cast<size_t>(TierKind::kHost)], 4u);
  EXPECT_TRUE(c->engine->CheckInvariants().ok());
}

TEST_F(RemoteEngineTest, QuantizedNodesShareFp8BlocksAndNeverWithExactOnes) {
  const Layout l = testing::ValueLayout(DType::kBFloat16);
  const Quantize q = Quantize::kFp8E4M3;
  auto a = MakeNode(4, false, false, l, q);
  const std::vector<BlockKey> keys = Chain(1, 4);
  std::map<BlockKey, std::vector<std::byte>> originals;
  for (const auto& chain : {keys, Chain(2, 4)}) {  // the second pushes the first out
    auto alloc = a->engine->Allocate(a->ns, std::nullopt, chain, TierKind::kHost);
    ASSERT_TRUE(alloc.ok());
    for (size_t i = 0; i < chain.size(); ++i) {
      testing::FillValues(alloc->Bytes(i), l, chain[i]);
      originals[chain[i]].assign(alloc->Bytes(i).begin(), alloc->Bytes(i).end());
    }
    ASSERT_TRUE(alloc->Commit().ok());
    a->Settle();
  }
  EngineStats sa = a->engine->Stats();
  EXPECT_EQ(sa.remote_written_blocks, 4u);
  EXPECT_EQ(sa.quantized_blocks, 4u);
  EXPECT_EQ(sa.remote.bytes_written, 4 * StoredLayout(l, q).BlockBytes());  // half, plus scales

  // A node that keeps the model in fp8 too reads them, within the bound.
  auto b = MakeNode(16, false, false, l, q);
  size_t got = 0;
  b->engine->AcquireAsync(b->ns, keys, TierKind::kHost, [&](Result<Lease> lease) {
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    got = lease->size();
    for (size_t i = 0; i < lease->size(); ++i) {
      EXPECT_TRUE(testing::WithinFp8Bound(originals[keys[i]], lease->Bytes(i), l, q)) << i;
    }
  });
  b->Settle();
  EXPECT_EQ(got, 4u);
  EXPECT_EQ(b->engine->Stats().dequantized_blocks, 4u);
  // One that keeps it exact never sees them: they are not its blocks.
  auto exact = MakeNode(16, false, false, l, Quantize::kOff);
  EXPECT_EQ(LookUp(*exact, keys).hits, 0u);
}

TEST_F(RemoteEngineTest, AHintReadsAheadWhatOnlyTheClusterHoldsAndProtectsIt) {
  auto a = MakeNode(16, /*write_through=*/true);
  auto b = MakeNode(8);
  const std::vector<BlockKey> keys = Chain(8, 6);
  ASSERT_EQ(Write(*a, keys), 6u);
  // B holds the first two blocks itself; the hint protects them and reads
  // the other four up from the cluster.
  ASSERT_EQ(Write(*b, std::span(keys).first(2)), 2u);
  constexpr uint64_t kOwner = 7;
  // The engine's clock is the real one: a protection that never runs out.
  const TimeNs until = std::numeric_limits<TimeNs>::max() / 2;
  auto hinted = b->engine->Hint(kOwner, b->ns, keys, until);
  ASSERT_TRUE(hinted.ok()) << hinted.status().ToString();
  EXPECT_EQ(hinted->protected_blocks, 2u);
  b->Settle();
  EngineStats st = b->engine->Stats();
  EXPECT_EQ(st.remote_fetched_blocks, 4u);
  EXPECT_EQ(st.prefetched_blocks, 4u);
  EXPECT_EQ(b->engine->hinted_by(kOwner), 6u);  // the fetched four protected as they arrived
  // The hinted blocks stay while other writes fill B's host (8 blocks).
  ASSERT_EQ(Write(*b, Chain(9, 2)), 2u);
  EXPECT_EQ(LookUp(*b, keys).tiers, std::vector<TierKind>(6, TierKind::kHost));
  // The request comes: every block from the host, byte-exact, hints used.
  EXPECT_EQ(AcquireChecked(*b, keys), 6u);
  st = b->engine->Stats();
  EXPECT_EQ(st.remote_fetched_blocks, 4u);  // nothing read twice
  EXPECT_EQ(st.prefetched_used, 4u);
  EXPECT_EQ(st.hints_used, 6u);
  // Read ahead from the cluster, they count as remote hits; B's own two as host.
  EXPECT_EQ(st.namespace_use.at(b->ns).hit_blocks[static_cast<size_t>(TierKind::kRemote)], 4u);
  EXPECT_EQ(st.namespace_use.at(b->ns).hit_blocks[static_cast<size_t>(TierKind::kHost)], 2u);
  EXPECT_EQ(b->engine->hinted_by(kOwner), 0u);
  EXPECT_TRUE(b->engine->CheckInvariants().ok());

  // An owner gone before the blocks arrive: they come up, unhinted.
  auto c = MakeNode(8);
  ASSERT_TRUE(c->engine->Hint(kOwner, c->ns, keys, until).ok());
  c->engine->DropHints(kOwner);
  c->Settle();
  EXPECT_EQ(c->engine->Stats().remote_fetched_blocks, 6u);
  EXPECT_EQ(c->engine->hinted_by(kOwner), 0u);
  EXPECT_TRUE(c->engine->CheckInvariants().ok());
}

TEST_F(RemoteEngineTest, ALookupOrAcquireMeetingAReadAheadWaitsForItInsteadOfStoppingShort) {
  auto a = MakeNode(16, /*write_through=*/true);
  const std::vector<BlockKey> keys = Chain(10, 6);
  ASSERT_EQ(Write(*a, keys), 6u);
  const TimeNs until = std::numeric_limits<TimeNs>::max() / 2;

  // The request's hint has its blocks' host slots reserved and their read
  // queued when the request's lookup and acquire come (vLLM's scheduler
  // hints a request as it arrives and looks it up a moment later).
  auto b = MakeNode(16);
  ASSERT_TRUE(b->engine->Hint(1, b->ns, keys, until).ok());
  ASSERT_TRUE(b->remote_io.RunOne());  // how many the cluster holds: 6; the read is queued
  std::optional<LookupResult> found;
  b->engine->LookupAsync(b->ns, keys, [&](Result<LookupResult> r) {
    ASSERT_TRUE(r.ok());
    found = *r;
  });
  EXPECT_FALSE(found.has_value());  // waits for the read
  EXPECT_EQ(AcquireChecked(*b, keys), 6u);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->hits, 6u);
  EXPECT_EQ(b->engine->Stats().remote_fetched_blocks, 6u);  // read once, for both
  EXPECT_EQ(
      b->engine->Stats().namespace_use.at(b->ns).hit_blocks[static_cast<size_t>(TierKind::kRemote)],
      6u);
  EXPECT_TRUE(b->engine->CheckInvariants().ok());

  // An acquire that starts its own fetch while the hint's is asking the
  // cluster: the later of the two reads finds the slots taken and waits for
  // the other's blocks.
  auto c = MakeNode(16);
  ASSERT_TRUE(c->engine->Hint(1, c->ns, keys, until).ok());
  EXPECT_EQ(AcquireChecked(*c, keys), 6u);
  EXPECT_EQ(c->engine->Stats().remote_fetched_blocks, 6u);
  EXPECT_TRUE(c->engine->CheckInvariants().ok());
}

TEST_F(RemoteEngineTest, WriteThroughPublishesEveryCommitAtOnce) {
  auto a = MakeNode(16, /*write_through=*/true);
  auto b = MakeNode(16);
  const std::vector<BlockKey> keys = Chain(3, 6);
  ASSERT_EQ(Write(*a, keys), 6u);
  EXPECT_EQ(a->engine->Stats().remote_written_blocks, 6u);
  EXPECT_EQ(LookUp(*b, keys).hits, 6u);
  EXPECT_EQ(AcquireChecked(*b, keys), 6u);
  // B extends the chain locally: its lookup sees its own host blocks first.
  std::vector<BlockKey> longer = keys;
  longer.push_back(BlockKey{3, 100});
  const LookupResult r = LookUp(*b, longer);
  EXPECT_EQ(r.hits, 6u);
}

TEST_F(RemoteEngineTest, AnAcquireStopsAtTheFirstBlockTheClusterDoesNotHoldRight) {
  auto a = MakeNode(16, /*write_through=*/true);
  const std::vector<BlockKey> keys = Chain(4, 5);
  ASSERT_EQ(Write(*a, keys), 5u);
  // Block 2's value overwritten with block 3's: a well-formed value, the
  // wrong block.
  const std::string prefix =
      std::string("t-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const uint64_t ns_id = tiers::RemoteNamespaceId("model", "", SmallLayout());
  char ns_hex[17];
  std::snprintf(ns_hex, sizeof(ns_hex), "%016llx", static_cast<unsigned long long>(ns_id));
  const std::string k2 = prefix + ":" + ns_hex + ":" + keys[2].ToHex();
  const std::string k3 = prefix + ":" + ns_hex + ":" + keys[3].ToHex();
  tiers::internal::RedisOptions opts;
  for (const std::string& seed : redis_->seeds())
    opts.seeds.push_back(*tiers::internal::ParseEndpoint(seed));
  auto cluster = tiers::internal::RedisCluster::Connect(opts);
  ASSERT_TRUE(cluster.ok());
  tiers::internal::RedisCommand get{{"GET", k3}, 1};
  auto v3 = (*cluster)->Run(std::span(&get, 1));
  ASSERT_TRUE(v3[0].ok());
  const std::string value(v3[0]->str());
  tiers::internal::RedisCommand set{{"SET", k2, value}, 1};
  ASSERT_TRUE((*cluster)->Run(std::span(&set, 1))[0].ok());
  auto b = MakeNode(16);
  EXPECT_EQ(LookUp(*b, keys).hits, 5u);  // EXISTS cannot tell
  EXPECT_EQ(AcquireChecked(*b, keys), 2u);
  EXPECT_EQ(b->engine->Stats().remote.corrupt, 1u);
  EXPECT_EQ(b->engine->Stats().remote_fetched_blocks, 2u);
  EXPECT_TRUE(b->engine->CheckInvariants().ok());
}

TEST_F(RemoteEngineTest, RecordsStoredAndRemovedEventsPerTier) {
  auto a = MakeNode(2, /*write_through=*/false, /*events=*/true);
  const std::vector<BlockKey> keys = Chain(5, 2);
  ASSERT_EQ(Write(*a, keys), 2u);
  std::vector<BlockEvent> events;
  a->engine->TakeEvents(&events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, BlockEvent::Kind::kStored);
  EXPECT_EQ(events[0].tier, TierKind::kHost);
  EXPECT_EQ(events[0].key, keys[0]);
  EXPECT_FALSE(events[0].parent.has_value());
  EXPECT_EQ(events[1].key, keys[1]);
  ASSERT_TRUE(events[1].parent.has_value());
  EXPECT_EQ(*events[1].parent, keys[0]);
  // A second chain evicts the first: removed from the host, stored remote.
  ASSERT_EQ(Write(*a, Chain(6, 2)), 2u);
  a->engine->TakeEvents(&events);
  size_t removed_host = 0, stored_remote = 0, stored_host = 0;
  for (const BlockEvent& e : events) {
    if (e.kind == BlockEvent::Kind::kRemoved && e.tier == TierKind::kHost) ++removed_host;
    if (e.kind == BlockEvent::Kind::kStored && e.tier == TierKind::kRemote) ++stored_remote;
    if (e.kind == BlockEvent::Kind::kStored && e.tier == TierKind::kHost) ++stored_host;
  }
  EXPECT_EQ(removed_host, 2u);
  EXPECT_EQ(stored_remote, 2u);
  EXPECT_EQ(stored_host, 2u);
  a->engine->TakeEvents(&events);
  EXPECT_TRUE(events.empty());
}

}  // namespace
}  // namespace kvtier::engine

#include "engine/cache_engine.h"

#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace kvtier::engine {
namespace {

using testing::Chain;
using testing::MakeEngine;
using testing::Matches;
using testing::Put;
using testing::SmallLayout;

class CacheEngineTest : public ::testing::Test {
 protected:
  void Build(uint64_t device_blocks, uint64_t host_blocks) {
    engine_ = MakeEngine(device_blocks, host_blocks);
    auto ns = engine_->AddNamespace({"model-a", "", SmallLayout()});
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
  }
  void TearDown() override {
    if (engine_) {
      const Status s = engine_->CheckInvariants();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }
  size_t Hits(std::span<const BlockKey> keys) { return engine_->Lookup(ns_, keys)->hits; }
  const TierStats& Tier(TierKind k) {
    stats_ = engine_->Stats();
    return stats_.tiers[static_cast<size_t>(k)];
  }

  std::unique_ptr<CacheEngine> engine_;
  NamespaceId ns_ = 0;
  EngineStats stats_;
};

TEST_F(CacheEngineTest, CommittedBlocksAreFoundWithTheirBytes) {
  Build(0, 16);
  const auto keys = Chain(1, 4);
  EXPECT_EQ(Put(*engine_, ns_, keys), 4u);
  auto r = engine_->Lookup(ns_, keys);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hits, 4u);
  EXPECT_EQ(r->tiers, std::vector<TierKind>(4, TierKind::kHost));
  auto lease = engine_->Acquire(ns_, keys, TierKind::kHost);
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ(lease->size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(Matches(lease->Bytes(i), keys[i])) << i;
  EXPECT_EQ(Tier(TierKind::kHost).pinned_blocks, 4u);
}

TEST_F(CacheEngineTest, UncommittedBlocksAreInvisible) {
  Build(0, 16);
  const auto keys = Chain(1, 3);
  auto a = engine_->Allocate(ns_, std::nullopt, keys, TierKind::kHost);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->allocated(), 3u);
  EXPECT_EQ(Hits(keys), 0u);
  EXPECT_EQ(engine_->Acquire(ns_, keys, TierKind::kHost)->size(), 0u);
  // A second writer of the same chain is told someone else is writing it.
  auto b = engine_->Allocate(ns_, std::nullopt, keys, TierKind::kHost);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->allocated(), 0u);
  EXPECT_EQ(b->state(0), WriteState::kSkipped);
  b->Abort();
  EXPECT_EQ(engine_->Stats().pending_blocks, 3u);
  ASSERT_TRUE(a->Commit().ok());
  EXPECT_EQ(Hits(keys), 3u);
  EXPECT_EQ(engine_->Stats().pending_blocks, 0u);
}

TEST_F(CacheEngineTest, AbortFreesTheSlots) {
  Build(0, 16);
  auto a = engine_->Allocate(ns_, std::nullopt, Chain(1, 5), TierKind::kHost);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Tier(TierKind::kHost).used_bytes, 5u * 4096);
  a->Abort();
  EXPECT_FALSE(a->open());
  EXPECT_EQ(Tier(TierKind::kHost).used_bytes, 0u);
  EXPECT_EQ(Tier(TierKind::kHost).blocks, 0u);
  EXPECT_EQ(engine_->Stats().index_entries, 0u);
  EXPECT_EQ(engine_->Stats().aborted_blocks, 5u);
}

TEST_F(CacheEngineTest, DroppingAnAllocationAborts) {
  Build(0, 16);
  {
    auto a = engine_->Allocate(ns_, std::nullopt, Chain(1, 2), TierKind::kHost);
    ASSERT_TRUE(a.ok());
  }
  EXPECT_EQ(Tier(TierKind::kHost).used_bytes, 0u);
  EXPECT_EQ(engine_->Stats().open_allocations, 0u);
}

TEST_F(CacheEngineTest, ExistingKeysAreNotWrittenTwice) {
  Build(0, 16);
  const auto keys = Chain(1, 6);
  EXPECT_EQ(Put(*engine_, ns_, std::span(keys).first(3)), 3u);
  auto a = engine_->Allocate(ns_, std::nullopt, keys, TierKind::kHost);
  ASSERT_TRUE(a.ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a->state(i), WriteState::kExists);
  for (size_t i = 3; i < 6; ++i) EXPECT_EQ(a->state(i), WriteState::kAllocated);
  // The existing prefix stays pinned while the write is open.
  EXPECT_EQ(Tier(TierKind::kHost).pinned_blocks, 6u);
  a->Abort();
  EXPECT_EQ(Tier(TierKind::kHost).pinned_blocks, 0u);
  EXPECT_EQ(Hits(keys), 3u);
}

TEST_F(CacheEngineTest, ParentMustBeCached) {
  Build(0, 16);
  const auto keys = Chain(1, 4);
  auto missing = engine_->Allocate(ns_, keys[1], std::span(keys).subspan(2), TierKind::kHost);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Put(*engine_, ns_, std::span(keys).first(2)), 2u);
  auto a = engine_->Allocate(ns_, keys[1], std::span(keys).subspan(2), TierKind::kHost);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->allocated(), 2u);
  ASSERT_TRUE(a->Commit().ok());
  EXPECT_EQ(Hits(keys), 4u);
}

TEST_F(CacheEngineTest, ReleaseUnpinsAndLeasesAreRaii) {
  Build(0, 16);
  const auto keys = Chain(1, 3);
  Put(*engine_, ns_, keys);
  {
    auto lease = engine_->Acquire(ns_, keys, TierKind::kHost);
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(engine_->Stats().open_leases, 1u);
    auto moved = std::move(*lease);
    EXPECT_FALSE(lease->open());
    EXPECT_TRUE(moved.open());
  }
  EXPECT_EQ(engine_->Stats().open_leases, 0u);
  EXPECT_EQ(Tier(TierKind::kHost).pinned_blocks, 0u);
}

TEST_F(CacheEngineTest, CapacityIsNeverExceeded) {
  Build(4, 8);
  for (uint64_t stem = 1; stem <= 40; ++stem) {
    Put(*engine_, ns_, Chain(stem, 3), stem % 2 ? TierKind::kDevice : TierKind::kHost);
    const EngineStats s = engine_->Stats();
    for (const TierStats& t : s.tiers) {
      EXPECT_LE(t.used_bytes, t.capacity_bytes) << TierKindName(t.kind);
    }
    ASSERT_TRUE(engine_->CheckInvariants().ok()) << engine_->CheckInvariants().ToString();
  }
  EXPECT_EQ(Tier(TierKind::kDevice).used_bytes, 4u * 4096);
  EXPECT_EQ(Tier(TierKind::kHost).used_bytes, 8u * 4096);
  EXPECT_GT(engine_->Stats().dropped_blocks, 0u);
}

TEST_F(CacheEngineTest, PinnedBlocksAreNeverEvictedOrMoved) {
  Build(4, 8);
  const auto keys = Chain(1, 3);
  Put(*engine_, ns_, keys, TierKind::kDevice);
  auto lease = engine_->Acquire(ns_, keys, TierKind::kDevice);
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ(lease->size(), 3u);
  std::vector<BlockLocation> before;
  for (size_t i = 0; i < 3; ++i) before.push_back(lease->location(i));
  for (uint64_t stem = 2; stem < 30; ++stem) Put(*engine_, ns_, Chain(stem, 2), TierKind::kDevice);
  auto r = engine_->Lookup(ns_, keys);
  EXPECT_EQ(r->hits, 3u);
  EXPECT_EQ(r->tiers, std::vector<TierKind>(3, TierKind::kDevice));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lease->location(i).slot, before[i].slot);
    EXPECT_TRUE(Matches(lease->Bytes(i), keys[i]));
  }
}

TEST_F(CacheEngineTest, FullOfPinnedBlocksIsResourceExhausted) {
  Build(0, 4);
  const auto keys = Chain(1, 4);
  Put(*engine_, ns_, keys);
  auto lease = engine_->Acquire(ns_, keys, TierKind::kHost);
  ASSERT_EQ(lease->size(), 4u);
  auto a = engine_->Allocate(ns_, std::nullopt, Chain(2, 1), TierKind::kHost);
  EXPECT_EQ(a.status().code(), StatusCode::kResourceExhausted);
  // Partial room: the chain stops where room ran out.
  lease->Release();
  auto pin_two = engine_->Acquire(ns_, std::span(keys).first(2), TierKind::kHost);
  auto b = engine_->Allocate(ns_, std::nullopt, Chain(3, 4), TierKind::kHost);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->allocated(), 2u);
  EXPECT_EQ(b->state(2), WriteState::kSkipped);
  EXPECT_EQ(b->state(3), WriteState::kSkipped);
}

TEST_F(CacheEngineTest, DemotionKeepsBytesIdentical) {
  Build(4, 16);
  const auto keys = Chain(1, 4);
  EXPECT_EQ(Put(*engine_, ns_, keys, TierKind::kDevice), 4u);
  // Fill the device with other blocks: the first chain is demoted to host.
  for (uint64_t stem = 2; stem < 4; ++stem) Put(*engine_, ns_, Chain(stem, 2), TierKind::kDevice);
  auto r = engine_->Lookup(ns_, keys);
  EXPECT_EQ(r->hits, 4u);
  EXPECT_EQ(r->tiers, std::vector<TierKind>(4, TierKind::kHost));
  EXPECT_EQ(Tier(TierKind::kHost).demotions_in, 4u);
  EXPECT_EQ(Tier(TierKind::kDevice).evictions, 4u);
  auto lease = engine_->Acquire(ns_, keys, TierKind::kHost);
  ASSERT_EQ(lease->size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(Matches(lease->Bytes(i), keys[i])) << i;
}

TEST_F(CacheEngineTest, AcquirePromotesIntoTheAskedTier) {
  Build(4, 16);
  const auto keys = Chain(1, 3);
  Put(*engine_, ns_, keys, TierKind::kHost);
  auto lease = engine_->Acquire(ns_, keys, TierKind::kDevice);
  ASSERT_EQ(lease->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lease->location(i).tier, TierKind::kDevice);
    EXPECT_TRUE(Matches(lease->Bytes(i), keys[i]));
  }
  EXPECT_EQ(Tier(TierKind::kDevice).promotions_in, 3u);
  EXPECT_EQ(Tier(TierKind::kHost).blocks, 0u);  // one place at a time
  EXPECT_EQ(Tier(TierKind::kHost).hits, 3u);
}

TEST_F(CacheEngineTest, AcquireStopsWhereTheTargetTierHasNoRoom) {
  Build(2, 16);
  const auto keys = Chain(1, 4);
  Put(*engine_, ns_, keys, TierKind::kHost);
  auto lease = engine_->Acquire(ns_, keys, TierKind::kDevice);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->size(), 2u);  // the device holds two blocks
  EXPECT_EQ(Tier(TierKind::kDevice).pinned_blocks, 2u);
  EXPECT_EQ(Tier(TierKind::kHost).pinned_blocks, 0u);
}

TEST_F(CacheEngineTest, BlockLeasedInAnotherTierIsNotMoved) {
  Build(4, 16);
  const auto keys = Chain(1, 3);
  Put(*engine_, ns_, keys, TierKind::kHost);
  auto on_host = engine_->Acquire(ns_, std::span(keys).first(2), TierKind::kHost);
  ASSERT_EQ(on_host->size(), 2u);
  // A reader on the device cannot take the block another reads on the host.
  auto on_device = engine_->Acquire(ns_, keys, TierKind::kDevice);
  ASSERT_TRUE(on_device.ok());
  EXPECT_EQ(on_device->size(), 0u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(on_host->location(i).tier, TierKind::kHost);
    EXPECT_TRUE(Matches(on_host->Bytes(i), keys[i]));
  }
  on_host->Release();
  on_device = engine_->Acquire(ns_, keys, TierKind::kDevice);
  EXPECT_EQ(on_device->size(), 3u);
}

TEST_F(CacheEngineTest, EvictedParentMakesItsChildrenUnreachable) {
  Build(0, 6);
  const auto keys = Chain(1, 4);
  Put(*engine_, ns_, keys);
  // Removing the parent drops its descendants with it: they can never hit.
  EXPECT_EQ(*engine_->Remove(ns_, std::span(keys).first(1)), 1u);
  EXPECT_EQ(Hits(keys), 0u);
  EXPECT_EQ(Hits(std::span(keys).subspan(1)), 0u);
  EXPECT_EQ(engine_->Stats().orphan_drops, 3u);
  EXPECT_EQ(Tier(TierKind::kHost).used_bytes, 0u);
}

TEST_F(CacheEngineTest, ParentEvictedByPressureIsNotCountedInAPrefixHit) {
  Build(0, 4);
  const auto a = Chain(1, 2);
  Put(*engine_, ns_, a);
  // Pin only the child's parent chain prefix... then release and push the
  // chain out with newer blocks.
  for (uint64_t stem = 2; stem < 5; ++stem) Put(*engine_, ns_, Chain(stem, 1));
  // LRU evicts the tail of a chain before its head.
  EXPECT_EQ(Hits(a), 1u);
  Put(*engine_, ns_, Chain(9, 1));
  EXPECT_EQ(Hits(a), 0u);
  EXPECT_EQ(Hits(std::span(a).subspan(1)), 0u);
}

TEST_F(CacheEngineTest, AWriteStopsWhereMakingRoomDroppedItsOwnPrefix) {
  Build(0, 6);
  const auto keys = Chain(1, 9);
  ASSERT_EQ(Put(*engine_, ns_, std::span(keys).first(6)), 6u);
  // A read touches the chain last block first, so under LRU the block
  // before the write's parent is the first victim: the parent becomes an
  // orphan, and what is written under it would go at the commit. The write
  // stops there rather than evict keys[3], keys[2] and keys[1] for nothing.
  engine_->Acquire(ns_, std::span(keys).first(6), TierKind::kHost)->Release();
  auto a = engine_->Allocate(ns_, keys[5], std::span(keys).subspan(6), TierKind::kHost);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kResourceExhausted) << a.status().ToString();
  EXPECT_EQ(Hits(keys), 4u);
  EXPECT_EQ(Tier(TierKind::kHost).evictions, 1u);
  EXPECT_EQ(Tier(TierKind::kHost).blocks, 4u);
}

TEST_F(CacheEngineTest, LeasedChildOfARemovedParentGoesAtRelease) {
  Build(0, 8);
  const auto keys = Chain(1, 3);
  Put(*engine_, ns_, keys);
  auto lease = engine_->Acquire(ns_, keys, TierKind::kHost);
  ASSERT_EQ(lease->size(), 3u);
  EXPECT_EQ(*engine_->Remove(ns_, std::span(keys).first(1)), 1u);
  EXPECT_EQ(Hits(keys), 0u);                       // gone from lookups at once
  EXPECT_TRUE(Matches(lease->Bytes(2), keys[2]));  // the reader still reads
  lease->Release();
  EXPECT_EQ(Tier(TierKind::kHost).blocks, 0u);
  EXPECT_EQ(engine_->Stats().index_entries, 0u);
}

TEST_F(CacheEngineTest, NamespacesNeverShareBlocks) {
  Build(0, 16);
  auto other = engine_->AddNamespace({"model-b", "", SmallLayout()});
  ASSERT_TRUE(other.ok());
  const auto keys = Chain(1, 3);
  Put(*engine_, ns_, keys);
  EXPECT_EQ(engine_->Lookup(*other, keys)->hits, 0u);
  EXPECT_EQ(engine_->Acquire(*other, keys, TierKind::kHost)->size(), 0u);
  auto salted = engine_->AddNamespace({"model-a", "tenant-2", SmallLayout()});
  ASSERT_TRUE(salted.ok());
  EXPECT_NE(*salted, ns_);
  EXPECT_EQ(engine_->Lookup(*salted, keys)->hits, 0u);
}

TEST_F(CacheEngineTest, NamespaceLayoutsAreChecked) {
  Build(0, 16);
  EXPECT_EQ(*engine_->AddNamespace({"model-a", "", SmallLayout()}), ns_);
  Layout other = SmallLayout();
  other.head_dim = 128;
  EXPECT_EQ(engine_->AddNamespace({"model-a", "", other}).status().code(),
            StatusCode::kInvalidArgument);
  Layout huge{80, 64, 128, DType::kFloat16, 16};  // 40 MiB blocks in a 64 KiB tier
  EXPECT_EQ(engine_->AddNamespace({"big", "", huge}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Lookup(99, Chain(1, 1)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CacheEngineTest, NamespacesAreFoundByModelAndSalt) {
  Build(0, 16);  // registers model-a
  EXPECT_EQ(engine_->namespace_count(), 1u);
  EXPECT_EQ(engine_->FindNamespace("model-a", ""), std::optional<NamespaceId>(ns_));
  EXPECT_EQ(engine_->FindNamespace("model-a", "x"), std::nullopt);  // another salt
  EXPECT_EQ(engine_->FindNamespace("model-b", ""), std::nullopt);
  auto b = engine_->AddNamespace({"model-b", "", SmallLayout()});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(engine_->FindNamespace("model-b", ""), std::optional<NamespaceId>(*b));
  EXPECT_EQ(engine_->namespace_count(), 2u);
  // A refused layout (40 MiB blocks in a 64 KiB tier) registers nothing.
  Layout huge{80, 64, 128, DType::kFloat16, 16};
  EXPECT_FALSE(engine_->AddNamespace({"model-c", "", huge}).ok());
  EXPECT_EQ(engine_->FindNamespace("model-c", ""), std::nullopt);
  EXPECT_EQ(engine_->namespace_count(), 2u);
}

TEST_F(CacheEngineTest, BadTargetsAreRejected) {
  Build(0, 16);
  EXPECT_EQ(engine_->Allocate(ns_, std::nullopt, Chain(1, 1), TierKind::kDevice).status().code(),
            StatusCode::kInvalidArgument);  // no device tier
  EXPECT_EQ(engine_->Allocate(ns_, std::nullopt, Chain(1, 1), TierKind::kSsd).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Allocate(ns_, std::nullopt, {}, TierKind::kHost).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CacheEngineTest, TwoBlockSizesShareTheHostArena) {
  Build(0, 64);
  Layout big = SmallLayout();
  big.kv_heads = 3;  // 12 KiB blocks
  auto ns2 = engine_->AddNamespace({"model-b", "", big});
  ASSERT_TRUE(ns2.ok());
  for (uint64_t stem = 1; stem < 60; ++stem) {
    Put(*engine_, stem % 2 ? ns_ : *ns2, Chain(stem, 2));
    ASSERT_TRUE(engine_->CheckInvariants().ok()) << engine_->CheckInvariants().ToString();
  }
  auto lease = engine_->Acquire(*ns2, Chain(58, 2), TierKind::kHost);
  ASSERT_EQ(lease->size(), 2u);
  EXPECT_TRUE(Matches(lease->Bytes(1), Chain(58, 2)[1]));
}

TEST_F(CacheEngineTest, StatsDescribeTheTiers) {
  Build(4, 16);
  const EngineStats s = engine_->Stats();
  const TierStats& d = s.tiers[0];
  EXPECT_TRUE(d.present);
  EXPECT_TRUE(d.emulated);
  EXPECT_NE(d.description.find("emulated"), std::string::npos);
  EXPECT_EQ(d.capacity_bytes, 4u * 4096);
  EXPECT_FALSE(s.tiers[2].present);
}

// Admission "seen" on the host tier: once it is full, a block looked up for
// the first time by the request that writes it (a document pasted once)
// does not take a cached block's room; the same chain asked for again is
// admitted. Refusals are counted.
TEST(CacheEngineAdmissionTest, AOneOffBlockDisplacesNothingUntilItIsSeenTwice) {
  auto host = tiers::NewHostTier({4 * 4096, 16 * 4096});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EngineOptions options;
  options.host_policy = "lru";
  options.host_admission = "seen";
  auto made = CacheEngine::Create(options, nullptr, std::move(host).value());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  CacheEngine& e = **made;
  const NamespaceId ns = *e.AddNamespace({"model-a", "", SmallLayout()});
  const auto hot = Chain(1, 4);
  ASSERT_EQ(e.Lookup(ns, hot)->hits, 0u);
  ASSERT_EQ(Put(e, ns, hot), 4u);  // room to spare: no filter asked
  const auto doc = Chain(2, 2);
  ASSERT_EQ(e.Lookup(ns, doc)->hits, 0u);  // its first sighting
  {
    // Kept out: not an error, a write with every block skipped.
    auto kept_out = e.Allocate(ns, std::nullopt, doc, TierKind::kHost);
    ASSERT_TRUE(kept_out.ok()) << kept_out.status().ToString();
    EXPECT_EQ(kept_out->allocated(), 0u);
    for (size_t i = 0; i < kept_out->size(); ++i) {
      EXPECT_EQ(kept_out->state(i), WriteState::kSkipped);
    }
    EXPECT_TRUE(kept_out->Commit().ok());
  }
  EXPECT_EQ(e.Lookup(ns, hot)->hits, 4u);  // nothing of the hot chain went
  EngineStats st = e.Stats();
  const TierStats& h = st.tiers[static_cast<size_t>(TierKind::kHost)];
  EXPECT_EQ(h.admission, "seen");
  EXPECT_EQ(h.admission_refused, 1u);  // its first block; the rest skipped with it
  EXPECT_EQ(h.evictions, 0u);
  ASSERT_EQ(e.Lookup(ns, doc)->hits, 0u);  // its second sighting
  EXPECT_EQ(Put(e, ns, doc), 2u);          // admitted: two of the hot chain's blocks made room
  EXPECT_EQ(e.Lookup(ns, doc)->hits, 2u);
  EXPECT_EQ(e.Lookup(ns, hot)->hits, 2u);
  EXPECT_TRUE(e.CheckInvariants().ok()) << e.CheckInvariants().ToString();
  // An unknown filter is refused at creation, naming the tier.
  options.host_admission = "sometimes";
  auto bad = CacheEngine::Create(options, nullptr,
                                 std::move(tiers::NewHostTier({4 * 4096, 16 * 4096})).value());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown admission filter 'sometimes'"),
            std::string_view::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace kvtier::engine

// The engine with a real SSD tier (slot files + RocksDB in a temporary
// directory) and a ManualExecutor, so every asynchronous move happens at a
// point the test chooses: demotion and promotion, warm restart, checksum
// failures and disk faults (injected under the tier, STYLE.md 12).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "common/hash.h"
#include "engine_test_util.h"
#include "ssd_engine_fixture.h"
#include "tiers/internal/ssd_tier.h"

namespace kvtier::engine {
namespace {

using testing::Chain;
using testing::Fill;
using testing::Matches;
using testing::Put;
using testing::SmallLayout;

class SsdEngineTest : public testing::SsdEngineFixture {
 protected:
  // A host tier of `host_blocks` 4 KiB blocks over an SSD of `ssd_blocks`.
  void Build(uint64_t host_blocks, uint64_t ssd_blocks, bool faulty = false,
             bool write_through = false) {
    BuildEngine(host_blocks * 4096, 16 * 4096, ssd_blocks * 4096, faulty, write_through);
    if (HasFatalFailure()) return;
    ns_ = *engine_->AddNamespace({"model", "", SmallLayout()});
  }

  std::vector<TierKind> Where(std::span<const BlockKey> keys) {
    return engine_->Lookup(ns_, keys)->tiers;
  }

  // AcquireAsync, with the executor run until it completes.
  Lease AcquireAll(std::span<const BlockKey> keys, TierKind tier = TierKind::kHost) {
    std::optional<Result<Lease>> got;
    engine_->AcquireAsync(ns_, keys, tier, [&](Result<Lease> r) { got.emplace(std::move(r)); });
    io_.RunAll();
    EXPECT_TRUE(got.has_value());
    EXPECT_TRUE(got->ok());
    return std::move(*got).value();
  }

  // Records written straight into the store, as another run (or a damaged
  // index) may have left them (each a block's key and its parent's), then
  // an engine over it and its warm restart.
  using Record = std::pair<BlockKey, std::optional<BlockKey>>;
  Result<size_t> RestartOver(const std::vector<Record>& records) {
    const Layout layout = SmallLayout();
    const uint64_t capacity = 4096 * (records.size() + 16);
    {
      tiers::internal::SsdOptions o;
      o.dir = dir_;
      o.capacity_bytes = capacity;
      KVTIER_ASSIGN_OR_RETURN(auto store, tiers::internal::SsdStore::Open(o));
      KVTIER_ASSIGN_OR_RETURN(const uint32_t ns, store->RegisterNamespace("model", "", layout));
      for (const auto& [key, parent] : records) {
        KVTIER_ASSIGN_OR_RETURN(const tiers::internal::SsdSlot slot,
                                store->Allocate(layout.BlockBytes()));
        tiers::internal::SsdRecord r;
        r.ns_id = ns;
        r.key = key;
        r.has_parent = parent.has_value();
        if (parent) r.parent = *parent;
        r.slot = slot;
        r.block_bytes = layout.BlockBytes();
        KVTIER_RETURN_IF_ERROR(store->PutRecord(r));
      }
      KVTIER_RETURN_IF_ERROR(store->Sync());
    }
    BuildEngine(64 * 4096, 16 * 4096, capacity, false, false);
    if (HasFatalFailure()) return InternalError("no engine");
    KVTIER_ASSIGN_OR_RETURN(ns_, engine_->AddNamespace({"model", "", layout}));
    return engine_->Recover();
  }
};

TEST_F(SsdEngineTest, EvictedBlocksGoToDiskAndComeBackIdentical) {
  Build(4, 64);
  const auto a = Chain(1, 4);
  ASSERT_EQ(Put(*engine_, ns_, a), 4u);
  ASSERT_EQ(Put(*engine_, ns_, Chain(2, 4)), 4u);  // pushes chain 1 out of the host
  // In flight to the disk: reported absent, never half-written.
  EXPECT_EQ(Where(a).size(), 0u);
  EXPECT_EQ(engine_->Stats().moves_in_flight, 4u);
  io_.RunAll();
  EXPECT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kSsd));
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.tiers[2].blocks, 4u);
  EXPECT_EQ(s.tiers[2].demotions_in, 4u);
  EXPECT_EQ(s.tiers[2].used_bytes, 4u * 4096);

  // The synchronous Acquire does not wait on the disk...
  EXPECT_EQ(engine_->Acquire(ns_, a, TierKind::kHost)->size(), 0u);
  // ...AcquireAsync promotes, and the bytes are the ones written.
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(lease.location(i).tier, TierKind::kHost);
    EXPECT_TRUE(Matches(lease.Bytes(i), a[i])) << i;
  }
  EXPECT_EQ(engine_->Stats().tiers[1].promotions_in, 4u);
  lease.Release();
  io_.RunAll();
}

TEST_F(SsdEngineTest, BlockIsServedFromDiskUntilItsPromotionLands) {
  Build(4, 64);
  const auto a = Chain(1, 2);
  Put(*engine_, ns_, a);
  Put(*engine_, ns_, Chain(2, 4));
  io_.RunAll();
  std::optional<Result<Lease>> first, second;
  engine_->AcquireAsync(ns_, a, TierKind::kHost,
                        [&](Result<Lease> r) { first.emplace(std::move(r)); });
  engine_->AcquireAsync(ns_, a, TierKind::kHost,
                        [&](Result<Lease> r) { second.emplace(std::move(r)); });
  EXPECT_FALSE(first.has_value());
  EXPECT_EQ(Where(a), std::vector<TierKind>(2, TierKind::kSsd));  // still where it was
  io_.RunAll();
  ASSERT_TRUE(first && first->ok() && second && second->ok());
  EXPECT_EQ((*first)->size(), 2u);
  EXPECT_EQ((*second)->size(), 2u);  // waited on the same reads
  EXPECT_EQ(engine_->Stats().tiers[1].promotions_in, 2u);
  EXPECT_TRUE(Matches((*second)->Bytes(1), a[1]));
}

TEST_F(SsdEngineTest, SsdCapacityIsNeverExceeded) {
  Build(4, 16);
  for (uint64_t stem = 1; stem <= 30; ++stem) {
    Put(*engine_, ns_, Chain(stem, 3));
    io_.RunAll();
    const EngineStats s = engine_->Stats();
    ASSERT_LE(s.tiers[2].used_bytes, s.tiers[2].capacity_bytes);
    ASSERT_TRUE(engine_->CheckInvariants().ok()) << engine_->CheckInvariants().ToString();
  }
  EXPECT_GT(engine_->Stats().dropped_blocks, 0u);  // eviction from the ssd deletes
}

TEST_F(SsdEngineTest, WarmRestartServesTheDisksBlocks) {
  Build(4, 64);
  const auto a = Chain(1, 4);
  Put(*engine_, ns_, a);
  Put(*engine_, ns_, Chain(2, 4));
  io_.RunAll();
  ASSERT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kSsd));
  ASSERT_TRUE(engine_->tier(TierKind::kSsd)->Sync().ok());
  engine_.reset();  // the host tier's blocks (chain 2) are gone with it

  Build(4, 64);
  auto restored = engine_->Recover();
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 4u);
  EXPECT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kSsd));
  EXPECT_EQ(Where(Chain(2, 4)).size(), 0u);
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(Matches(lease.Bytes(i), a[i])) << i;
}

TEST_F(SsdEngineTest, RestartDropsBlocksWhoseParentWasNotKept) {
  Build(4, 64);
  const auto a = Chain(1, 4);
  Put(*engine_, ns_, a);
  // Touch the head so the tail is older and goes down first.
  engine_->Acquire(ns_, std::span(a).first(2), TierKind::kHost)->Release();
  Put(*engine_, ns_, Chain(2, 2));  // room for two: the tail of chain 1 goes
  io_.RunAll();
  EXPECT_EQ(Where(a), (std::vector<TierKind>{TierKind::kHost, TierKind::kHost, TierKind::kSsd,
                                             TierKind::kSsd}));
  engine_.reset();
  Build(4, 64);
  EXPECT_EQ(*engine_->Recover(), 0u);  // its head lived in memory only
  EXPECT_EQ(engine_->Stats().tiers[2].used_bytes, 0u);
  EXPECT_EQ(engine_->Stats().orphan_drops, 2u);
}

// A deep chain, a chain whose parent is gone, and two records that name
// each other as parent.
TEST_F(SsdEngineTest, RestartOrdersDeepChainsAndDropsCyclesAndOrphans) {
  constexpr uint64_t kDeep = 3000;
  std::vector<Record> records;
  // Children written before their parents: the store's order is its
  // keys', not the chains'.
  const auto deep = Chain(7, kDeep);
  for (uint64_t i = kDeep; i-- > 0;) {
    records.emplace_back(deep[i], i == 0 ? std::nullopt : std::optional<BlockKey>(deep[i - 1]));
  }
  const auto gone = Chain(8, 3);  // its head was never stored
  records.emplace_back(gone[1], gone[0]);
  records.emplace_back(gone[2], gone[1]);
  records.emplace_back(BlockKey{91, 1}, BlockKey{91, 2});  // a cycle of two
  records.emplace_back(BlockKey{91, 2}, BlockKey{91, 1});
  auto restored = RestartOver(records);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, kDeep);
  EXPECT_EQ(engine_->Stats().orphan_drops, 4u);
  EXPECT_EQ(Where(Chain(7, kDeep)), std::vector<TierKind>(kDeep, TierKind::kSsd));
  EXPECT_EQ(engine_->Stats().tiers[2].used_bytes, kDeep * 4096);
}

// Prefixes that branch, under keys that are hashes (so the store holds
// them in no order of the tree): every path from the root comes back whole,
// each block under the parent its record names (as the events of the
// restart say), parents before children and shallower blocks first.
TEST_F(SsdEngineTest, RestartRestoresBranchingPrefixesWhole) {
  auto key = [](uint64_t i) { return BlockKey{Mix64(i), i}; };
  std::vector<Record> records = {{key(0), std::nullopt}};
  std::vector<std::vector<BlockKey>> paths;
  uint64_t next = 1;
  for (uint64_t a = 0; a < 3; ++a) {
    const BlockKey mid = key(next++);
    records.emplace_back(mid, key(0));
    for (uint64_t b = 0; b < 4; ++b) {
      std::vector<BlockKey> path = {key(0), mid};
      for (uint64_t depth = 0; depth < 1 + 10 * b; ++depth) {
        path.push_back(key(next++));
        records.emplace_back(path.back(), path[path.size() - 2]);
      }
      paths.push_back(path);
    }
  }
  record_events_ = true;
  auto restored = RestartOver(records);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, next);
  EXPECT_EQ(engine_->Stats().orphan_drops, 0u);
  for (const auto& path : paths) {
    EXPECT_EQ(Where(path), std::vector<TierKind>(path.size(), TierKind::kSsd));
  }
  std::map<BlockKey, std::optional<BlockKey>> parent_of(records.begin(), records.end());
  std::vector<BlockEvent> events;
  engine_->TakeEvents(&events);
  ASSERT_EQ(events.size(), next);
  std::map<BlockKey, size_t> depth;  // of the blocks restored so far
  size_t last_depth = 0;
  for (const BlockEvent& e : events) {
    ASSERT_EQ(e.kind, BlockEvent::Kind::kStored);
    EXPECT_EQ(e.parent, parent_of.at(e.key)) << e.key.ToHex();
    const size_t d = e.parent ? depth.at(*e.parent) + 1 : 0;  // at(): the parent came first
    EXPECT_GE(d, last_depth) << e.key.ToHex();
    depth[e.key] = last_depth = d;
  }
}

TEST_F(SsdEngineTest, FlippedByteOnDiskIsAMissNeverWrongBytes) {
  Build(4, 64, /*faulty=*/true);
  const auto a = Chain(1, 3);
  Put(*engine_, ns_, a);
  Put(*engine_, ns_, Chain(2, 4));
  io_.RunAll();
  faults_.SetFlipByteOnRead(true);
  Lease lease = AcquireAll(a);
  EXPECT_EQ(lease.size(), 0u);  // the first block failed its checksum: the chain ends there
  lease.Release();
  io_.RunAll();
  const EngineStats s = engine_->Stats();
  EXPECT_GE(s.checksum_failures, 1u);
  EXPECT_EQ(Where(a).size(), 0u);  // dropped, and its descendants with it
  faults_.SetFlipByteOnRead(false);
  EXPECT_EQ(Where(std::span(a).subspan(1)).size(), 0u);
}

TEST_F(SsdEngineTest, ReadErrorIsAMiss) {
  Build(4, 64, /*faulty=*/true);
  const auto a = Chain(1, 2);
  Put(*engine_, ns_, a);
  Put(*engine_, ns_, Chain(2, 4));
  io_.RunAll();
  faults_.SetIoErrorOnRead(true);
  Lease lease = AcquireAll(a);
  EXPECT_EQ(lease.size(), 0u);
  EXPECT_GE(engine_->Stats().io_errors, 1u);
  EXPECT_TRUE(engine_->Stats().ssd_paused);  // a failing disk gets no new blocks for a while
}

TEST_F(SsdEngineTest, TruncatedFileIsAMiss) {
  Build(4, 64, /*faulty=*/true);
  const auto a = Chain(1, 2);
  Put(*engine_, ns_, a);
  Put(*engine_, ns_, Chain(2, 4));
  io_.RunAll();
  faults_.SetTruncatedAt(0);  // as if the files lost their tails
  Lease lease = AcquireAll(a);
  EXPECT_EQ(lease.size(), 0u);
  EXPECT_GE(engine_->Stats().checksum_failures + engine_->Stats().io_errors, 1u);
  EXPECT_EQ(Where(a).size(), 0u);
}

TEST_F(SsdEngineTest, FullDiskStopsAdmissionAndTheHostKeepsServing) {
  Build(4, 64, /*faulty=*/true);
  faults_.SetNoSpaceOnWrite(true);
  Put(*engine_, ns_, Chain(1, 4));
  Put(*engine_, ns_, Chain(2, 4));  // chain 1 is demoted; its writes fail
  io_.RunAll();
  EngineStats s = engine_->Stats();
  EXPECT_EQ(s.io_errors, 4u);
  EXPECT_TRUE(s.ssd_paused);
  EXPECT_EQ(Where(Chain(1, 4)).size(), 0u);  // lost, never half-served
  EXPECT_EQ(s.tiers[2].used_bytes, 0u);
  // While paused, blocks leaving the host are dropped, not written.
  Put(*engine_, ns_, Chain(3, 4));
  io_.RunAll();
  s = engine_->Stats();
  EXPECT_EQ(s.io_errors, 4u);
  EXPECT_EQ(s.demotions_dropped, 4u);
  // The host still serves.
  EXPECT_EQ(Where(Chain(3, 4)).size(), 4u);
  // After the pause, admission resumes.
  faults_.SetNoSpaceOnWrite(false);
  clock_.Advance(11 * kNsPerSec);
  Put(*engine_, ns_, Chain(4, 4));
  io_.RunAll();
  EXPECT_EQ(Where(Chain(3, 4)), std::vector<TierKind>(4, TierKind::kSsd));
  EXPECT_FALSE(engine_->Stats().ssd_paused);
}

// The SSD's endurance budget: an hour's share (8 blocks here) can be written
// at once; past it, blocks leaving the host are dropped instead of written,
// and counted; the budget refills with time.
TEST_F(SsdEngineTest, AWriteBudgetBoundsWhatGoesToDisk) {
  ssd_write_budget_ = 24 * 8 * 4096;  // a day's bytes: 8 blocks an hour
  Build(4, 64);
  for (uint64_t stem = 1; stem <= 4; ++stem) {
    Put(*engine_, ns_, Chain(stem, 4));  // each evicts the chain before it
    io_.RunAll();
  }
  EngineStats s = engine_->Stats();
  EXPECT_EQ(Where(Chain(1, 4)), std::vector<TierKind>(4, TierKind::kSsd));
  EXPECT_EQ(Where(Chain(2, 4)), std::vector<TierKind>(4, TierKind::kSsd));
  EXPECT_EQ(Where(Chain(3, 4)).size(), 0u);  // the hour's 8 blocks were spent
  EXPECT_EQ(s.ssd_budget_refused, 4u);
  EXPECT_EQ(s.demotions_dropped, 4u);
  EXPECT_EQ(s.tiers[2].demotions_in, 8u);
  // Half an hour refills half of it: the next chain's 4 blocks go down.
  clock_.Advance(1800 * kNsPerSec);
  Put(*engine_, ns_, Chain(5, 4));
  io_.RunAll();
  EXPECT_EQ(Where(Chain(4, 4)), std::vector<TierKind>(4, TierKind::kSsd));
  EXPECT_EQ(engine_->Stats().ssd_budget_refused, 4u);
}

// The ssd's admission filter "seen": a block leaving the host is written to
// the disk only if it was looked up again since its write; the others are
// dropped, counted as the ssd's refusals, and cost the disk nothing.
TEST_F(SsdEngineTest, TheSsdsFilterWritesOnlyBlocksLookedUpAgain) {
  ssd_admission_ = "seen";
  Build(4, 64);
  const auto reused = Chain(1, 4), once = Chain(2, 4);
  ASSERT_EQ(engine_->Lookup(ns_, reused)->hits, 0u);
  ASSERT_EQ(Put(*engine_, ns_, reused), 4u);
  ASSERT_EQ(engine_->Lookup(ns_, reused)->hits, 4u);  // looked up again: a hit
  ASSERT_EQ(engine_->Lookup(ns_, once)->hits, 0u);
  ASSERT_EQ(Put(*engine_, ns_, once), 4u);  // pushes `reused` out of the host
  io_.RunAll();
  EXPECT_EQ(Where(reused), std::vector<TierKind>(4, TierKind::kSsd));
  ASSERT_EQ(engine_->Lookup(ns_, Chain(3, 4))->hits, 0u);
  ASSERT_EQ(Put(*engine_, ns_, Chain(3, 4)), 4u);  // pushes `once` out: dropped
  io_.RunAll();
  EXPECT_EQ(Where(once).size(), 0u);
  EngineStats s = engine_->Stats();
  EXPECT_EQ(s.tiers[2].admission, "seen");
  EXPECT_EQ(s.tiers[2].admission_refused, 4u);
  EXPECT_EQ(s.tiers[2].demotions_in, 4u);
  EXPECT_TRUE(engine_->CheckInvariants().ok()) << engine_->CheckInvariants().ToString();
}

TEST_F(SsdEngineTest, WriteThroughPutsEveryCommittedBlockOnDisk) {
  Build(8, 64, false, /*write_through=*/true);
  const auto a = Chain(1, 3);
  Put(*engine_, ns_, a);
  EXPECT_EQ(engine_->Stats().moves_in_flight, 3u);
  io_.RunAll();
  EngineStats s = engine_->Stats();
  EXPECT_EQ(s.shadow_blocks, 3u);
  EXPECT_EQ(s.tiers[2].used_bytes, 3u * 4096);
  EXPECT_EQ(Where(a), std::vector<TierKind>(3, TierKind::kHost));  // served from memory
  // A crash now (no clean stop, nothing evicted) loses none of them.
  engine_.reset();
  Build(8, 64, false, true);
  EXPECT_EQ(*engine_->Recover(), 3u);
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(Matches(lease.Bytes(i), a[i]));
  lease.Release();
  // Promoted back, the disk copy stays as the shadow: no second write.
  EXPECT_EQ(engine_->Stats().shadow_blocks, 3u);
}

TEST_F(SsdEngineTest, WrittenThroughBlocksDemoteWithoutIo) {
  Build(4, 64, false, /*write_through=*/true);
  const auto a = Chain(1, 4);
  Put(*engine_, ns_, a);
  io_.RunAll();
  Put(*engine_, ns_, Chain(2, 4));  // evicts chain 1 from the host
  // Already on disk: visible there at once, before any I/O runs.
  EXPECT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kSsd));
  EXPECT_EQ(engine_->Stats().moves_in_flight, 4u);  // chain 2's own write-through only
  io_.RunAll();
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(Matches(lease.Bytes(i), a[i]));
}

TEST_F(SsdEngineTest, FullQueueDropsInsteadOfWaiting) {
  Build(4, 64);
  ManualExecutor tiny(2);
  // A separate engine whose executor holds two items.
  auto host = tiers::NewHostTier({4 * 4096, 16 * 4096, false});
  tiers::internal::SsdOptions so;
  so.dir = dir_ / "tiny";
  so.capacity_bytes = 64 * 4096;
  EngineOptions options;
  options.io = &tiny;
  auto e = CacheEngine::Create(
      options, nullptr, std::move(host).value(),
      tiers::internal::NewSsdTierOver(std::move(tiers::internal::SsdStore::Open(so)).value()));
  ASSERT_TRUE(e.ok());
  const NamespaceId ns = *(*e)->AddNamespace({"m", "", SmallLayout()});
  Put(**e, ns, Chain(1, 4));
  Put(**e, ns, Chain(2, 4));
  EXPECT_EQ((*e)->Stats().moves_in_flight, 2u);
  EXPECT_EQ((*e)->Stats().demotions_dropped, 2u);
  tiny.RunAll();
  EXPECT_TRUE((*e)->CheckInvariants().ok());
}

}  // namespace
}  // namespace kvtier::engine

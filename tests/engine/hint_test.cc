// CacheEngine::Hint: protection of hinted blocks, its bound per owner, its
// expiry and yielding, and the prefetch of hinted ssd blocks into the host.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "engine/cache_engine.h"
#include "engine_test_util.h"
#include "ssd_engine_fixture.h"

namespace kvtier::engine {

namespace {

using testing::Chain;
using testing::Matches;
using testing::Put;
using testing::SmallLayout;

constexpr uint64_t kWorkerA = 1;
constexpr uint64_t kWorkerB = 2;

class HintTest : public ::testing::Test {
 protected:
  // A host tier of `host_blocks` 4 KiB blocks; `bound` hinted blocks per owner.
  void Build(uint64_t host_blocks, uint64_t bound = 0) {
    auto h = tiers::NewHostTier({host_blocks * 4096, 16 * 4096});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EngineOptions options;
    options.clock = &clock_;
    options.max_hinted_blocks_per_owner = bound;
    auto e = CacheEngine::Create(options, nullptr, std::move(h).value());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
    ns_ = *engine_->AddNamespace({"model", "", SmallLayout()});
  }
  void TearDown() override {
    if (engine_) {
      const Status s = engine_->CheckInvariants();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
  }
  size_t Hits(std::span<const BlockKey> keys) { return engine_->Lookup(ns_, keys)->hits; }
  HintResult Hint(uint64_t owner, std::span<const BlockKey> keys, TimeNs ttl = kNsPerSec) {
    auto r = engine_->Hint(owner, ns_, keys, clock_.Now() + ttl);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : HintResult{};
  }

  ManualClock clock_{1000 * kNsPerSec};
  std::unique_ptr<CacheEngine> engine_;
  NamespaceId ns_ = 0;
};

TEST_F(HintTest, HintedBlocksStayWhileOthersAreEvicted) {
  Build(8);
  const auto hinted = Chain(1, 4);
  ASSERT_EQ(Put(*engine_, ns_, hinted), 4u);
  const auto other = Chain(2, 4);
  ASSERT_EQ(Put(*engine_, ns_, other), 4u);
  // Chain 1 is the least recently used: without the hint it would go first.
  EXPECT_EQ(Hint(kWorkerA, hinted).protected_blocks, 4u);
  EXPECT_EQ(engine_->Stats().hinted_now, 4u);
  ASSERT_EQ(Put(*engine_, ns_, Chain(3, 4)), 4u);
  EXPECT_EQ(Hits(hinted), 4u);
  EXPECT_EQ(Hits(other), 0u);
  // The request runs: its hint is used and the protection ends.
  auto lease = engine_->Acquire(ns_, hinted, TierKind::kHost);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->size(), 4u);
  lease->Release();
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.hinted_blocks, 4u);
  EXPECT_EQ(s.hints_used, 4u);
  EXPECT_EQ(s.hinted_now, 0u);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 0u);
}

TEST_F(HintTest, ASharedPrefixStaysUntilEveryRequestHintedOnItHasRun) {
  Build(8);
  const auto prefix = Chain(1, 2);
  ASSERT_EQ(Put(*engine_, ns_, prefix), 2u);
  // Two waiting requests share the prefix: two hints on it, one per request.
  Hint(kWorkerA, prefix);
  Hint(kWorkerA, prefix);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 2u);     // the bound counts blocks
  ASSERT_EQ(Put(*engine_, ns_, Chain(2, 6)), 6u);  // the tier is full
  auto first = engine_->Acquire(ns_, prefix, TierKind::kHost);
  ASSERT_TRUE(first.ok());
  first->Release();
  EXPECT_EQ(engine_->Stats().hinted_now, 2u);  // the second request still waits
  // Two turnovers of everything else: the prefix, now the least recently
  // used, would go in the second without its remaining hint.
  ASSERT_EQ(Put(*engine_, ns_, Chain(3, 6)), 6u);
  ASSERT_EQ(Put(*engine_, ns_, Chain(4, 6)), 6u);
  EXPECT_EQ(Hits(prefix), 2u);
  EXPECT_EQ(engine_->Stats().hints_yielded, 0u);
  auto second = engine_->Acquire(ns_, prefix, TierKind::kHost);  // another process reads it
  ASSERT_TRUE(second.ok());
  second->Release();
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.hinted_now, 0u);
  EXPECT_EQ(s.hints_used, 2u);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 0u);
}

TEST_F(HintTest, ProtectionEndsAtTheHintsExpiry) {
  Build(4);
  const auto hinted = Chain(1, 2);
  ASSERT_EQ(Put(*engine_, ns_, hinted), 2u);
  Hint(kWorkerA, hinted, 5 * kNsPerSec);
  ASSERT_EQ(Put(*engine_, ns_, Chain(2, 2)), 2u);
  clock_.Advance(5 * kNsPerSec);  // `until` itself still protects
  ASSERT_EQ(Put(*engine_, ns_, Chain(3, 2)), 2u);
  EXPECT_EQ(Hits(hinted), 2u);
  clock_.Advance(1);
  ASSERT_EQ(Put(*engine_, ns_, Chain(4, 4)), 4u);
  EXPECT_EQ(Hits(hinted), 0u);  // expired: evictable like any other
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.hints_expired, 2u);
  EXPECT_EQ(s.hints_used, 0u);
  EXPECT_EQ(s.hinted_now, 0u);
}

TEST_F(HintTest, HintsPastTheOwnersBoundAreRefusedWithNothingChanged) {
  Build(32, /*bound=*/6);
  const auto a = Chain(1, 4), b = Chain(2, 4);
  ASSERT_EQ(Put(*engine_, ns_, a), 4u);
  ASSERT_EQ(Put(*engine_, ns_, b), 4u);
  Hint(kWorkerA, a);
  Hint(kWorkerA, a);  // the same blocks again count once
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 4u);
  auto refused = engine_->Hint(kWorkerA, ns_, b, clock_.Now() + kNsPerSec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("bound of 6"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 4u);
  EXPECT_EQ(engine_->Stats().hinted_now, 4u);
  EXPECT_EQ(engine_->Stats().hints_refused, 1u);
  // Another worker has its own bound; a shared block counts for both.
  EXPECT_EQ(Hint(kWorkerB, b).protected_blocks, 4u);
  EXPECT_EQ(Hint(kWorkerB, std::span(a).first(2)).protected_blocks, 2u);
  EXPECT_EQ(engine_->hinted_by(kWorkerB), 6u);
  EXPECT_EQ(engine_->Stats().hinted_now, 8u);
  // Withdrawn hints make room under the bound again; A hinted a twice, so
  // it takes two withdrawals.
  EXPECT_EQ(*engine_->Unhint(kWorkerA, ns_, a), 4u);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 4u);
  EXPECT_EQ(*engine_->Unhint(kWorkerA, ns_, a), 4u);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 0u);
  EXPECT_EQ(*engine_->Unhint(kWorkerA, ns_, a), 0u);  // none left
  EXPECT_EQ(engine_->Stats().hinted_now, 6u);         // B still protects its six
  EXPECT_EQ(Hint(kWorkerA, std::span(b).first(3)).protected_blocks, 3u);
  engine_->DropHints(kWorkerB);
  EXPECT_EQ(engine_->hinted_by(kWorkerB), 0u);
  EXPECT_EQ(engine_->Stats().hinted_now, 3u);
}

TEST_F(HintTest, HintsForKeysNeverWrittenAreHarmless) {
  Build(8, /*bound=*/4);
  ASSERT_EQ(Put(*engine_, ns_, Chain(1, 2)), 2u);
  EXPECT_EQ(Hint(kWorkerA, Chain(9, 100)).protected_blocks, 0u);
  // A chain that starts cached and goes on into the unknown: its head only.
  auto mixed = Chain(1, 2);
  mixed.push_back(BlockKey{9, 1});
  EXPECT_EQ(Hint(kWorkerA, mixed).protected_blocks, 2u);
  EXPECT_EQ(*engine_->Unhint(kWorkerA, ns_, Chain(9, 3)), 0u);
  EXPECT_EQ(engine_->Stats().hinted_now, 2u);
  EXPECT_EQ(engine_->Hint(kWorkerA, 99, Chain(1, 2), 0).status().code(),
            StatusCode::kInvalidArgument);  // an unknown namespace is an error
}

TEST_F(HintTest, HintsYieldSoThatWritesNeverFail) {
  Build(4);
  const auto soon = Chain(1, 2), later = Chain(2, 2);
  ASSERT_EQ(Put(*engine_, ns_, soon), 2u);
  ASSERT_EQ(Put(*engine_, ns_, later), 2u);
  Hint(kWorkerA, soon, 5 * kNsPerSec);    // the request that runs first
  Hint(kWorkerB, later, 10 * kNsPerSec);  // one further back in a queue
  // The tier is full of hinted blocks: a write ends the protection of the
  // ones whose hints expire last (the requests furthest ahead), and
  // succeeds.
  ASSERT_EQ(Put(*engine_, ns_, Chain(3, 2)), 2u);
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.hints_yielded, 2u);
  EXPECT_EQ(s.hinted_now, 2u);
  EXPECT_EQ(Hits(soon), 2u);
  EXPECT_EQ(Hits(later), 0u);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 2u);
  EXPECT_EQ(engine_->hinted_by(kWorkerB), 0u);
}

TEST_F(HintTest, RemovedHintedBlocksLeaveNoHintBehind) {
  Build(8);
  const auto a = Chain(1, 3);
  ASSERT_EQ(Put(*engine_, ns_, a), 3u);
  Hint(kWorkerA, a);
  EXPECT_EQ(*engine_->Remove(ns_, std::span(a).first(1)), 1u);  // and its descendants
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.hinted_now, 0u);
  EXPECT_EQ(engine_->hinted_by(kWorkerA), 0u);
  // The ids are reused by new blocks, which start unhinted.
  ASSERT_EQ(Put(*engine_, ns_, Chain(2, 8)), 8u);
  EXPECT_EQ(Hits(Chain(2, 8)), 8u);
}

class HintSsdTest : public testing::SsdEngineFixture {
 protected:
  void SetUp() override {
    clock_.Advance(1000 * kNsPerSec);
    BuildEngine(4 * 4096, 16 * 4096, 64 * 4096, /*faulty=*/false, /*write_through=*/false);
    if (HasFatalFailure()) return;
    ns_ = *engine_->AddNamespace({"model", "", SmallLayout()});
  }
  std::vector<TierKind> Where(std::span<const BlockKey> keys) {
    return engine_->Lookup(ns_, keys)->tiers;
  }
};

TEST_F(HintSsdTest, HintedSsdBlocksArePrefetchedAndServedFromTheHost) {
  const auto a = Chain(1, 2);
  ASSERT_EQ(Put(*engine_, ns_, a), 2u);
  ASSERT_EQ(Put(*engine_, ns_, Chain(2, 4)), 4u);  // pushes chain 1 to the disk
  io_.RunAll();
  ASSERT_EQ(Where(a), std::vector<TierKind>(2, TierKind::kSsd));

  auto hinted = engine_->Hint(kWorkerA, ns_, a, clock_.Now() + kNsPerSec);
  ASSERT_TRUE(hinted.ok()) << hinted.status().ToString();
  EXPECT_EQ(hinted->protected_blocks, 2u);
  EXPECT_EQ(hinted->prefetching, 2u);
  io_.RunAll();  // the reads land before the request comes
  EXPECT_EQ(Where(a), std::vector<TierKind>(2, TierKind::kHost));

  // The acquire finds them in the host: no disk read on its path.
  const uint64_t promotions = engine_->Stats().tiers[1].promotions_in;
  std::optional<Result<Lease>> got;
  engine_->AcquireAsync(ns_, a, TierKind::kHost,
                        [&](Result<Lease> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(got.has_value()) << "the acquire waited for the disk";
  ASSERT_TRUE(got->ok());
  ASSERT_EQ((*got)->size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(Matches((*got)->Bytes(i), a[i])) << i;
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.tiers[1].promotions_in, promotions);
  EXPECT_EQ(s.prefetched_blocks, 2u);
  EXPECT_EQ(s.prefetched_used, 2u);
  EXPECT_EQ(s.hints_used, 2u);
  got->value().Release();
}

TEST_F(HintSsdTest, APrefetchNeverPushesOutAnotherHintsBlocks) {
  const auto a = Chain(1, 2);
  ASSERT_EQ(Put(*engine_, ns_, a), 2u);
  const auto b = Chain(2, 4);
  ASSERT_EQ(Put(*engine_, ns_, b), 4u);  // a to the disk, b fills the host
  io_.RunAll();
  auto hb = engine_->Hint(kWorkerB, ns_, b, clock_.Now() + kNsPerSec);
  ASSERT_TRUE(hb.ok());
  auto ha = engine_->Hint(kWorkerA, ns_, a, clock_.Now() + kNsPerSec);
  ASSERT_TRUE(ha.ok());
  EXPECT_EQ(ha->protected_blocks, 2u);  // protected on the disk...
  EXPECT_EQ(ha->prefetching, 0u);       // ...but no room above without evicting b
  io_.RunAll();
  EXPECT_EQ(Where(b), std::vector<TierKind>(4, TierKind::kHost));
  EXPECT_EQ(Where(a), std::vector<TierKind>(2, TierKind::kSsd));
}

}  // namespace
}  // namespace kvtier::engine

// Long seeded random sequences of engine operations against a reference
// model of what must hold, with every invariant checked after each step.
//
// The model does not re-implement eviction; it tracks what the engine may
// and must show: which keys were committed and not removed (the only keys a
// lookup may find), which are leased (they must stay, with their bytes),
// which are being written (they must stay invisible).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>

#include "engine_test_util.h"

namespace kvtier::engine {
namespace {

using testing::Fill;
using testing::Matches;

constexpr size_t kDepth = 6;
constexpr uint32_t kFanout = 3;

// Prompts are paths in a tree of fan-out 3, so chains share prefixes the
// way real prompts do. The key of a node depends on its whole path.
std::vector<BlockKey> RandomChain(std::mt19937_64& rng, size_t len) {
  std::vector<BlockKey> keys;
  uint64_t path = 0;
  for (size_t i = 0; i < len; ++i) {
    path = path * kFanout + rng() % kFanout + 1;
    keys.push_back(BlockKey{path * 0x9e3779b97f4a7c15ULL, i + 1});
  }
  return keys;
}

struct OpenWrite {
  NamespaceId ns;
  std::vector<BlockKey> keys;
  Allocation allocation;
};

struct OpenRead {
  NamespaceId ns;
  std::vector<BlockKey> keys;  // the leased prefix
  Lease lease;
};

class RandomEngineTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RandomEngineTest, InvariantsHoldThroughRandomOperations) {
  std::mt19937_64 rng(GetParam());
  auto engine = testing::MakeEngine(/*device_blocks=*/6, /*host_blocks=*/14);
  Layout big = testing::SmallLayout();
  big.kv_heads = 2;  // 8 KiB blocks share the arenas with 4 KiB ones
  const NamespaceId nss[2] = {*engine->AddNamespace({"m", "", testing::SmallLayout()}),
                              *engine->AddNamespace({"m", "big", big})};

  std::set<std::pair<NamespaceId, BlockKey>> committed;  // may be visible
  std::vector<OpenWrite> writes;
  std::vector<OpenRead> reads;

  auto pick_tier = [&] { return rng() % 2 ? TierKind::kDevice : TierKind::kHost; };
  auto visible = [&](NamespaceId ns, const BlockKey& k) {
    return engine->Lookup(ns, std::span(&k, 1))->hits == 1;
  };

  for (int step = 0; step < 20000; ++step) {
    const NamespaceId ns = nss[rng() % 2];
    const auto keys = RandomChain(rng, 1 + rng() % kDepth);
    switch (rng() % 10) {
      case 0:
      case 1: {  // allocate; fill; keep open
        if (writes.size() >= 4) break;
        auto a = engine->Allocate(ns, std::nullopt, keys, pick_tier());
        if (!a.ok()) {
          ASSERT_EQ(a.status().code(), StatusCode::kResourceExhausted) << a.status().ToString();
          break;
        }
        for (size_t i = 0; i < a->size(); ++i) {
          if (a->state(i) == WriteState::kAllocated) {
            Fill(a->Bytes(i), keys[i]);
            ASSERT_FALSE(visible(ns, keys[i])) << "uncommitted block visible";
          }
          if (a->state(i) == WriteState::kExists) {
            ASSERT_TRUE(committed.count({ns, keys[i]}));
          }
        }
        writes.push_back({ns, keys, std::move(*a)});
        break;
      }
      case 2: {  // commit, abort or drop an open write
        if (writes.empty()) break;
        const size_t w = rng() % writes.size();
        OpenWrite& ow = writes[w];
        const int how = static_cast<int>(rng() % 3);
        if (how == 0) {
          for (size_t i = 0; i < ow.allocation.size(); ++i) {
            if (ow.allocation.state(i) == WriteState::kAllocated)
              committed.insert({ow.ns, ow.keys[i]});
          }
          ASSERT_TRUE(ow.allocation.Commit().ok());
        } else if (how == 1) {
          ow.allocation.Abort();
        }  // else: destroyed below, which aborts
        writes.erase(writes.begin() + static_cast<ptrdiff_t>(w));
        break;
      }
      case 3:
      case 4: {  // acquire into a tier and keep the lease
        if (reads.size() >= 3) break;
        auto lease = engine->Acquire(ns, keys, pick_tier());
        ASSERT_TRUE(lease.ok()) << lease.status().ToString();
        std::vector<BlockKey> got(keys.begin(),
                                  keys.begin() + static_cast<ptrdiff_t>(lease->size()));
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(committed.count({ns, got[i]})) << "served a block never committed";
          ASSERT_TRUE(Matches(lease->Bytes(i), got[i])) << "wrong bytes, step " << step;
        }
        reads.push_back({ns, std::move(got), std::move(*lease)});
        break;
      }
      case 5: {  // release a lease
        if (reads.empty()) break;
        const size_t r = rng() % reads.size();
        if (rng() % 2) reads[r].lease.Release();
        reads.erase(reads.begin() + static_cast<ptrdiff_t>(r));
        break;
      }
      case 6: {  // remove a key
        const BlockKey k = keys.back();
        auto removed = engine->Remove(ns, std::span(&k, 1));
        ASSERT_TRUE(removed.ok());
        if (*removed == 1) {
          ASSERT_TRUE(committed.count({ns, k}));
        }
        committed.erase({ns, k});
        ASSERT_FALSE(visible(ns, k));
        break;
      }
      case 7: {  // hint a chain, withdraw hints, or end a worker's hints
        const uint64_t owner = 1 + rng() % 2;
        const int how = static_cast<int>(rng() % 6);
        if (how == 0) {
          engine->DropHints(owner);
          ASSERT_EQ(engine->hinted_by(owner), 0u);
        } else if (how == 1) {
          ASSERT_TRUE(engine->Unhint(owner, ns, keys).ok());
        } else {
          const TimeNs ttl = static_cast<TimeNs>(rng() % 50) * kNsPerMs;
          auto h = engine->Hint(owner, ns, keys, SystemClock().Now() + ttl);
          ASSERT_TRUE(h.ok()) << h.status().ToString();
          ASSERT_LE(h->protected_blocks, keys.size());
        }
        break;
      }
      default: {  // put a whole chain
        auto a = engine->Allocate(ns, std::nullopt, keys, pick_tier());
        if (!a.ok()) break;
        for (size_t i = 0; i < a->size(); ++i) {
          if (a->state(i) == WriteState::kAllocated) {
            Fill(a->Bytes(i), keys[i]);
            committed.insert({ns, keys[i]});
          }
        }
        ASSERT_TRUE(a->Commit().ok());
      }
    }

    // What must hold after every step.
    const Status inv = engine->CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "step " << step << ": " << inv.ToString();
    const EngineStats s = engine->Stats();
    for (const TierStats& t : s.tiers) ASSERT_LE(t.used_bytes, t.capacity_bytes);
    for (const OpenRead& r : reads) {
      // Leased blocks stay, in place, with their bytes. They stay visible
      // unless removed, or orphaned by the removal of an ancestor (pinned
      // orphans go at their last release).
      bool ancestors_visible = true;
      for (size_t i = 0; i < r.keys.size(); ++i) {
        ASSERT_TRUE(Matches(r.lease.Bytes(i), r.keys[i])) << "leased bytes changed";
        const bool v = visible(r.ns, r.keys[i]);
        if (committed.count({r.ns, r.keys[i]}) && ancestors_visible) {
          ASSERT_TRUE(v) << "leased block vanished, step " << step;
        }
        ancestors_visible = ancestors_visible && v;
      }
    }
    // Every visible key was committed and not removed; and a visible block's
    // parent is visible too unless the block is leased (no orphan survives
    // its pins).
    const auto probe = RandomChain(rng, kDepth);
    const NamespaceId pns = nss[rng() % 2];
    for (size_t i = 0; i < probe.size(); ++i) {
      if (!visible(pns, probe[i])) continue;
      ASSERT_TRUE(committed.count({pns, probe[i]})) << "visible key never committed";
    }
    const size_t hits = engine->Lookup(pns, probe)->hits;
    for (size_t i = 0; i < hits; ++i) ASSERT_TRUE(visible(pns, probe[i]));
  }

  writes.clear();
  reads.clear();
  const EngineStats end = engine->Stats();
  EXPECT_EQ(end.pending_blocks, 0u);
  EXPECT_EQ(end.open_leases, 0u);
  EXPECT_EQ(end.open_allocations, 0u);
  for (const TierStats& t : end.tiers) EXPECT_EQ(t.pinned_blocks, 0u);
  EXPECT_TRUE(engine->CheckInvariants().ok());
  // The run exercised the interesting paths.
  EXPECT_GT(end.tiers[0].evictions, 0u);
  EXPECT_GT(end.tiers[1].demotions_in, 0u);
  EXPECT_GT(end.tiers[0].promotions_in + end.tiers[1].promotions_in, 0u);
  EXPECT_GT(end.dropped_blocks, 0u);
  EXPECT_GT(end.orphan_drops, 0u);
  RecordProperty("evictions", std::to_string(end.tiers[0].evictions + end.tiers[1].evictions));
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomEngineTest, ::testing::Values(1, 2, 3, 4, 5, 6));

}  // namespace
}  // namespace kvtier::engine

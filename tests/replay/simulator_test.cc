// Simulate mode against the recorded traces the project carries (tests/data):
// LRU reproduces the published Mooncake numbers, and OPT bounds every policy.
#include "replay/simulator.h"

#include <gtest/gtest.h>

#include <cmath>

#include "eviction/eviction_policy.h"

namespace kvtier::replay {
namespace {

const std::string kTraces = KVTIER_TEST_DATA_DIR;

// The traces are part of the repository: a missing one is a failure, not a skip.
Trace Load(std::vector<std::string> files) {
  auto t = ReadTraces(files);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : Trace{};
}

TEST(SimulatorTest, LruReproducesMooncakesPublishedHitRates) {
  const Trace trace = Load({kTraces + "/mooncake_synthetic_trace.jsonl"});
  ASSERT_FALSE(trace.requests.empty());
  ASSERT_EQ(trace.requests.size(), 3993u);
  ASSERT_EQ(trace.block_refs, 121877u);
  // Mooncake FAST'25, Figure 9: capacity in tokens -> token hit rate.
  const std::pair<double, double> published[] = {{1e5, .012}, {1e6, .146}, {2e6, .235},
                                                 {4e6, .380}, {5e6, .435}, {8e6, .545},
                                                 {1e7, .589}, {5e7, .658}};
  for (const auto& [tokens, want] : published) {
    SimConfig c;
    c.policy = "lru";
    c.host_blocks = static_cast<uint64_t>(std::llround(tokens / 512));
    auto r = Simulate(trace, c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_NEAR(r->token_hit_rate(), want, 0.015) << "capacity " << tokens << " tokens";
    RecordProperty("lru_" + std::to_string(static_cast<uint64_t>(tokens)),
                   std::to_string(r->token_hit_rate()));
  }
}

TEST(SimulatorTest, OptBoundsEveryPolicyAtEveryCapacity) {
  std::vector<std::vector<std::string>> traces = {{kTraces + "/mooncake_synthetic_trace.jsonl"}};
  for (const char* f : {"trace_0180", "trace_0239", "trace_0298", "trace_0357", "trace_0534",
                        "trace_0593", "trace_0652", "trace_0711"}) {
    traces.push_back({kTraces + "/kv-cache-tester/" + f + ".json"});
  }
  for (const auto& files : traces) {
    const Trace trace = Load(files);
    ASSERT_FALSE(trace.requests.empty());
    for (uint64_t blocks : {200u, 2000u, 20000u}) {
      SimConfig opt;
      opt.policy = "opt";
      opt.host_blocks = blocks;
      auto bound = Simulate(trace, opt);
      ASSERT_TRUE(bound.ok());
      for (std::string_view name : eviction::PolicyNames()) {
        SimConfig c;
        c.policy = std::string(name);
        c.host_blocks = blocks;
        auto r = Simulate(trace, c);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_GE(bound->block_hit_rate() + 1e-9, r->block_hit_rate())
            << name << " beats OPT on " << files[0] << " at " << blocks << " blocks";
      }
    }
  }
}

TEST(SimulatorTest, MoreCapacityNeverHurtsLruAndTiersAddUp) {
  const Trace trace = Load({kTraces + "/mooncake_synthetic_trace.jsonl"});
  ASSERT_FALSE(trace.requests.empty());
  SimConfig one;
  one.host_blocks = 4000;
  auto host_only = Simulate(trace, one);
  SimConfig two = one;
  two.ssd_blocks = 16000;
  auto with_ssd = Simulate(trace, two);
  ASSERT_TRUE(host_only.ok() && with_ssd.ok());
  EXPECT_GT(with_ssd->block_hit_rate(), host_only->block_hit_rate());
  EXPECT_GT(with_ssd->demotions, 0u);
  EXPECT_GT(with_ssd->promotions, 0u);
  EXPECT_EQ(with_ssd->hits_per_tier[1] + with_ssd->hits_per_tier[2], with_ssd->block_hits);
  EXPECT_EQ(with_ssd->capacity_blocks, 20000u);
  EXPECT_EQ(with_ssd->bytes_moved, with_ssd->blocks_moved * (2u << 20));
}

}  // namespace
}  // namespace kvtier::replay

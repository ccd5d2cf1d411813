// Simulate mode against the recorded traces the project carries (tests/data):
// LRU reproduces the published Mooncake numbers, and OPT bounds every policy.
#include "replay/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <list>
#include <map>
#include <unordered_map>

#include "eviction/eviction_policy.h"
#include "replay/report.h"
#include "support/trace_util.h"

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

TEST(SimulatorTest, QuantizeLowerFitsNearlyTwiceTheBlocksOnTheSsdAndMovesFewerBytes) {
  const Trace trace = Load({kTraces + "/mooncake_synthetic_trace.jsonl"});
  ASSERT_FALSE(trace.requests.empty());
  SimConfig plain;
  plain.host_blocks = 4000;
  plain.ssd_blocks = 4000;
  SimConfig quantized = plain;
  quantized.quantize_lower = Quantize::kFp8E4M3;
  auto p = Simulate(trace, plain);
  auto q = Simulate(trace, quantized);
  ASSERT_TRUE(p.ok() && q.ok()) << q.status().ToString();
  EXPECT_GT(q->block_hit_rate(), p->block_hit_rate());
  // 4000 blocks of 2 MiB on the ssd are 7968 fp8 blocks: 1 MiB of values
  // and 8 bytes of scales (this 1-layer, 1-head block), a 1 MiB + 4 KiB
  // slot. LRU decides by recency alone, so the run is the plain one with
  // that many ssd blocks, hit for hit and move for move...
  SimConfig wide = plain;
  wide.ssd_blocks = (4000ULL << 21) / ((1ULL << 20) + 4096);
  ASSERT_EQ(wide.ssd_blocks, 7968u);
  auto w = Simulate(trace, wide);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(q->block_hits, w->block_hits);
  EXPECT_EQ(q->hits_per_tier[2], w->hits_per_tier[2]);
  EXPECT_EQ(q->demotions, w->demotions);
  EXPECT_EQ(q->promotions, w->promotions);
  // ...except for the bytes: each block goes down at its fp8 size and comes
  // back up whole.
  EXPECT_EQ(q->bytes_moved, q->demotions * ((1ULL << 20) + 8) + q->promotions * (2ULL << 20));
  EXPECT_LT(q->bytes_moved, w->bytes_moved);
  // opt has no tiers to keep in fp8.
  SimConfig opt = quantized;
  opt.policy = "opt";
  EXPECT_EQ(Simulate(trace, opt).status().code(), StatusCode::kInvalidArgument);
}

// A request longer than the cache: the prefix cache keeps its head and hits
// it; textbook per-block LRU cycles through it and never hits; Belady's MIN
// keeps one block of it.
TEST(SimulatorTest, PerBlockCountsAreTheTextbookOnes) {
  Trace trace;
  trace.block_tokens = 16;
  for (int i = 0; i < 2; ++i) {
    TraceRequest r;
    r.time_s = i;
    r.input_tokens = 48;
    r.blocks = {1, 2, 3};
    trace.requests.push_back(r);
  }
  NameBlocksByNumber(&trace);
  ASSERT_EQ(trace.block_refs, 6u);
  std::map<std::string, SimResult> got;
  for (const char* policy : {"lru", "opt"}) {
    SimConfig c;
    c.policy = policy;
    c.host_blocks = 2;
    c.per_block = true;
    auto r = Simulate(trace, c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->per_block);
    got[policy] = *r;
  }
  EXPECT_EQ(got["lru"].block_hits, 2u);      // the engine: blocks 1 and 2 again
  EXPECT_EQ(got["lru"].per_block_hits, 0u);  // 1 2 3 1 2 3 through 2 slots
  EXPECT_EQ(got["opt"].per_block_hits, 2u);  // MIN: 1 stays, then 3
  SimConfig plain;
  plain.host_blocks = 2;
  auto r = Simulate(trace, plain);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->per_block);
  EXPECT_EQ(r->per_block_hits, 0u);
}

// The per-block counts against independent textbook simulators written here:
// LRU with a list on the Mooncake trace, Belady's MIN by scanning every
// cached block's next use on a coding-agent session.
TEST(SimulatorTest, PerBlockCountsMatchIndependentSimulators) {
  const Trace mooncake = Load({kTraces + "/mooncake_synthetic_trace.jsonl"});
  ASSERT_FALSE(mooncake.requests.empty());
  for (uint64_t cap : {500u, 5000u}) {
    std::list<uint64_t> order;  // front: most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
    uint64_t hits = 0;
    for (const TraceRequest& r : mooncake.requests) {
      for (uint64_t id : r.blocks) {  // a number per (file, id): as good as the id
        auto it = where.find(id);
        if (it != where.end()) {
          ++hits;
          order.erase(it->second);
        } else if (where.size() == cap) {
          where.erase(order.back());
          order.pop_back();
        }
        order.push_front(id);
        where[id] = order.begin();
      }
    }
    for (const char* policy : {"lru", "leaf-lru"}) {  // no children per block: the same
      SimConfig c;
      c.policy = policy;
      c.host_blocks = cap;
      c.per_block = true;
      auto r = Simulate(mooncake, c);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->per_block_hits, hits) << policy << " at " << cap;
      EXPECT_GT(r->block_hits, 0u);
    }
  }

  const Trace session = Load({kTraces + "/kv-cache-tester/trace_0180.json"});
  ASSERT_FALSE(session.requests.empty());
  std::vector<uint64_t> refs;
  for (const TraceRequest& r : session.requests)
    refs.insert(refs.end(), r.blocks.begin(), r.blocks.end());
  const uint64_t cap = 100;
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> next(refs.size(), kNever);
  std::unordered_map<uint64_t, uint64_t> seen_at;
  for (size_t i = refs.size(); i-- > 0;) {
    auto it = seen_at.find(refs[i]);
    if (it != seen_at.end()) next[i] = it->second;
    seen_at[refs[i]] = i;
  }
  uint64_t min_hits = 0;
  std::vector<std::pair<uint64_t, uint64_t>> cached;  // (id, next use), scanned whole
  for (size_t i = 0; i < refs.size(); ++i) {
    auto it = std::find_if(cached.begin(), cached.end(),
                           [&](const auto& c) { return c.first == refs[i]; });
    if (it != cached.end()) {
      ++min_hits;
      it->second = next[i];
      continue;
    }
    if (cached.size() == cap) {
      cached.erase(std::max_element(cached.begin(), cached.end(), [](const auto& a, const auto& b) {
        return a.second < b.second;
      }));
    }
    cached.emplace_back(refs[i], next[i]);
  }
  SimConfig c;
  c.policy = "opt";
  c.host_blocks = cap;
  c.per_block = true;
  auto opt = Simulate(session, c);
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(opt->per_block_hits, min_hits);
  // MIN bounds every policy's per-block count.
  for (std::string_view name : eviction::PolicyNames()) {
    SimConfig p = c;
    p.policy = std::string(name);
    auto r = Simulate(session, p);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(r->per_block_hits, min_hits) << name;
  }
}

// Admission on the Mooncake trace (58 % of its blocks are used once): the
// oracle, which admits a block only if it comes back within 4 capacities'
// worth of references, keeps more of what is reused than LRU admitting
// everything, and stays under OPT; "seen" filters too (it refuses blocks);
// the reports carry the refusals and the share of the gap closed.
TEST(SimulatorTest, AdmissionFiltersKeepOneOffBlocksOut) {
  const Trace trace = Load({kTraces + "/mooncake_synthetic_trace.jsonl"});
  std::vector<SimResult> all;
  for (const char* policy : {"lru", "opt"}) {
    for (const char* admission : {"off", "seen", "oracle"}) {
      if (std::string(policy) == "opt" && std::string(admission) != "off") continue;
      SimConfig c;
      c.policy = policy;
      c.host_blocks = 7813;
      c.admission = admission;
      auto r = Simulate(trace, c);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      all.push_back(*r);
    }
  }
  const SimResult& lru = all[0];
  const SimResult& seen = all[1];
  const SimResult& oracle = all[2];
  const SimResult& opt = all[3];
  EXPECT_EQ(lru.admission_refused, 0u);
  EXPECT_GT(seen.admission_refused, 0u);
  EXPECT_GT(oracle.admission_refused, 0u);
  EXPECT_EQ(oracle.label(), "lru/oracle");
  // Measured: lru 0.368, oracle 0.482, opt 0.592.
  EXPECT_GT(oracle.block_hit_rate(), lru.block_hit_rate() + 0.05);
  EXPECT_LE(oracle.block_hit_rate(), opt.block_hit_rate());
  EXPECT_NE(seen.block_hits, lru.block_hits);
  const std::string table = FormatTable(all);
  EXPECT_NE(table.find("not admitted"), std::string::npos) << table;
  EXPECT_NE(table.find("share of the gap to OPT closed by admission"), std::string::npos) << table;
  const std::string csv = FormatCsv(all);
  EXPECT_NE(csv.find(",admission,admission_refused,gap_closed\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",oracle," + std::to_string(oracle.admission_refused) + ",0."),
            std::string::npos)
      << csv;

  // What cannot be asked: OPT admits as it sees fit, the oracle takes no
  // hints, an unknown filter is named.
  SimConfig c;
  c.host_blocks = 100;
  c.policy = "opt";
  c.admission = "seen";
  EXPECT_EQ(Simulate(trace, c).status().code(), StatusCode::kInvalidArgument);
  c.policy = "lru";
  c.admission = "oracle";
  c.lookahead_requests = 1;
  EXPECT_EQ(Simulate(trace, c).status().code(), StatusCode::kInvalidArgument);
  c.lookahead_requests = 0;
  c.admission = "never";
  const auto unknown = Simulate(trace, c);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown admission filter 'never'"),
            std::string_view::npos);
}

// A trace of one-block requests, (block, time in seconds) each.
Trace OneBlockRequests(const std::vector<std::pair<uint32_t, double>>& requests) {
  Trace t;
  t.block_tokens = 16;
  for (const auto& [block, time] : requests) {
    TraceRequest r;
    r.blocks = {block};
    r.time_s = time;
    r.input_tokens = 16;
    t.requests.push_back(r);
  }
  NameBlocksByNumber(&t);
  return t;
}

// The engine runs on the trace's clock: LFU's counts halve every minute of
// the trace, not of the machine (whose replay lasts milliseconds). Block 1
// is asked 10 times at the start, block 2 twice 1,000 s later; block 3 then
// needs one of their two places: on the trace's clock 1's count has decayed
// to nothing and it goes (its last request misses), where a clock standing
// still would have kept it over 2.
TEST(SimulatorTest, TheEngineRunsOnTheTracesClock) {
  std::vector<std::pair<uint32_t, double>> requests;
  for (int i = 0; i < 10; ++i) requests.emplace_back(1, i);
  requests.insert(requests.end(), {{2, 1000}, {2, 1001}, {3, 1002}, {1, 1003}});
  SimConfig c;
  c.policy = "lfu";
  c.host_blocks = 2;
  auto r = Simulate(OneBlockRequests(requests), c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->block_hits, 9u + 1u);  // 1's nine repeats, 2's second; not 1's last
}

// The ssd's endurance budget in replay: a day's budget of 240 blocks holds
// an hour's share, 10 blocks, refilled at 240 a day (nothing in the trace's
// 100 s): of 99 blocks leaving a one-block host, 10 reach the ssd and 89
// are dropped, counted.
TEST(SimulatorTest, TheSsdWriteBudgetBoundsDemotionsOnTheTracesClock) {
  std::vector<std::pair<uint32_t, double>> requests;
  for (uint32_t i = 0; i < 100; ++i) requests.emplace_back(i, i);
  SimConfig c;
  c.policy = "lru";
  c.host_blocks = 1;
  c.ssd_blocks = 1000;
  c.block_bytes = 1 << 20;
  c.ssd_write_budget_per_day = 240 * c.block_bytes;
  auto r = Simulate(OneBlockRequests(requests), c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->demotions, 10u);
  EXPECT_EQ(r->ssd_budget_refused, 89u);
  c.ssd_write_budget_per_day = 0;  // no budget: every one
  r = Simulate(OneBlockRequests(requests), c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->demotions, 99u);
  EXPECT_EQ(r->ssd_budget_refused, 0u);
}

}  // namespace
}  // namespace kvtier::replay

// Simulate mode with lookahead (SimConfig::lookahead_requests/_seconds): the
// waiting queue's hints on a cyclic scan just larger than the cache, where
// plain LRU evicts every prompt just before it comes back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "replay/report.h"
#include "replay/simulator.h"
#include "support/trace_util.h"

namespace kvtier::replay {
namespace {

constexpr uint64_t kPrompts = 10;  // distinct prompts, cycled
constexpr uint64_t kBlocks = 4;    // blocks per prompt
constexpr uint64_t kRounds = 20;

// Prompt p (of `prompts`, kBlocks blocks each, no shared prefix), request
// i at i seconds: a cyclic scan of prompts * kBlocks blocks (40 by default).
Trace CyclicScan(uint64_t prompts = kPrompts) {
  Trace trace;
  trace.block_tokens = 16;
  for (uint64_t i = 0; i < prompts * kRounds; ++i) {
    TraceRequest r;
    r.time_s = static_cast<double>(i);
    r.input_tokens = kBlocks * 16;
    for (uint64_t b = 0; b < kBlocks; ++b) {
      r.blocks.push_back(static_cast<uint32_t>((i % prompts) * 100 + b));
    }
    trace.requests.push_back(std::move(r));
  }
  NameBlocksByNumber(&trace);
  return trace;
}

SimResult Replay(const Trace& trace, uint64_t blocks, uint64_t requests, double seconds = 0,
                 const std::string& policy = "lru") {
  SimConfig c;
  c.policy = policy;
  c.host_blocks = blocks;
  c.lookahead_requests = requests;
  c.lookahead_seconds = seconds;
  auto r = Simulate(trace, c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : SimResult{};
}

// 36 blocks hold 9 of the 10 prompts: LRU always evicts the prompt that
// comes next and never hits after the first round. A queue of one request
// protects the next prompt, so the write evicts the one after it instead.
TEST(LookaheadTest, OneRequestRecoversTheHitsLruLosesToAScan) {
  const Trace trace = CyclicScan();
  const SimResult lru = Replay(trace, 36, 0);
  const SimResult ahead = Replay(trace, 36, 1);
  EXPECT_EQ(lru.block_hits, 0u);
  // Every other request hits, whole, once the cycle runs.
  EXPECT_GE(ahead.block_hits, (kRounds - 1) * kPrompts / 2 * kBlocks - kBlocks);
  EXPECT_GT(ahead.hinted_blocks, 0u);
  EXPECT_GT(ahead.hints_used, 0u);
  EXPECT_EQ(ahead.lookahead_requests, 1u);
  EXPECT_EQ(ahead.label(), "lru+1req");
  const SimResult opt = Replay(trace, 36, 0, 0, "opt");
  EXPECT_GE(opt.block_hits, ahead.block_hits);
}

TEST(LookaheadTest, NeverBelowLruOnTheScanAtAnyDepthOrCapacity) {
  const Trace trace = CyclicScan();
  for (uint64_t blocks : {20u, 32u, 36u, 39u, 40u, 44u}) {
    const SimResult lru = Replay(trace, blocks, 0);
    for (uint64_t n : {1u, 2u, 3u, 5u, 9u, 20u}) {
      const SimResult ahead = Replay(trace, blocks, n);
      EXPECT_GE(ahead.block_hits, lru.block_hits) << n << " requests at " << blocks << " blocks";
    }
  }
}

TEST(LookaheadTest, ZeroIsThePlainRunExactly) {
  const Trace trace = CyclicScan();
  for (uint64_t blocks : {20u, 36u, 44u}) {
    SimConfig plain;
    plain.host_blocks = blocks;
    auto a = Simulate(trace, plain);
    const SimResult b = Replay(trace, blocks, 0, 0);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->block_hits, b.block_hits);
    EXPECT_EQ(a->hit_tokens, b.hit_tokens);
    EXPECT_EQ(a->hits_per_tier[1], b.hits_per_tier[1]);
    EXPECT_EQ(a->demotions, b.demotions);
    EXPECT_EQ(b.hinted_blocks, 0u);
    EXPECT_FALSE(b.lookahead());
    EXPECT_EQ(b.label(), "lru");
  }
}

// Requests one second apart: a queue of 1 s is a queue of one request; of
// half a second, only the running request itself, which hints nothing
// another request could evict, so it scores the plain run.
TEST(LookaheadTest, SecondsFollowTheTraceTimes) {
  Trace trace = CyclicScan();
  const SimResult lru = Replay(trace, 36, 0);
  const SimResult one = Replay(trace, 36, 1);
  const SimResult second = Replay(trace, 36, 0, 1.0);
  EXPECT_EQ(second.block_hits, one.block_hits);
  EXPECT_EQ(second.hinted_blocks, one.hinted_blocks);
  EXPECT_EQ(second.label(), "lru+1s");
  const SimResult half = Replay(trace, 36, 0, 0.5);
  EXPECT_EQ(half.block_hits, lru.block_hits);
  EXPECT_EQ(half.label(), "lru+0.5s");
  // Spread the times tenfold: 1 s now covers no other request, 10 s one.
  for (TraceRequest& r : trace.requests) r.time_s *= 10;
  EXPECT_EQ(Replay(trace, 36, 0, 1.0).block_hits, lru.block_hits);
  EXPECT_EQ(Replay(trace, 36, 0, 10.0).block_hits, one.block_hits);
}

// A queue far deeper than the cache: 3 prompts cycling through 2 prompts'
// room, queued 5 to 50 requests ahead, so that every present block is
// hinted when a request must write its prompt. The write still finds room
// (protection yields) and the run completes.
TEST(LookaheadTest, HintsNeverMakeAWriteFail) {
  const Trace trace = CyclicScan(3);
  for (uint64_t n : {5u, 20u, 50u}) {
    for (uint64_t blocks : {4u, 8u}) {
      const SimResult deep = Replay(trace, blocks, n);
      EXPECT_EQ(deep.requests, trace.requests.size());
      EXPECT_GT(deep.hinted_blocks, 0u) << n << " requests at " << blocks << " blocks";
      EXPECT_GT(deep.hints_yielded, 0u) << n << " requests at " << blocks << " blocks";
    }
  }
  const SimResult seconds = Replay(trace, 8, 0, 20.0);
  EXPECT_EQ(seconds.requests, trace.requests.size());
  EXPECT_GT(seconds.hints_yielded, 0u);
}

TEST(LookaheadTest, OptAndBothKindsAtOnceAreRefused) {
  const Trace trace = CyclicScan();
  SimConfig c;
  c.host_blocks = 36;
  c.lookahead_requests = 1;
  c.lookahead_seconds = 1;
  EXPECT_EQ(Simulate(trace, c).status().code(), StatusCode::kInvalidArgument);
  c.lookahead_seconds = 0;
  c.policy = "opt";
  EXPECT_EQ(Simulate(trace, c).status().code(), StatusCode::kInvalidArgument);
  c.policy = "lru";
  c.lookahead_requests = 0;
  c.lookahead_seconds = -1;
  EXPECT_EQ(Simulate(trace, c).status().code(), StatusCode::kInvalidArgument);
}

// The reports: lookahead runs are named by label, carry the hint counts,
// and the share of their own policy's gap to OPT they close (each against
// the same policy without hints, not against LRU); without them the reports
// have no lookahead columns.
TEST(LookaheadTest, ReportsShowTheLookaheadAndTheGapClosed) {
  const auto result = [](const std::string& policy, uint64_t requests, double hit) {
    SimResult r;
    r.policy = policy;
    r.capacity_blocks = 100;
    r.block_refs = 1000;
    r.block_hits = static_cast<uint64_t>(hit * 1000);
    r.lookahead_requests = requests;
    return r;
  };
  std::vector<SimResult> plain = {result("lru", 0, 0.2), result("lfu", 0, 0.1),
                                  result("opt", 0, 0.6)};
  for (const std::string& text : {FormatTable(plain), FormatCsv(plain), FormatJson(plain)}) {
    EXPECT_EQ(text.find("lookahead"), std::string::npos) << text;
    EXPECT_EQ(text.find("hint"), std::string::npos) << text;
  }
  std::vector<SimResult> all = plain;
  all.push_back(result("lru", 10, 0.4));
  all.push_back(result("lru", 100, 0.7));
  // lfu's hints close (0.25 - 0.1) / (0.6 - 0.1) = 0.3 of lfu's own gap; against
  // plain LRU the row would read (0.25 - 0.2) / 0.4 = 0.125.
  all.push_back(result("lfu", 1, 0.25));
  const std::string table = FormatTable(all);
  EXPECT_NE(table.find("lru+10req"), std::string::npos) << table;
  EXPECT_NE(table.find("share of the gap to OPT closed by lookahead hints, each run against its "
                       "policy without hints"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("0.500"), std::string::npos) << table;
  EXPECT_NE(table.find("1.250"), std::string::npos) << table;
  const std::string csv = FormatCsv(all);
  EXPECT_NE(csv.find(",lookahead_requests,lookahead_seconds,hinted_blocks,hints_used,"
                     "hints_yielded,gap_closed\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",10,0,0,0,0,0.500000\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1,0,0,0,0,0.300000\n"), std::string::npos) << csv;  // lfu+1req
  const std::string json = FormatJson(all);
  EXPECT_NE(json.find("\"label\": \"lru+100req\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"gap_closed\": 0.5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"gap_closed\": 0.3"), std::string::npos) << json;
  const std::string svg = FormatSvg(all, "t");
  EXPECT_NE(svg.find(">lru+10req</text>"), std::string::npos) << svg;
}

}  // namespace
}  // namespace kvtier::replay

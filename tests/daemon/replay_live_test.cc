// kvtier replay --live against the real daemon: the Mooncake trace (tests/data)
// through the real client with real bytes, every byte read back checked.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "support/daemon_harness.h"

namespace kvtier::testing {
namespace {

// The CLI with `args`: its exit status and output (Shell).
std::pair<int, std::string> RunCli(const std::string& args) {
  return Shell(std::string(KVTIER_CLI_PATH) + " " + args);
}

TEST(ReplayLiveTest, MooncakeTraceAgainstTheDaemonReadsBackEveryByte) {
  const std::string trace = KVTIER_TEST_DATA_DIR "/mooncake_synthetic_trace.jsonl";
  ASSERT_TRUE(std::filesystem::exists(trace)) << trace;
  auto d = Daemon::Start({"--host-capacity", "32MiB", "--host-slab", "1MiB"});
  ASSERT_NE(d, nullptr);
  const auto [status, text] = RunCli("replay --live --quiet --socket " + d->socket() + " --trace " +
                                     trace + " --block-bytes 4096");
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("0 wrong bytes, 0 errors"), std::string::npos) << text;
  EXPECT_NE(text.find("requests 3993"), std::string::npos) << text;
  EXPECT_NE(text.find("allocate+fill+commit"), std::string::npos) << text;
  EXPECT_TRUE(d->Alive());
}

// Every flag of a sweep is checked before the trace is read: the trace named
// here does not exist, and the error is about the flag.
TEST(ReplayFlagsTest, BadSweepFlagsAreRefusedBeforeTheTraceIsRead) {
  const std::string replay = "replay --quiet --trace /nonexistent/trace.json ";
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--capacity-blocks abc", "--capacity-blocks: \"abc\" is not a whole number"},
           {"--capacity-blocks -5", "--capacity-blocks: \"-5\" is not a whole number"},
           {"--capacity-blocks 100,0", "--capacity-blocks: \"0\" is not a whole number"},
           {"--capacity-blocks 99999999999999999999", "\"99999999999999999999\" is not"},
           {"--capacity-blocks ,", "--capacity-blocks: no capacity given"},
           {"--policies lru,nope",
            "--policies: unknown policy \"nope\" (known: opt, adaptive, lru"},
           {"--combine zip", "--combine: \"zip\" is neither interleave nor concat"},
       }) {
    const auto [status, text] = RunCli(replay + flags);
    EXPECT_EQ(status, 2) << flags << ": " << text;
    EXPECT_NE(text.find(message), std::string::npos) << flags << ": " << text;
    EXPECT_EQ(text.find("/nonexistent"), std::string::npos) << flags << ": " << text;
  }
  // Good flags get as far as the trace.
  const auto [status, text] = RunCli(replay + "--capacity-blocks 10 --policies lru,opt");
  EXPECT_EQ(status, 1) << text;
  EXPECT_NE(text.find("cannot open trace /nonexistent/trace.json"), std::string::npos) << text;
}

// --per-block adds the textbook per-block hit rate beside the prefix-cache
// counts, in the table and the CSV.
TEST(ReplayFlagsTest, PerBlockAddsTheTextbookColumn) {
  const std::string trace = KVTIER_TEST_DATA_DIR "/kv-cache-tester/trace_0180.json";
  const std::string csv = ::testing::TempDir() + "/per_block.csv";
  const auto [status, text] = RunCli("replay --quiet --per-block --trace " + trace +
                                     " --policies lru,opt --capacity-blocks 100 --csv " + csv);
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("per-block"), std::string::npos) << text;
  const auto [cat_status, table] = Shell("cat " + csv);
  EXPECT_NE(table.find(",per_block_hit_rate\n"), std::string::npos) << table;
  const auto [plain_status, plain] =
      RunCli("replay --quiet --trace " + trace + " --policies lru --capacity-blocks 100");
  EXPECT_EQ(plain_status, 0) << plain;
  EXPECT_EQ(plain.find("per-block"), std::string::npos) << plain;
}

// --lookahead-requests / --lookahead-seconds: lists like the capacities,
// checked before the trace is read; non-zero values in one of them only.
TEST(ReplayFlagsTest, BadLookaheadFlagsAreRefusedBeforeTheTraceIsRead) {
  const std::string replay = "replay --quiet --trace /nonexistent/trace.json ";
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--lookahead-requests -1", "--lookahead-requests: \"-1\" is not a whole number"},
           {"--lookahead-requests 1,x", "--lookahead-requests: \"x\" is not a whole number"},
           {"--lookahead-requests 1.5", "--lookahead-requests: \"1.5\" is not a whole number"},
           {"--lookahead-requests ,", "--lookahead-requests: no value given"},
           {"--lookahead-seconds -2", "--lookahead-seconds: \"-2\" is not a number of seconds"},
           {"--lookahead-seconds inf", "--lookahead-seconds: \"inf\" is not a number"},
           {"--lookahead-seconds 1s", "--lookahead-seconds: \"1s\" is not a number"},
           {"--lookahead-requests 0,10 --lookahead-seconds 60",
            "--lookahead-requests and --lookahead-seconds: a queue is measured in requests or "
            "in seconds"},
       }) {
    const auto [status, text] = RunCli(replay + flags);
    EXPECT_EQ(status, 2) << flags << ": " << text;
    EXPECT_NE(text.find(message), std::string::npos) << flags << ": " << text;
    EXPECT_EQ(text.find("/nonexistent"), std::string::npos) << flags << ": " << text;
  }
  // Zeros beside the other kind's values are fine.
  const auto [status, text] =
      RunCli(replay + "--lookahead-requests 0 --lookahead-seconds 0,1.5,60");
  EXPECT_EQ(status, 1) << text;
  EXPECT_NE(text.find("cannot open trace /nonexistent/trace.json"), std::string::npos) << text;
}

// A lookahead sweep: one run per (policy, capacity, lookahead), opt once,
// labelled beside the policy, with the share of the gap to OPT closed.
TEST(ReplayFlagsTest, LookaheadRunsAreLabelledAndMeasuredAgainstTheGap) {
  const std::string trace = KVTIER_TEST_DATA_DIR "/kv-cache-tester/trace_0180.json";
  const std::string csv = ::testing::TempDir() + "/lookahead.csv";
  const auto [status, text] = RunCli(
      "replay --quiet --trace " + trace +
      " --policies lru,opt --capacity-blocks 100,1000 --lookahead-requests 0,10 --csv " + csv);
  EXPECT_EQ(status, 0) << text;
  EXPECT_NE(text.find("lru+10req"), std::string::npos) << text;
  EXPECT_NE(text.find("share of the gap to OPT closed by lookahead hints"), std::string::npos)
      << text;
  const auto [cat_status, table] = Shell("cat " + csv);
  EXPECT_NE(table.find(",gap_closed\n"), std::string::npos) << table;
  size_t rows = 0;
  for (char ch : table) rows += ch == '\n';
  EXPECT_EQ(rows, 1u + 2 * 2 + 2) << table;  // header, lru x 2 lookaheads, opt once, x 2 capacities
}

}  // namespace
}  // namespace kvtier::testing

#include "replay/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/temp_dir.h"

namespace kvtier::replay {

using kvtier::testing::TempDir;
namespace {

class TraceTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }
  TempDir dir_{"/tmp/kvtier-trace"};
};

TEST_F(TraceTest, ReadsMooncakeJsonl) {
  const auto p = Write("m.jsonl",
                       "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, "
                       "\"hash_ids\": [0, 1]}\n"
                       "{\"timestamp\": 2500, \"input_length\": 600, \"output_length\": 1, "
                       "\"hash_ids\": [0]}\n");
  auto t = ReadTraces(std::vector<std::string>{p});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->block_tokens, 512u);
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t->requests[1].time_s, 2.5);  // milliseconds
  EXPECT_EQ(t->IdsOf(t->requests[0]), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(t->block_refs, 3u);
}

TEST_F(TraceTest, ReadsKvCacheTesterWithNestedSubAgents) {
  const auto p = Write("k.json",
                       R"({"id":"x","block_size":64,"hash_id_scope":"local","requests":[
          {"t":1.0,"in":128,"out":3,"hash_ids":[1,2],
           "requests":[{"t":0.5,"in":64,"out":1,"hash_ids":[1]}]},
          {"t":3.0,"in":64,"out":1,"hash_ids":[9]}]})");
  auto t = ReadTraces(std::vector<std::string>{p});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->block_tokens, 64u);
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[1].time_s, 1.5);  // relative to its parent request
  EXPECT_EQ(t->IdsOf(t->requests[2]), (std::vector<uint64_t>{9}));
}

// kv-cache-tester's recorded sessions: a sub-agent is an entry of its own,
// with a start time and requests timed from it, and no "in" or "hash_ids".
TEST_F(TraceTest, ReadsKvCacheTesterSubAgentEntries) {
  const auto p = Write("s.json", R"({"block_size":64,"requests":[
          {"t":1.0,"in":128,"out":3,"hash_ids":[1,2]},
          {"t":2.0,"type":"subagent","requests":[
             {"t":0.25,"in":64,"out":1,"hash_ids":[1,5]},
             {"t":0.5,"requests":[{"t":0.125,"in":64,"out":1,"hash_ids":[6]}]}]},
          {"t":4.0,"in":192,"out":1,"hash_ids":[1,2,3]}]})");
  auto t = ReadTraces(std::vector<std::string>{p});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 4u);               // the sub-agent entries are not requests
  EXPECT_DOUBLE_EQ(t->requests[1].time_s, 2.25);   // its start + its own t
  EXPECT_DOUBLE_EQ(t->requests[2].time_s, 2.625);  // nested: 2 + 0.5 + 0.125
  EXPECT_EQ(t->IdsOf(t->requests[1]), (std::vector<uint64_t>{1, 5}));  // the parent's id space
  EXPECT_EQ(t->requests[1].file, t->requests[0].file);
  EXPECT_EQ(t->block_refs, 8u);
  // An entry with neither a request's fields nor a sub-agent's is still refused.
  auto bad = ReadTraces(std::vector<std::string>{
      Write("b.json", R"({"block_size":64,"requests":[{"t":1.0,"requests":{}}]})")});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("b.json:requests[0]: a request needs t, in and hash_ids"),
            std::string_view::npos)
      << bad.status().ToString();
}

TEST_F(TraceTest, FilesInterleaveByTimeOrRunOneAfterAnother) {
  const std::vector<std::string> files = {
      Write("a.json", R"({"block_size":64,"requests":[{"t":0,"in":64,"hash_ids":[1]},
                                                        {"t":5,"in":64,"hash_ids":[2]}]})"),
      Write("b.json", R"({"block_size":64,"requests":[{"t":1,"in":64,"hash_ids":[3]},
                                                        {"t":2,"in":64,"hash_ids":[4]}]})")};
  auto mixed = ReadTraces(files);  // interleave: both from their own t
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  std::vector<uint64_t> order;
  for (const TraceRequest& r : mixed->requests) order.push_back(mixed->blocks[r.blocks[0]].id);
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 3, 4, 2}));
  auto concat = ReadTraces(files, Combine::kConcat);
  ASSERT_TRUE(concat.ok()) << concat.status().ToString();
  order.clear();
  std::vector<double> times;
  for (const TraceRequest& r : concat->requests) {
    order.push_back(concat->blocks[r.blocks[0]].id);
    times.push_back(r.time_s);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(times, (std::vector<double>{0, 5, 5, 6}));  // b starts where a ended
  EXPECT_NE(concat->requests[1].file, concat->requests[2].file);
}

TEST_F(TraceTest, FilesGetTheirOwnIdSpaces) {
  const std::string body = R"({"block_size":64,"requests":[{"t":0,"in":64,"hash_ids":[7]}]})";
  const std::vector<std::string> files = {Write("a.json", body), Write("b.json", body)};
  auto t = ReadTraces(files);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_NE(t->requests[0].file, t->requests[1].file);
}

TEST_F(TraceTest, MalformedInputIsAClearError) {
  auto bad_line = ReadTraces(std::vector<std::string>{Write(
      "bad.jsonl", "{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": [0]}\nnot json\n")});
  ASSERT_FALSE(bad_line.ok());
  EXPECT_NE(bad_line.status().message().find("bad.jsonl:2"), std::string_view::npos)
      << bad_line.status().ToString();
  EXPECT_FALSE(ReadTraces(std::vector<std::string>{Write("n.jsonl", "{\"timestamp\": 0}\n")}).ok());
  EXPECT_FALSE(ReadTraces(std::vector<std::string>{dir_ / "missing.json"}).ok());
  // Mixed block sizes cannot be replayed together.
  const std::vector<std::string> mixed = {
      Write("a.json", R"({"block_size":64,"requests":[{"t":0,"in":64,"hash_ids":[1]}]})"),
      Write("m.jsonl", "{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [1]}\n")};
  EXPECT_FALSE(ReadTraces(mixed).ok());
}

// Each wrong field is named with what it holds: a negative input_length once
// read "a request needs timestamp, input_length and hash_ids", all three there.
TEST_F(TraceTest, AWrongFieldIsNamedWithItsValue) {
  const auto message = [&](const std::string& line) {
    auto t = ReadTraces(std::vector<std::string>{Write("f.jsonl", line + "\n")});
    EXPECT_FALSE(t.ok()) << line;
    return t.ok() ? std::string() : std::string(t.status().message());
  };
  EXPECT_EQ(message(R"({"timestamp": 0, "input_length": -512, "hash_ids": [1]})"),
            dir_ / "f.jsonl" + ":1: input_length is -512, not a non-negative integer");
  EXPECT_NE(message(R"({"timestamp": 0, "input_length": 1.5, "hash_ids": [1]})")
                .find("input_length is 1.5, not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(message(R"({"timestamp": "x", "input_length": 1, "hash_ids": [1]})")
                .find("timestamp is \"x\", not a number"),
            std::string::npos);
  EXPECT_NE(message(R"({"timestamp": 0, "input_length": 1, "hash_ids": 7})")
                .find("hash_ids is not a list"),
            std::string::npos);
  EXPECT_NE(message(R"({"timestamp": 0, "hash_ids": [1]})")
                .find("a request needs timestamp, input_length and hash_ids; input_length is "
                      "missing"),
            std::string::npos);
}

// Inputs that used to read into a trace its users cannot handle, or crash
// the reader; fuzz/corpus/trace/regress-* hold them for trace_fuzzer too.
TEST_F(TraceTest, HostileInputIsAClearErrorNamingTheFile) {
  auto expect_error = [&](const std::string& name, const std::string& text,
                          const std::string& why) {
    auto t = ReadTraces(std::vector<std::string>{Write(name, text)});
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_NE(t.status().message().find(name), std::string_view::npos) << t.status().ToString();
    EXPECT_NE(t.status().message().find(why), std::string_view::npos) << t.status().ToString();
  };
  // A block size of 0 (or one past 32 bits, which used to wrap to 0) made
  // `kvtier replay --live` divide by zero.
  expect_error("zero.json", R"({"block_size":0,"requests":[]})", "block_size");
  expect_error("wrap.json", R"({"block_size":4294967296,"requests":[]})", "block_size");
  // "requests" of another type was a type_error without the file's name.
  expect_error("obj.json", R"({"block_size":64,"requests":{"t":0}})", "not an array");
  // Sub-agent times add up past any clock a replay can sleep on (to inf).
  expect_error("inf.json",
               R"({"block_size":64,"requests":[{"t":1e308,"in":1,"hash_ids":[],
                   "requests":[{"t":1e308,"in":1,"hash_ids":[]}]}]})",
               "1e9 s");
  expect_error("late.jsonl", "{\"timestamp\": 1e13, \"input_length\": 1, \"hash_ids\": []}\n",
               "1e9 s");
  // Sub-agents nested 20,000 deep overflowed the stack of the reader.
  std::string deep = R"({"block_size":64,"requests":[)";
  for (int i = 0; i < 20000; ++i) deep += R"({"t":0,"in":1,"hash_ids":[],"requests":[)";
  deep += R"({"t":0,"in":1,"hash_ids":[]})";
  for (int i = 0; i < 20000; ++i) deep += "]}";
  deep += "]}";
  expect_error("deep.json", deep, "nested deeper than 64");
}

TEST_F(TraceTest, SubAgentsNestedSixtyFourDeepAreRead) {
  std::string text = R"({"block_size":64,"requests":[)";
  for (int i = 0; i < 64; ++i) text += R"({"t":1,"in":64,"hash_ids":[1],"requests":[)";
  text += R"({"t":1,"in":64,"hash_ids":[1]})";
  for (int i = 0; i < 64; ++i) text += "]}";
  text += "]}";
  auto t = ReadTraces(std::vector<std::string>{Write("deep.json", text)});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 65u);
  EXPECT_DOUBLE_EQ(t->requests.back().time_s, 65.0);
}

}  // namespace
}  // namespace kvtier::replay

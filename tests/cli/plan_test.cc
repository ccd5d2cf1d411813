// kvtier plan: the capacity figures an operator sizes a node by, checked
// against hand-computed ones (GB = 10^9 bytes; 128k = 128,000 tokens).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "support/temp_dir.h"

namespace kvtier::cli {

using kvtier::testing::TempDir;
namespace {

struct Output {
  int exit_code = -1;
  std::string text;
};

Output RunPlan(const std::string& args) {
  const std::string cmd = std::string(KVTIER_CLI_PATH) + " plan " + args + " 2>&1";
  Output out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) out.text += buf;
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// The line of the context-length table for `tokens` ("128,000"), or "".
std::string Row(const std::string& text, const std::string& tokens) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  " + tokens + " ", 0) == 0) return line;
  }
  return "";
}

bool Has(const std::string& line, const std::string& what) {
  return line.find(what) != std::string::npos;
}

constexpr const char* k70B = "--layers 80 --head-dim 128 --dtype fp16";

TEST(CapacityPlanTest, SixtyFourKvHeadsMatchTheHandComputedFigures) {
  const Output o = RunPlan(std::string(k70B) + " --kv-heads 64");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(Has(o.text, "KV per token: 2.62 MB (2,621,440 bytes)")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "1,000"), " 2.6 GB")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "16,000"), " 41.9 GB")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "64,000"), " 167.8 GB")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "128,000"), " 335.5 GB")) << o.text;
}

TEST(CapacityPlanTest, GroupedQueryAttentionShrinksTheCacheByTheHeadRatio) {
  const Output eight = RunPlan(std::string(k70B) + " --kv-heads 8");
  ASSERT_EQ(eight.exit_code, 0) << eight.text;
  EXPECT_TRUE(Has(Row(eight.text, "128,000"), " 41.9 GB")) << eight.text;
  const Output one = RunPlan(std::string(k70B) + " --kv-heads 1");
  ASSERT_EQ(one.exit_code, 0) << one.text;
  EXPECT_TRUE(Has(Row(one.text, "128,000"), " 5.2 GB")) << one.text;
}

TEST(CapacityPlanTest, TierCapacitiesGiveBlocksTokensAndTheContextThatFits) {
  // 5,242,880-byte blocks (8 KV heads, 16 tokens): 1 GB holds 190 of them.
  const Output o = RunPlan(std::string(k70B) +
                           " --kv-heads 8 --host-capacity 1GB --ssd-capacity 0 --tokens 3k,4k");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(Has(o.text, "KV per block: 5.24 MB (5,242,880 bytes)")) << o.text;
  EXPECT_TRUE(Has(o.text, "longest context that fits: 3,040 tokens")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "3,000"), "host")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "4,000"), "does not fit")) << o.text;
}

TEST(CapacityPlanTest, QuantizeLowerNearlyDoublesWhatTheSsdHolds) {
  // fp8 on the ssd: 2,621,440 bytes of values + 5,120 of scales (80 layers
  // x K,V x 8 heads x 4 bytes) = 2,626,560, a 2,629,632-byte slot. 10 GB
  // holds 3,802 of them against 1,907 blocks of 5,242,880 bytes.
  const Output o = RunPlan(std::string(k70B) +
                           " --kv-heads 8 --host-capacity 1GB --ssd-capacity 10GB"
                           " --device-capacity 0 --tokens 30k,50k");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(Has(o.text, "with quantize_lower fp8_e4m3: 2.63 MB (2,626,560 bytes, 2,629,632"))
      << o.text;
  EXPECT_TRUE(Has(o.text, "longest context that fits: 33,552 tokens (all tiers)")) << o.text;
  EXPECT_TRUE(Has(o.text, "; 63,872 tokens with quantize_lower fp8_e4m3")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "30,000"), "host+ssd")) << o.text;
  const std::string row = Row(o.text, "50,000");
  EXPECT_TRUE(Has(row, "does not fit") && Has(row, "host+ssd")) << o.text;
  // Off, or a layout fp8 cannot apply to, shows the plain figures only.
  const Output off = RunPlan(std::string(k70B) + " --kv-heads 8 --quantize-lower off");
  ASSERT_EQ(off.exit_code, 0) << off.text;
  EXPECT_FALSE(Has(off.text, "quantize_lower")) << off.text;
  const Output bad = RunPlan(std::string(k70B) + " --kv-heads 8 --quantize-lower fp4");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(Has(bad.text, "unknown --quantize-lower 'fp4'")) << bad.text;
}

TEST(CapacityPlanTest, CapacitiesComeFromAKvtierdConfigFile) {
  const TempDir dir("/tmp/kvtier-plan");
  const std::string path = dir / "kvtierd.toml";
  std::ofstream(path) << "[host]\ncapacity = \"2GB\"\n[ssd]\ndir = \"\"\n";
  const Output o = RunPlan(std::string(k70B) + " --kv-heads 8 --config " + path);
  ::unlink(path.c_str());
  ASSERT_EQ(o.exit_code, 0) << o.text;
  // 2e9 / 5,242,880 = 381 blocks = 6,096 tokens; no device, no ssd.
  EXPECT_TRUE(Has(o.text, "longest context that fits: 6,096 tokens")) << o.text;
  EXPECT_TRUE(Has(o.text, "from " + path)) << o.text;
}

// DeepSeek-V3's MLA cache: 61 layers of one 512 + 64 latent per token, no
// K/V split: 61 x 576 x 2 bytes a token.
TEST(CapacityPlanTest, AnMlaLatentLayoutHasOnePlanePerLayer) {
  const std::string v3 = "--layers 61 --kv-heads 1 --head-dim 576 --dtype bf16";
  const Output o = RunPlan(v3 + " --kind latent");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(Has(o.text, "MLA latent")) << o.text;
  EXPECT_TRUE(Has(o.text, "KV per token: 70.3 kB (70,272 bytes)")) << o.text;
  EXPECT_TRUE(Has(Row(o.text, "128,000"), " 9.0 GB")) << o.text;
  const Output kv = RunPlan(v3);
  ASSERT_EQ(kv.exit_code, 0) << kv.text;
  EXPECT_TRUE(Has(kv.text, "(140,544 bytes)")) << kv.text;
  EXPECT_FALSE(Has(kv.text, "MLA latent")) << kv.text;
  Output bad = RunPlan("--layers 61 --kv-heads 2 --head-dim 576 --kind latent");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(Has(bad.text, "--kv-heads 1")) << bad.text;
  bad = RunPlan(v3 + " --kind mla");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(Has(bad.text, "unknown --kind 'mla'")) << bad.text;
}

TEST(CapacityPlanTest, BadInputIsAClearError) {
  Output o = RunPlan(std::string(k70B) + " --kv-heads 8 --tokens 12q");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_TRUE(Has(o.text, "not a token count")) << o.text;
  o = RunPlan("--layers 80 --head-dim 128");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_TRUE(Has(o.text, "--kv-heads")) << o.text;
}

}  // namespace
}  // namespace kvtier::cli

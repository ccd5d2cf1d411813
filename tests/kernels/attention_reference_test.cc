// The CPU reference of decode attention against a naive fp32/double attention
// written from the definition, over many shapes, with every byte the
// reference must not read set to NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attention_test_util.h"
#include "kernels/attention.h"

namespace kvtier::kernels {
namespace {

using testing::AttentionData;
using testing::AttentionShape;
using testing::CompareOutputs;
using testing::NaiveAttention;
using testing::ReferenceTolerance;

using testing::RunReference;

class ReferenceSweepTest : public ::testing::TestWithParam<testing::SweepParam> {};

TEST_P(ReferenceSweepTest, MatchesNaiveAttention) {
  const auto [dtype, head_dim, group] = GetParam();
  uint64_t seed = 1;
  for (const AttentionShape& shape : testing::SweepShapes(dtype, head_dim, group)) {
    SCOPED_TRACE(shape.ToString());
    AttentionData data(shape, seed++);
    const std::vector<uint16_t> got = RunReference(data);
    const std::string diff =
        CompareOutputs(dtype, got, NaiveAttention(data), ReferenceTolerance(dtype));
    EXPECT_TRUE(diff.empty()) << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ReferenceSweepTest, testing::SweepParams(), testing::SweepName);

TEST(ReferenceTest, BlockSizesOtherThanSixteen) {
  for (uint32_t bt : {1u, 3u, 32u}) {
    AttentionShape shape;
    shape.block_tokens = bt;
    shape.group = 2;
    shape.seq_lens = {1, static_cast<int32_t>(bt), static_cast<int32_t>(bt) + 1, 77};
    for (uint32_t chunk : {0u, 5u, bt}) {
      shape.chunk_tokens = chunk;
      SCOPED_TRACE(shape.ToString());
      AttentionData data(shape, bt * 100 + chunk);
      const std::string diff = CompareOutputs(shape.dtype, RunReference(data), NaiveAttention(data),
                                              ReferenceTolerance(shape.dtype));
      EXPECT_TRUE(diff.empty()) << diff;
    }
  }
}

// Splitting is exact algebra: any chunking gives the unsplit result up to
// fp32 rounding (compared after rounding to the dtype, so within an ulp).
TEST(ReferenceTest, SplitKAgreesWithUnsplit) {
  AttentionShape shape;
  shape.group = 4;
  shape.seq_lens = {1000, 517};
  AttentionData unsplit(shape, 7);
  const std::vector<uint16_t> want = RunReference(unsplit);
  for (uint32_t chunk : {1u, 16u, 100u, 999u}) {
    shape.chunk_tokens = chunk;
    AttentionData split(shape, 7);
    auto plan = PlanDecodeAttention(split.Params());
    ASSERT_TRUE(plan.ok());
    EXPECT_GT(plan->num_chunks, 1u);
    const std::string diff =
        CompareOutputs(shape.dtype, RunReference(split), want, testing::GpuTolerance(shape.dtype));
    EXPECT_TRUE(diff.empty()) << "chunk " << chunk << "\n" << diff;
  }
}

TEST(ReferenceTest, EmptySequenceGivesZeros) {
  AttentionShape shape;
  shape.seq_lens = {0, 3};
  AttentionData data(shape, 3);
  const std::vector<uint16_t> got = RunReference(data);
  const size_t per_seq = data.num_q_heads() * shape.head_dim;
  for (size_t i = 0; i < per_seq; ++i) ASSERT_EQ(got[i], 0u) << i;
}

TEST(ReferenceTest, WindowOfOneTokenReturnsItsValue) {
  // softmax over one token is 1: o is exactly that token's V row.
  AttentionShape shape;
  shape.window = 1;
  shape.seq_lens = {37};
  shape.kv_heads = 1;
  shape.group = 8;
  AttentionData data(shape, 11);
  const std::vector<uint16_t> got = RunReference(data);
  const auto v = NaiveAttention(data);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(static_cast<double>(HalfToFloat(got[i])), v[i]) << i;
  }
}

TEST(PlanTest, AutoSplitFillsTheGpuForOneLongSequence) {
  DecodeAttentionParams p;
  p.layout = Layout{80, 8, 128, DType::kFloat16, 16};
  p.batch = 1;
  p.num_q_heads = 64;
  p.max_blocks_per_seq = 128 * 1024 / 16;
  p.num_slots = 8192;
  p.slot_stride_bytes = p.layout.BlockBytes();
  auto plan = PlanDecodeAttention(p);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // 8 KV heads x chunks >= ~1k CTAs, chunks of whole blocks.
  EXPECT_GE(8ull * plan->num_chunks, 1000u);
  EXPECT_EQ(plan->chunk_tokens % 16, 0u);
  EXPECT_GE(plan->chunk_tokens, 256u);
  EXPECT_GT(plan->workspace_bytes, 0u);

  // A large batch needs no split and no workspace.
  p.batch = 256;
  p.max_blocks_per_seq = 64;
  plan = PlanDecodeAttention(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_chunks, 1u);
  EXPECT_EQ(plan->workspace_bytes, 0u);

  // With a window, the chunks cover the window, not the table.
  p.batch = 1;
  p.max_blocks_per_seq = 128 * 1024 / 16;
  p.window = 4096;
  p.chunk_tokens = 512;
  plan = PlanDecodeAttention(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_chunks, 8u);
}

TEST(PlanTest, WorkspaceBytesMatchTheDocumentedLayout) {
  DecodeAttentionParams p;
  p.layout = Layout{1, 2, 64, DType::kBFloat16, 16};
  p.batch = 3;
  p.num_q_heads = 4;
  p.max_blocks_per_seq = 10;
  p.num_slots = 30;
  p.slot_stride_bytes = p.layout.BlockBytes();
  p.chunk_tokens = 16;  // 160 tokens -> 10 chunks
  auto plan = PlanDecodeAttention(p);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_chunks, 10u);
  const uint64_t rows = 3 * 4 * 10;
  EXPECT_EQ(plan->workspace_bytes, rows * 64 * 4 + (rows * 4 + 15) / 16 * 16);
}

}  // namespace
}  // namespace kvtier::kernels

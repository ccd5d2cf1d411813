// Decode attention over fp8 blocks (the CPU reference) against the same
// attention over the fp16/bf16 blocks they were quantized from
// (common/fp8.h's QuantizeBlock): the accuracy fp8 costs, over the shapes
// the kernels take (head_dim 64/128/256, GQA 1-8, short and long, windowed,
// split-K), stated as bounds with their reason.
//
// The error of one output vector o (one sequence, one query head) is
// ||o_fp8 - o_ref||_2 / ||o_ref||_2. Why the bounds hold:
//  - V: o is a convex combination of V rows; each fp8 value is within half
//    a step (2^-4 relative for e4m3, 2^-3 for e5m2) of the original, so
//    the error of o from V alone is at most that. Averaging over tokens
//    does not shrink it relative to o (o shrinks as fast): the rounding
//    noise is about uniform, RMS 2^-4 / sqrt(3) = 3.6 % of a value for
//    e4m3 (7.2 % for e5m2), which is where the mean error sits.
//  - K: each score moves by scale * q . dk, which only reweights the same
//    V rows: with |q| <= 2, |k| <= 1 and the 1/sqrt(head_dim) scale, a
//    score moves by ~0.1 at most (e4m3), adding a fraction of the above.
// Measured over the 28 cases (printed by the test): worst vector 4.5 %,
// worst mean 3.1 % (e4m3); 9.3 % and 6.4 % (e5m2). Bounds: the half step
// for the worst vector, the uniform noise's RMS plus 10 % for the mean.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "common/fp8.h"
#include "common/half.h"
#include "kernels/attention.h"

namespace kvtier::kernels {
namespace {

using testing::Fp8AttentionData;
using testing::Fp8Case;

struct Errors {
  double max = 0, mean = 0;
};

uint64_t RoundUp16(uint64_t n) { return (n + 15) / 16 * 16; }

float Widen(DType t, uint16_t bits) {
  return t == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}

// Runs the reference over the 16-bit blocks and over their fp8
// quantization; returns the errors of the fp8 outputs against the 16-bit.
Errors Compare(const Fp8Case& c, uint32_t seed) {
  Fp8AttentionData data(c, seed);
  const DecodeAttentionParams wide = data.WideParams();
  const DecodeAttentionParams narrow = data.Fp8Params();
  auto plan = PlanDecodeAttention(wide);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<float> ws(plan.ok() ? plan->workspace_bytes / 4 + 4 : 4);
  EXPECT_TRUE(DecodeAttentionReference(wide, ws.data(), ws.size() * 4).ok());
  const Status run = DecodeAttentionReference(narrow, ws.data(), ws.size() * 4);
  EXPECT_TRUE(run.ok()) << run.ToString();

  Errors e;
  const uint32_t heads = wide.num_q_heads;
  uint64_t counted = 0;
  for (uint64_t v = 0; v < data.o_wide.size() / c.head_dim; ++v) {
    if (c.seq_lens[v / heads] == 0) continue;
    double diff = 0, norm = 0;
    for (uint32_t d = 0; d < c.head_dim; ++d) {
      const double want = Widen(c.io, data.o_wide[v * c.head_dim + d]);
      const double got = Widen(c.io, data.o_fp8[v * c.head_dim + d]);
      diff += (got - want) * (got - want);
      norm += want * want;
    }
    const double rel = std::sqrt(diff / norm);
    e.max = std::max(e.max, rel);
    e.mean += rel;
    ++counted;
  }
  e.mean /= static_cast<double>(counted);
  return e;
}

std::vector<Fp8Case> Cases(DType fp8) {
  std::vector<Fp8Case> out;
  for (DType io : {DType::kFloat16, DType::kBFloat16}) {
    for (uint32_t d : {64u, 128u, 256u}) {
      for (uint32_t g : {1u, 2u, 4u, 8u}) out.push_back({io, fp8, d, g, {1, 17, 200}});
    }
    out.push_back({io, fp8, 128, 4, {1000, 3}, 0, 256});  // split-K
    out.push_back({io, fp8, 128, 2, {500, 40}, 64});      // windowed
  }
  return out;
}

void Sweep(DType fp8, double max_bound, double mean_bound) {
  double worst = 0, worst_mean = 0;
  const std::vector<Fp8Case> cases = Cases(fp8);
  for (const Fp8Case& c : cases) {
    const Errors e = Compare(c, c.head_dim * 31 + c.group);
    const std::string name = c.ToString();
    EXPECT_LE(e.max, max_bound) << name;
    EXPECT_LE(e.mean, mean_bound) << name;
    worst = std::max(worst, e.max);
    worst_mean = std::max(worst_mean, e.mean);
  }
  std::printf("%s: worst vector error %.4f, worst mean %.4f over %zu cases\n",
              std::string(DTypeName(fp8)).c_str(), worst, worst_mean, cases.size());
}

TEST(Fp8AttentionTest, E4m3StaysWithinItsBoundOfTheOriginal) {
  Sweep(DType::kFp8E4M3, /*max=*/0.0625, /*mean=*/0.040);
}

TEST(Fp8AttentionTest, E5m2StaysWithinItsBoundOfTheOriginal) {
  Sweep(DType::kFp8E5M2, /*max=*/0.125, /*mean=*/0.080);
}

TEST(Fp8AttentionTest, ASlotMustHoldTheScaleTableToo) {
  const Layout narrow = Fp8LayoutOf(Layout{2, 2, 64, DType::kFloat16, 16}, DType::kFp8E4M3);
  DecodeAttentionParams p;
  p.layout = narrow;
  p.batch = 1;
  p.num_q_heads = 2;
  p.max_blocks_per_seq = 1;
  p.num_slots = 1;
  p.slot_stride_bytes = RoundUp16(narrow.BlockBytes());
  EXPECT_TRUE(PlanDecodeAttention(p).ok());
  p.slot_stride_bytes = narrow.ValueBytes();  // the values only: no room for the scales
  EXPECT_EQ(PlanDecodeAttention(p).status().code(), StatusCode::kInvalidArgument);
  p.slot_stride_bytes = RoundUp16(narrow.BlockBytes());
  p.io_dtype = DType::kFp8E5M2;  // q and o cannot be fp8
  EXPECT_EQ(PlanDecodeAttention(p).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::kernels

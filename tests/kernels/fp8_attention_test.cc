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

#include "common/fp8.h"
#include "common/half.h"
#include "kernels/attention.h"

namespace kvtier::kernels {
namespace {

struct Case {
  DType io;  // fp16 or bf16: the original blocks, q and o
  uint32_t head_dim;
  uint32_t group;
  std::vector<int32_t> seq_lens;
  uint32_t window = 0;
  uint32_t chunk_tokens = 0;
};

struct Errors {
  double max = 0, mean = 0;
};

uint64_t RoundUp16(uint64_t n) { return (n + 15) / 16 * 16; }

float Widen(DType t, uint16_t bits) {
  return t == DType::kFloat16 ? HalfToFloat(bits) : BFloat16ToFloat(bits);
}
uint16_t Narrow(DType t, float v) {
  return t == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
}

// Runs the reference over 16-bit blocks and over their fp8 quantization;
// returns the errors of the fp8 outputs against the 16-bit ones.
Errors Compare(const Case& c, DType fp8, uint32_t seed) {
  const uint32_t kv_heads = 2, layers = 2, layer = 1, block_tokens = 16;
  const Layout wide{layers, kv_heads, c.head_dim, c.io, block_tokens};
  const Layout narrow = Fp8LayoutOf(wide, fp8);
  const auto batch = static_cast<uint32_t>(c.seq_lens.size());
  uint32_t max_blocks = 1;
  for (int32_t len : c.seq_lens) {
    max_blocks = std::max<uint32_t>(max_blocks, static_cast<uint32_t>((len + 15) / 16));
  }
  const uint32_t slots = batch * max_blocks;
  const uint64_t wide_stride = RoundUp16(wide.BlockBytes());
  const uint64_t narrow_stride = RoundUp16(narrow.BlockBytes());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> kv(-1.0f, 1.0f), qd(-2.0f, 2.0f);
  std::vector<std::byte> wide_arena(slots * wide_stride), narrow_arena(slots * narrow_stride);
  for (uint32_t s = 0; s < slots; ++s) {
    std::byte* block = wide_arena.data() + s * wide_stride;
    for (uint64_t i = 0; i < wide.ValueBytes() / 2; ++i) {
      const uint16_t bits = Narrow(c.io, kv(rng));
      std::memcpy(block + 2 * i, &bits, 2);
    }
    const Status q = QuantizeBlock(wide, fp8, {block, wide.BlockBytes()},
                                   {narrow_arena.data() + s * narrow_stride, narrow.BlockBytes()});
    EXPECT_TRUE(q.ok()) << q.ToString();
  }
  std::vector<int32_t> table(slots);
  for (uint32_t i = 0; i < slots; ++i)
    table[i] = static_cast<int32_t>((i * 7) % slots);  // scattered
  const uint32_t num_q_heads = kv_heads * c.group;
  const uint64_t qo_values = static_cast<uint64_t>(batch) * num_q_heads * c.head_dim;
  alignas(16) std::vector<uint16_t> q(qo_values), o_wide(qo_values), o_narrow(qo_values);
  for (uint16_t& x : q) x = Narrow(c.io, qd(rng));

  DecodeAttentionParams p;
  p.layout = wide;
  p.layer = layer;
  p.batch = batch;
  p.num_q_heads = num_q_heads;
  p.max_blocks_per_seq = max_blocks;
  p.num_slots = slots;
  p.slot_stride_bytes = wide_stride;
  p.window = c.window;
  p.chunk_tokens = c.chunk_tokens;
  p.q = q.data();
  p.o = o_wide.data();
  p.arena = wide_arena.data();
  p.block_table = table.data();
  p.seq_lens = c.seq_lens.data();
  auto plan = PlanDecodeAttention(p);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<float> ws(plan.ok() ? plan->workspace_bytes / 4 + 4 : 4);
  EXPECT_TRUE(DecodeAttentionReference(p, ws.data(), ws.size() * 4).ok());

  DecodeAttentionParams p8 = p;
  p8.layout = narrow;
  p8.io_dtype = c.io;
  p8.slot_stride_bytes = narrow_stride;
  p8.arena = narrow_arena.data();
  p8.o = o_narrow.data();
  auto plan8 = PlanDecodeAttention(p8);
  EXPECT_TRUE(plan8.ok()) << plan8.status().ToString();
  const Status run = DecodeAttentionReference(p8, ws.data(), ws.size() * 4);
  EXPECT_TRUE(run.ok()) << run.ToString();

  Errors e;
  const uint64_t vectors = static_cast<uint64_t>(batch) * num_q_heads;
  uint64_t counted = 0;
  for (uint64_t v = 0; v < vectors; ++v) {
    if (c.seq_lens[v / num_q_heads] == 0) continue;
    double diff = 0, norm = 0;
    for (uint32_t d = 0; d < c.head_dim; ++d) {
      const double want = Widen(c.io, o_wide[v * c.head_dim + d]);
      const double got = Widen(c.io, o_narrow[v * c.head_dim + d]);
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

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (DType io : {DType::kFloat16, DType::kBFloat16}) {
    for (uint32_t d : {64u, 128u, 256u}) {
      for (uint32_t g : {1u, 2u, 4u, 8u}) out.push_back({io, d, g, {1, 17, 200}});
    }
    out.push_back({io, 128, 4, {1000, 3}, 0, 256});  // split-K
    out.push_back({io, 128, 2, {500, 40}, 64});      // windowed
  }
  return out;
}

void Sweep(DType fp8, double max_bound, double mean_bound) {
  double worst = 0, worst_mean = 0;
  for (const Case& c : Cases()) {
    const Errors e = Compare(c, fp8, c.head_dim * 31 + c.group);
    const std::string name = std::string(DTypeName(c.io)) + " d" + std::to_string(c.head_dim) +
                             " g" + std::to_string(c.group) +
                             (c.window         ? " window"
                              : c.chunk_tokens ? " split-K"
                                               : "");
    EXPECT_LE(e.max, max_bound) << name;
    EXPECT_LE(e.mean, mean_bound) << name;
    worst = std::max(worst, e.max);
    worst_mean = std::max(worst_mean, e.mean);
  }
  std::printf("%s: worst vector error %.4f, worst mean %.4f over %zu cases\n",
              std::string(DTypeName(fp8)).c_str(), worst, worst_mean, Cases().size());
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

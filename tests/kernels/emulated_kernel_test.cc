// The CUDA kernels' own source, run on the CPU through cuda_emulator.h and
// checked against the CPU references: indexing, the split-K partials and
// merge, the shuffles (every lane of a warp must reach each one) and the
// barriers are all exercised without a GPU. Built whenever the CUDA toolkit
// is (the kernels include its fp16/bf16 headers). What it cannot show: the
// compiled device code's speed, and nvcc-specific miscompilation; gpu_test.cc
// covers those where a GPU exists.
//
// Slow by design (each shuffle is a round of 128 context switches), so the
// shapes are small.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attention_test_util.h"
#include "block_copy_test_util.h"
#include "cuda_emulator.h"  // before any CUDA header
#include "fp8_codec_test_util.h"
#include "kernels/internal/attention_kernel.cuh"
#include "kernels/internal/block_copy_kernel.cuh"
#include "kernels/internal/fp8_codec_kernel.cuh"

namespace kvtier::kernels {
namespace {

using testing::AttentionData;
using testing::AttentionShape;
using testing::RunReference;

template <typename T, typename Kv>
std::function<void()> AttentionKernel(const internal::DecodeArgs& args, uint32_t group) {
  switch (group) {
    case 1:
      return [&args] { internal::DecodeAttentionKernel<T, Kv, 1>(args); };
    case 2:
      return [&args] { internal::DecodeAttentionKernel<T, Kv, 2>(args); };
    case 4:
      return [&args] { internal::DecodeAttentionKernel<T, Kv, 4>(args); };
    default:
      return [&args] { internal::DecodeAttentionKernel<T, Kv, 8>(args); };
  }
}

// The kernel attention.cu launches for p: q/o type by IoDType, K/V format
// by the blocks' dtype.
template <typename T>
std::function<void()> KernelFor(const DecodeAttentionParams& p, const internal::DecodeArgs& args,
                                uint32_t group) {
  if (IsFp8(p.layout.dtype)) return AttentionKernel<T, internal::KvFp8>(args, group);
  return AttentionKernel<T, internal::Kv16<T>>(args, group);
}

// DecodeAttention's launch (attention.cu), with the emulator as the GPU.
Status EmulateDecodeAttention(const DecodeAttentionParams& p, void* workspace,
                              uint64_t workspace_bytes) {
  auto plan = internal::CheckDecodeAttention(p, workspace, workspace_bytes);
  if (!plan.ok()) return plan.status();
  const internal::DecodeArgs args = internal::MakeDecodeArgs(p, *plan, workspace);
  const uint32_t group = p.num_q_heads / p.layout.kv_heads;
  const bool fp16 = internal::IoDType(p) == DType::kFloat16;
  const std::string e = emulator::RunGrid(
      uint3{plan->num_chunks, p.layout.kv_heads, p.batch}, internal::kThreads,
      fp16 ? KernelFor<__half>(p, args, group) : KernelFor<__nv_bfloat16>(p, args, group));
  if (!e.empty()) return InternalError("attention kernel: " + e);
  if (plan->num_chunks == 1) return Status();
  const std::function<void()> merge = [&args, fp16] {
    if (fp16) {
      internal::MergeChunksKernel<__half>(args);
    } else {
      internal::MergeChunksKernel<__nv_bfloat16>(args);
    }
  };
  const std::string m =
      emulator::RunGrid(uint3{p.num_q_heads, p.batch, 1}, p.layout.head_dim, merge);
  if (!m.empty()) return InternalError("merge kernel: " + m);
  return Status();
}

std::vector<uint16_t> RunEmulated(AttentionData data) {
  const DecodeAttentionParams p = data.Params();
  auto plan = PlanDecodeAttention(p);
  EXPECT_TRUE(plan.ok());
  std::vector<float> ws(plan->workspace_bytes / sizeof(float),
                        std::numeric_limits<float>::quiet_NaN());
  const Status s = EmulateDecodeAttention(p, ws.data(), plan->workspace_bytes);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return data.o;
}

void ExpectEmulatedMatchesReference(const AttentionShape& shape, uint64_t seed) {
  SCOPED_TRACE(shape.ToString());
  const AttentionData data(shape, seed);
  const std::string diff = testing::CompareOutputs(
      shape.dtype, RunEmulated(data), RunReference(data), testing::GpuTolerance(shape.dtype));
  EXPECT_TRUE(diff.empty()) << diff;
}

class EmulatedAttentionTest : public ::testing::TestWithParam<testing::SweepParam> {};

// The same canaried shapes as the reference's sweep, fewer per combination.
TEST_P(EmulatedAttentionTest, MatchesReference) {
  const auto [dtype, head_dim, group] = GetParam();
  const std::vector<AttentionShape> all = testing::SweepShapes(dtype, head_dim, group);
  uint64_t seed = 500;
  for (size_t i = 0; i < all.size(); ++i) {
    // Rotate through the sweep so that every shape runs for some combination.
    if ((i + head_dim / 64 + group) % 3 != 0) continue;
    ExpectEmulatedMatchesReference(all[i], seed++);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedAttentionTest, testing::SweepParams(), testing::SweepName);

TEST(EmulatedAttentionTest, BadTableEntryPoisonsOnlyItsSequence) {
  AttentionShape shape;
  shape.seq_lens = {40, 40};
  shape.chunk_tokens = 16;
  AttentionData data(shape, 5);
  data.table[1] = static_cast<int32_t>(data.num_slots()) + 7;  // sequence 0, block 1
  const std::vector<uint16_t> got = RunEmulated(data);
  const size_t per_seq = data.num_q_heads() * shape.head_dim;
  for (size_t i = 0; i < per_seq; ++i) EXPECT_TRUE(std::isnan(HalfToFloat(got[i]))) << i;
  for (size_t i = per_seq; i < 2 * per_seq; ++i) EXPECT_FALSE(std::isnan(HalfToFloat(got[i])));
}

TEST(EmulatedAttentionTest, SeqLensAreClampedToTheTable) {
  AttentionShape shape;
  shape.seq_lens = {32};
  shape.extra_table_blocks = 0;  // the table holds exactly 32 tokens
  shape.chunk_tokens = 16;
  AttentionData data(shape, 6);
  const std::vector<uint16_t> want = RunReference(data);
  data.seq_lens[0] = 1 << 30;  // the GPU clamps it to the table (the reference refuses it)
  EXPECT_EQ(RunEmulated(data), want);
}

// fp8 blocks: the kernel dequantizes as the reference does, so the two agree
// within the GPU's usual tolerance, over both formats and both io types.
TEST(EmulatedAttentionTest, Fp8BlocksMatchTheReference) {
  uint32_t seed = 900;
  for (DType fp8 : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    for (DType io : {DType::kFloat16, DType::kBFloat16}) {
      for (const testing::Fp8Case& c : {testing::Fp8Case{io, fp8, 64, 2, {1, 37}},
                                        testing::Fp8Case{io, fp8, 128, 4, {70}, 0, 32},
                                        testing::Fp8Case{io, fp8, 256, 1, {40}, 24}}) {
        SCOPED_TRACE(c.ToString());
        testing::Fp8AttentionData data(c, seed++);
        const DecodeAttentionParams p = data.Fp8Params();
        auto plan = PlanDecodeAttention(p);
        ASSERT_TRUE(plan.ok()) << plan.status().ToString();
        std::vector<float> ws(plan->workspace_bytes / sizeof(float) + 4,
                              std::numeric_limits<float>::quiet_NaN());
        ASSERT_TRUE(DecodeAttentionReference(p, ws.data(), ws.size() * 4).ok());
        const std::vector<uint16_t> want = data.o_fp8;
        std::fill(data.o_fp8.begin(), data.o_fp8.end(), uint16_t{0x7e00});
        const Status s = EmulateDecodeAttention(p, ws.data(), ws.size() * 4);
        ASSERT_TRUE(s.ok()) << s.ToString();
        const std::string diff =
            testing::CompareOutputs(io, data.o_fp8, want, testing::GpuTolerance(io));
        EXPECT_TRUE(diff.empty()) << diff;
      }
    }
  }
}

// The fp8 codec kernels through the emulator: the references' bytes, bit for
// bit, and the same blocks refused.
void EmulateFp8Blocks(const Fp8BlocksParams& p, bool quantize) {
  ASSERT_TRUE(ValidateFp8Blocks(p, quantize).ok());
  std::fill(p.refused, p.refused + p.num_blocks, uint8_t{0});  // the launcher's memset
  const internal::Fp8BlocksArgs args = internal::MakeFp8BlocksArgs(p);
  const bool fp16 = p.layout.dtype == DType::kFloat16, e4m3 = p.fp8 == DType::kFp8E4M3;
  const std::function<void()> kernel = [&args, quantize, fp16, e4m3] {
    using internal::Fp8E4M3;
    using internal::Fp8E5M2;
    if (quantize) {
      fp16 ? (e4m3 ? internal::QuantizeBlocksKernel<__half, Fp8E4M3>(args)
                   : internal::QuantizeBlocksKernel<__half, Fp8E5M2>(args))
           : (e4m3 ? internal::QuantizeBlocksKernel<__nv_bfloat16, Fp8E4M3>(args)
                   : internal::QuantizeBlocksKernel<__nv_bfloat16, Fp8E5M2>(args));
    } else {
      fp16 ? (e4m3 ? internal::DequantizeBlocksKernel<__half, Fp8E4M3>(args)
                   : internal::DequantizeBlocksKernel<__half, Fp8E5M2>(args))
           : (e4m3 ? internal::DequantizeBlocksKernel<__nv_bfloat16, Fp8E4M3>(args)
                   : internal::DequantizeBlocksKernel<__nv_bfloat16, Fp8E5M2>(args));
    }
  };
  EXPECT_EQ(
      emulator::RunGrid(uint3{p.layout.kv_heads, p.layout.Planes() * p.layout.layers, p.num_blocks},
                        internal::kCodecThreads, kernel),
      "");
}

TEST(EmulatedFp8CodecTest, MatchesTheReferencesBitForBit) {
  for (DType wide : {DType::kFloat16, DType::kBFloat16}) {
    for (DType fp8 : {DType::kFp8E4M3, DType::kFp8E5M2}) {
      SCOPED_TRACE(std::string(DTypeName(wide)) + " " + std::string(DTypeName(fp8)));
      testing::Fp8Batch want(Layout{2, 3, 64, wide, 16}, fp8, 4, 9);
      testing::Fp8Batch latent(Layout{3, 1, 576, wide, 16, KvKind::kLatent}, fp8, 2, 10);
      testing::Fp8Batch latent_got = latent;
      ASSERT_TRUE(QuantizeBlocksReference(latent.QuantizeParams()).ok());
      EmulateFp8Blocks(latent_got.QuantizeParams(), /*quantize=*/true);
      EXPECT_EQ(latent_got.narrow_bytes, latent.narrow_bytes) << "latent";
      ASSERT_TRUE(DequantizeBlocksReference(latent.DequantizeParams()).ok());
      EmulateFp8Blocks(latent_got.DequantizeParams(), /*quantize=*/false);
      EXPECT_EQ(latent_got.back_bytes, latent.back_bytes) << "latent";
      want.PoisonWide(2);
      testing::Fp8Batch got = want;
      ASSERT_TRUE(QuantizeBlocksReference(want.QuantizeParams()).ok());
      EmulateFp8Blocks(got.QuantizeParams(), /*quantize=*/true);
      EXPECT_EQ(got.refused, want.refused);
      for (uint32_t i : {0u, 1u, 3u}) {
        EXPECT_TRUE(std::equal(got.NarrowBlock(i).begin(), got.NarrowBlock(i).end(),
                               want.NarrowBlock(i).begin()))
            << "block " << i;
      }
      // Restoring the reference's fp8 blocks, one with a bad scale.
      want.SpoilScale(3);
      got.narrow_bytes = want.narrow_bytes;
      ASSERT_TRUE(DequantizeBlocksReference(want.DequantizeParams()).ok());
      EmulateFp8Blocks(got.DequantizeParams(), /*quantize=*/false);
      for (uint32_t i : {0u, 1u, 3u}) {
        EXPECT_EQ(got.refused[i], want.refused[i]) << i;
        if (want.refused[i] != 0) continue;
        EXPECT_TRUE(
            std::equal(got.BackBlock(i).begin(), got.BackBlock(i).end(), want.BackBlock(i).begin()))
            << "block " << i;
      }
      EXPECT_EQ(want.refused[3], 1);
    }
  }
}

// The paged copy kernel through the emulator against the references.
void EmulatePagedCopy(const PagedCopyParams& p, bool gather) {
  ASSERT_TRUE(ValidatePagedCopy(p).ok());
  const internal::PagedCopyArgs args = internal::MakePagedCopyArgs(p);
  const std::function<void()> kernel = [&args, gather] {
    if (gather) {
      internal::PagedCopyKernel<true>(args);
    } else {
      internal::PagedCopyKernel<false>(args);
    }
  };
  const std::string e = emulator::RunGrid(uint3{p.num_blocks, p.layout.layers, p.layout.Planes()},
                                          internal::kCopyThreads, kernel);
  EXPECT_EQ(e, "");
}

TEST(EmulatedCopyTest, GatherAndScatterMatchTheReferences) {
  for (const Layout& layout :
       {Layout{2, 2, 64, DType::kFloat16, 16},
        Layout{1, 3, 64, DType::kBFloat16, 5},                       // odd part size
        Layout{3, 1, 576, DType::kBFloat16, 4, KvKind::kLatent}}) {  // no v_layers
    testing::CopyFixture emulated(layout, 6, 5, 1);
    emulated.Use({5, 0, 3}, {4, 1, 0});
    testing::CopyFixture want = emulated;
    ASSERT_TRUE(GatherBlocksReference(want.Params()).ok());
    EmulatePagedCopy(emulated.Params(), /*gather=*/true);
    EXPECT_EQ(emulated.paged_k, want.paged_k);
    EXPECT_EQ(emulated.paged_v, want.paged_v);

    emulated.FillArenaWithCanary();
    want.FillArenaWithCanary();
    emulated.Use({1, 2, 4}, {4, 1, 0});
    want.Use({1, 2, 4}, {4, 1, 0});
    ASSERT_TRUE(ScatterBlocksReference(want.Params()).ok());
    EmulatePagedCopy(emulated.Params(), /*gather=*/false);
    EXPECT_EQ(emulated.arena, want.arena);
    // Out-of-range entries are skipped on the GPU (the reference refuses them).
    const std::vector<uint16_t> arena_before = emulated.arena;
    emulated.Use({99, 0}, {0, -1});
    EmulatePagedCopy(emulated.Params(), /*gather=*/false);
    EXPECT_EQ(emulated.arena, arena_before);
  }
}

}  // namespace
}  // namespace kvtier::kernels

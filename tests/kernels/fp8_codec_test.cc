// The fp8 block codecs' references (kernels/fp8_codec.h): common/fp8.h's
// codecs over a batch of strided blocks, refused blocks flagged, bad calls
// refused by both entry points alike.
#include "kernels/fp8_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp8.h"
#include "fp8_codec_test_util.h"

namespace kvtier::kernels {
namespace {

using testing::Fp8Batch;

TEST(Fp8CodecTest, TheReferencesConvertEveryBlockAndFlagTheBadOnes) {
  for (DType wide : {DType::kFloat16, DType::kBFloat16}) {
    for (DType fp8 : {DType::kFp8E4M3, DType::kFp8E5M2}) {
      Fp8Batch b(Layout{2, 3, 64, wide, 16}, fp8, 5, /*seed=*/wide == DType::kFloat16 ? 1 : 2);
      b.PoisonWide(3);  // an infinity in block 3
      ASSERT_TRUE(QuantizeBlocksReference(b.QuantizeParams()).ok());
      EXPECT_EQ(b.refused, (std::vector<uint8_t>{0, 0, 0, 1, 0}));
      const Layout narrow = Fp8LayoutOf(b.layout, fp8);
      for (uint32_t i = 0; i < 5; ++i) {
        if (i == 3) continue;
        std::vector<std::byte> want(narrow.BlockBytes());
        ASSERT_TRUE(QuantizeBlock(b.layout, fp8, b.WideBlock(i), want).ok());
        EXPECT_EQ(0, std::memcmp(b.NarrowBlock(i).data(), want.data(), want.size())) << i;
      }
      b.SpoilScale(1);  // a zero scale in block 1
      ASSERT_TRUE(DequantizeBlocksReference(b.DequantizeParams()).ok());
      // (Block 3 was never quantized: what it holds is no block.)
      EXPECT_EQ(b.refused[0], 0);
      EXPECT_EQ(b.refused[1], 1);
      EXPECT_EQ(b.refused[2], 0);
      EXPECT_EQ(b.refused[4], 0);
      for (uint32_t i : {0u, 2u, 4u}) {
        std::vector<std::byte> want(b.layout.BlockBytes());
        ASSERT_TRUE(DequantizeBlock(narrow, wide, b.NarrowBlock(i), want).ok());
        EXPECT_EQ(0, std::memcmp(b.BackBlock(i).data(), want.data(), want.size())) << i;
      }
    }
  }
}

TEST(Fp8CodecTest, BadCallsAreRefusedByBothEntryPoints) {
  Fp8Batch b(Layout{1, 2, 64, DType::kFloat16, 16}, DType::kFp8E4M3, 2, 3);
  const std::vector<std::pair<const char*, void (*)(Fp8BlocksParams&)>> edits = {
      {"fp32 side", [](Fp8BlocksParams& p) { p.layout.dtype = DType::kFloat32; }},
      {"not fp8", [](Fp8BlocksParams& p) { p.fp8 = DType::kBFloat16; }},
      {"src stride short", [](Fp8BlocksParams& p) { p.src_stride_bytes -= 32; }},
      {"dst stride unaligned", [](Fp8BlocksParams& p) { p.dst_stride_bytes += 8; }},
      {"null src", [](Fp8BlocksParams& p) { p.src = nullptr; }},
      {"misaligned dst", [](Fp8BlocksParams& p) { p.dst = static_cast<char*>(p.dst) + 4; }},
      {"null refused", [](Fp8BlocksParams& p) { p.refused = nullptr; }},
      {"too many blocks", [](Fp8BlocksParams& p) { p.num_blocks = 70000; }},
  };
  for (const auto& [what, edit] : edits) {
    Fp8BlocksParams q = b.QuantizeParams();
    edit(q);
    EXPECT_EQ(QuantizeBlocksReference(q).code(), StatusCode::kInvalidArgument) << what;
    EXPECT_EQ(QuantizeBlocks(q, nullptr).code(), StatusCode::kInvalidArgument) << what;
  }
  // Nothing to do succeeds; something to do without a GPU says so.
  Fp8BlocksParams none = b.QuantizeParams();
  none.num_blocks = 0;
  EXPECT_TRUE(QuantizeBlocks(none, nullptr).ok());
  if (!GpuAvailable()) {
    EXPECT_EQ(QuantizeBlocks(b.QuantizeParams(), nullptr).code(), StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace kvtier::kernels

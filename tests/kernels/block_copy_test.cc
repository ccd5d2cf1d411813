// The block copy references: exact bytes, round trips, canaries left alone
// bit for bit, and bad entries refused before anything is written.
#include "kernels/block_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "block_copy_test_util.h"

namespace kvtier::kernels {
namespace {

using testing::CopyFixture;

TEST(GatherScatterTest, GatherCopiesEachLayerPartExactly) {
  CopyFixture f(Layout{3, 2, 64, DType::kFloat16, 16}, /*num_slots=*/9, /*paged_blocks=*/7, 1);
  f.Use({4, 0, 8, 2}, {6, 1, 3, 0});
  const PagedCopyParams p = f.Params();
  ASSERT_TRUE(GatherBlocksReference(p).ok());
  for (size_t i = 0; i < f.slots.size(); ++i) {
    for (uint32_t layer = 0; layer < 3; ++layer) {
      for (uint32_t kv = 0; kv < 2; ++kv) {
        EXPECT_EQ(std::memcmp(f.PagedPart(layer, kv, f.paged_blocks[i]),
                              f.ArenaPart(f.slots[i], layer, kv), f.part_bytes),
                  0)
            << "block " << i << " layer " << layer << " kv " << kv;
      }
    }
  }
  EXPECT_EQ(f.UntouchedPagedCanaries(), "");
}

// An MLA latent layout: one plane per layer, to and from one paged tensor
// per layer (vLLM's MLA cache); no V is read or written.
TEST(GatherScatterTest, ALatentLayoutCopiesOneLatentPerLayer) {
  const Layout latent{3, 1, 576, DType::kBFloat16, 16, KvKind::kLatent};
  CopyFixture f(latent, 6, 5, 7);
  ASSERT_EQ(f.part_bytes, 16u * 576 * 2);
  f.Use({5, 0, 3}, {4, 1, 0});
  ASSERT_TRUE(GatherBlocksReference(f.Params()).ok());
  for (size_t i = 0; i < f.slots.size(); ++i) {
    for (uint32_t layer = 0; layer < 3; ++layer) {
      EXPECT_EQ(std::memcmp(f.PagedPart(layer, 0, f.paged_blocks[i]),
                            f.ArenaPart(f.slots[i], layer, 0), f.part_bytes),
                0)
          << "block " << i << " layer " << layer;
    }
  }
  EXPECT_EQ(f.UntouchedPagedCanaries(), "");  // paged_v too: never written

  CopyFixture target(latent, 6, 5, 8);
  target.FillArenaWithCanary();
  target.paged_k = f.paged_k;
  target.Use({1, 2, 4}, f.paged_blocks);
  ASSERT_TRUE(ScatterBlocksReference(target.Params()).ok());
  for (size_t i = 0; i < target.slots.size(); ++i) {
    EXPECT_EQ(std::memcmp(target.ArenaPart(target.slots[i], 0, 0), f.ArenaPart(f.slots[i], 0, 0),
                          latent.BlockBytes()),
              0)
        << "block " << i;
  }
  EXPECT_EQ(target.UntouchedArenaCanaries(), "");

  // A K/V layout still needs its V tensors.
  CopyFixture kv(Layout{3, 1, 576, DType::kBFloat16, 16}, 6, 5, 9);
  kv.Use({0}, {0});
  PagedCopyParams p = kv.Params();
  p.v_layers = nullptr;
  EXPECT_EQ(GatherBlocksReference(p).code(), StatusCode::kInvalidArgument);
}

TEST(GatherScatterTest, ScatterOfAGatherRestoresTheBlocksBitForBit) {
  const Layout layout{2, 4, 128, DType::kBFloat16, 16};
  CopyFixture source(layout, 12, 10, 2);
  source.Use({11, 3, 5, 0, 7}, {0, 9, 2, 8, 4});
  ASSERT_TRUE(GatherBlocksReference(source.Params()).ok());

  // Scatter the gathered blocks into other slots of a fresh (canary) arena.
  CopyFixture target(layout, 12, 10, 3);
  target.FillArenaWithCanary();
  target.paged_k = source.paged_k;
  target.paged_v = source.paged_v;
  target.Use({1, 2, 6, 10, 4}, source.paged_blocks);
  ASSERT_TRUE(ScatterBlocksReference(target.Params()).ok());
  for (size_t i = 0; i < target.slots.size(); ++i) {
    // The whole block, every layer, K and V: identical bytes.
    EXPECT_EQ(std::memcmp(target.ArenaPart(target.slots[i], 0, 0),
                          source.ArenaPart(source.slots[i], 0, 0), layout.BlockBytes()),
              0)
        << "block " << i;
  }
  EXPECT_EQ(target.UntouchedArenaCanaries(), "");
}

TEST(GatherScatterTest, BadEntriesAreRefusedBeforeAnyWrite) {
  CopyFixture f(Layout{2, 1, 64, DType::kFloat16, 8}, 4, 4, 4);
  const std::vector<uint8_t> paged_before = f.PagedBytes();
  f.Use({0, 1, 4}, {0, 1, 2});  // slot 4 of 4
  EXPECT_EQ(GatherBlocksReference(f.Params()).code(), StatusCode::kInvalidArgument);
  f.Use({0, 1, 2}, {0, 1, -1});
  EXPECT_EQ(GatherBlocksReference(f.Params()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.PagedBytes(), paged_before);

  f.Use({0}, {0});
  PagedCopyParams p = f.Params();
  p.slot_stride_bytes = p.layout.BlockBytes() - 1;
  EXPECT_EQ(ScatterBlocksReference(p).code(), StatusCode::kInvalidArgument);
  p = f.Params();
  p.k_layers = nullptr;
  EXPECT_EQ(ScatterBlocksReference(p).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherBlocks(p, nullptr).code(), StatusCode::kInvalidArgument);
  p = f.Params();
  p.layout.head_dim = 0;
  EXPECT_EQ(GatherBlocksReference(p).code(), StatusCode::kInvalidArgument);
  // No blocks: nothing to do, nothing checked beyond the layout.
  p = f.Params();
  p.num_blocks = 0;
  p.arena = nullptr;
  EXPECT_TRUE(GatherBlocksReference(p).ok());
}

TEST(CopySlotsTest, CopiesListedSlotsAndNothingElse) {
  constexpr uint64_t kBlock = 4096;
  constexpr uint64_t kSrcStride = kBlock + 64;  // slack between source slots
  std::vector<uint8_t> src(10 * kSrcStride);
  std::mt19937 rng(5);
  for (uint8_t& x : src) x = static_cast<uint8_t>(rng());
  std::vector<uint8_t> dst(8 * kBlock, 0xA5);
  const std::vector<int32_t> from = {9, 0, 1, 2, 5};
  const std::vector<int32_t> to = {7, 0, 1, 2, 3};
  SlotCopyParams p;
  p.bytes_per_slot = kBlock;
  p.count = static_cast<uint32_t>(from.size());
  p.src = src.data();
  p.src_stride_bytes = kSrcStride;
  p.src_num_slots = 10;
  p.dst = dst.data();
  p.dst_stride_bytes = kBlock;
  p.dst_num_slots = 8;
  p.src_slots = from.data();
  p.dst_slots = to.data();
  ASSERT_TRUE(CopySlotsReference(p).ok());
  std::vector<bool> written(8, false);
  for (size_t i = 0; i < from.size(); ++i) {
    written[static_cast<size_t>(to[i])] = true;
    EXPECT_EQ(std::memcmp(dst.data() + static_cast<uint64_t>(to[i]) * kBlock,
                          src.data() + static_cast<uint64_t>(from[i]) * kSrcStride, kBlock),
              0);
  }
  for (size_t s = 0; s < 8; ++s) {
    if (written[s]) continue;
    for (uint64_t j = 0; j < kBlock; ++j) ASSERT_EQ(dst[s * kBlock + j], 0xA5) << "slot " << s;
  }

  // Round trip back into a copy of the source: identical.
  std::vector<uint8_t> back(src.size(), 0);
  SlotCopyParams r = p;
  r.src = dst.data();
  r.src_stride_bytes = kBlock;
  r.src_num_slots = 8;
  r.dst = back.data();
  r.dst_stride_bytes = kSrcStride;
  r.dst_num_slots = 10;
  r.src_slots = to.data();
  r.dst_slots = from.data();
  ASSERT_TRUE(CopySlotsReference(r).ok());
  for (int32_t s : from) {
    EXPECT_EQ(std::memcmp(back.data() + static_cast<uint64_t>(s) * kSrcStride,
                          src.data() + static_cast<uint64_t>(s) * kSrcStride, kBlock),
              0);
  }

  // Out of range, or more bytes than a slot holds: refused, nothing written.
  const std::vector<uint8_t> dst_before = dst;
  const std::vector<int32_t> bad = {0, 8};
  p.count = 2;
  p.dst_slots = bad.data();
  EXPECT_EQ(CopySlotsReference(p).code(), StatusCode::kInvalidArgument);
  p.dst_slots = to.data();
  p.bytes_per_slot = kBlock + 1;
  EXPECT_EQ(CopySlotsReference(p).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dst, dst_before);
}

}  // namespace
}  // namespace kvtier::kernels

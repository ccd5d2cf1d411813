// Calls the kernels do not implement, or that are malformed, get an error
// Status from every entry point, the GPU ones included, and write nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "kernels/attention.h"
#include "kernels/block_copy.h"

namespace kvtier::kernels {
namespace {

using testing::AttentionData;
using testing::AttentionShape;

AttentionShape SmallShape() {
  AttentionShape s;
  s.group = 2;
  s.seq_lens = {5, 40};
  s.chunk_tokens = 16;  // split, so the workspace matters
  return s;
}

// Both entry points must refuse `p`, with InvalidArgument, leaving o alone.
void ExpectRefused(const DecodeAttentionParams& p, const AttentionData& data, void* workspace,
                   uint64_t workspace_bytes, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<uint16_t> o_before = data.o;
  const Status ref = DecodeAttentionReference(p, workspace, workspace_bytes);
  EXPECT_EQ(ref.code(), StatusCode::kInvalidArgument) << ref.ToString();
  const Status gpu = DecodeAttention(p, workspace, workspace_bytes, nullptr);
  EXPECT_EQ(gpu.code(), StatusCode::kInvalidArgument) << gpu.ToString();
  EXPECT_EQ(data.o, o_before) << "o was written";
}

TEST(AttentionValidationTest, UnsupportedShapesAreRefused) {
  AttentionData data(SmallShape(), 1);
  std::vector<float> ws(1 << 16);
  const uint64_t ws_bytes = ws.size() * sizeof(float);
  const std::vector<std::pair<std::string, std::function<void(DecodeAttentionParams&)>>> edits = {
      {"head_dim 96", [](auto& p) { p.layout.head_dim = 96; }},
      {"head_dim 32", [](auto& p) { p.layout.head_dim = 32; }},
      {"group ratio 3", [](auto& p) { p.num_q_heads = 3 * p.layout.kv_heads; }},
      {"group ratio 16", [](auto& p) { p.num_q_heads = 16 * p.layout.kv_heads; }},
      {"q heads not a multiple", [](auto& p) { p.num_q_heads = p.layout.kv_heads * 2 + 1; }},
      {"no q heads", [](auto& p) { p.num_q_heads = 0; }},
      {"layer out of range", [](auto& p) { p.layer = p.layout.layers; }},
      {"fp32", [](auto& p) { p.layout.dtype = DType::kFloat32; }},
      {"fp8 blocks, fp32 q and o",
       [](auto& p) {
         p.layout.dtype = DType::kFp8E4M3;
         p.io_dtype = DType::kFloat32;
       }},
      {"batch 0", [](auto& p) { p.batch = 0; }},
      {"batch too large", [](auto& p) { p.batch = kMaxBatch + 1; }},
      {"no table columns", [](auto& p) { p.max_blocks_per_seq = 0; }},
      {"no slots", [](auto& p) { p.num_slots = 0; }},
      {"zero block_tokens", [](auto& p) { p.layout.block_tokens = 0; }},
      {"stride below block", [](auto& p) { p.slot_stride_bytes = p.layout.BlockBytes() - 16; }},
      {"stride not 16-aligned", [](auto& p) { p.slot_stride_bytes += 8; }},
      {"scale NaN", [](auto& p) { p.softmax_scale = std::numeric_limits<float>::quiet_NaN(); }},
      {"null q", [](auto& p) { p.q = nullptr; }},
      {"null o", [](auto& p) { p.o = nullptr; }},
      {"null arena", [](auto& p) { p.arena = nullptr; }},
      {"null block_table", [](auto& p) { p.block_table = nullptr; }},
      {"null seq_lens", [](auto& p) { p.seq_lens = nullptr; }},
      {"misaligned q", [](auto& p) { p.q = static_cast<const char*>(p.q) + 2; }},
      {"misaligned arena", [](auto& p) { p.arena = static_cast<const char*>(p.arena) + 8; }},
      {"MLA latent blocks",
       [](auto& p) {
         p.layout.kind = KvKind::kLatent;
         p.layout.kv_heads = 1;
         p.num_q_heads = 2;
       }},
  };
  for (const auto& [what, edit] : edits) {
    DecodeAttentionParams p = data.Params();
    edit(p);
    ExpectRefused(p, data, ws.data(), ws_bytes, what);
  }
}

TEST(AttentionValidationTest, ALatentLayoutIsRefusedAsNotKAndV) {
  AttentionData data(SmallShape(), 1);
  DecodeAttentionParams p = data.Params();
  p.layout.kind = KvKind::kLatent;
  p.layout.kv_heads = 1;
  p.num_q_heads = 2;
  const auto plan = PlanDecodeAttention(p);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("MLA latent blocks"), std::string::npos)
      << plan.status().ToString();
  EXPECT_NE(plan.status().message().find("not a K/V layout"), std::string::npos);
}

TEST(AttentionValidationTest, WorkspaceMustFitThePlan) {
  AttentionData data(SmallShape(), 2);
  const DecodeAttentionParams p = data.Params();
  auto plan = PlanDecodeAttention(p);
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->workspace_bytes, 0u);
  std::vector<float> ws(plan->workspace_bytes / sizeof(float) + 4);
  ExpectRefused(p, data, ws.data(), plan->workspace_bytes - 4, "workspace too small");
  ExpectRefused(p, data, nullptr, plan->workspace_bytes, "null workspace");
  ExpectRefused(p, data, reinterpret_cast<char*>(ws.data()) + 4, plan->workspace_bytes,
                "misaligned workspace");
  // The exact size is enough.
  EXPECT_TRUE(DecodeAttentionReference(p, ws.data(), plan->workspace_bytes).ok());
}

// What only the reference can see (host memory): bad seq_lens and table
// entries. Nothing is written.
TEST(AttentionValidationTest, ReferenceChecksSeqLensAndTableEntries) {
  std::vector<float> ws(1 << 16);
  const uint64_t ws_bytes = ws.size() * sizeof(float);
  auto refused = [&](const std::function<void(AttentionData&)>& edit, const std::string& what) {
    SCOPED_TRACE(what);
    AttentionData data(SmallShape(), 3);
    edit(data);
    const std::vector<uint16_t> before = data.o;
    const Status s = DecodeAttentionReference(data.Params(), ws.data(), ws_bytes);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_EQ(data.o, before);
  };
  refused([](AttentionData& d) { d.seq_lens[1] = -1; }, "negative length");
  refused(
      [](AttentionData& d) {
        d.seq_lens[1] = static_cast<int32_t>(d.max_blocks_per_seq() * 16 + 1);
      },
      "length past the table");
  refused([](AttentionData& d) { d.table[d.max_blocks_per_seq() + 1] = -1; }, "slot -1");
  refused([](AttentionData& d) { d.table[0] = static_cast<int32_t>(d.num_slots()); },
          "slot past the arena");
  // An unused entry may hold anything.
  AttentionData data(SmallShape(), 3);
  data.table[data.max_blocks_per_seq() - 1] = kNoSlot;
  EXPECT_TRUE(DecodeAttentionReference(data.Params(), ws.data(), ws_bytes).ok());
}

TEST(AttentionValidationTest, GpuEntryPointsSayWhenThereIsNoGpu) {
  if (GpuAvailable()) GTEST_SKIP() << "a GPU is present: " << GpuDescription();
  AttentionData data(SmallShape(), 4);
  std::vector<float> ws(1 << 16);
  const Status s = DecodeAttention(data.Params(), ws.data(), ws.size() * sizeof(float), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE(GpuDescription().empty());

  std::vector<uint8_t> a(64), b(64);
  const int32_t zero = 0;
  SlotCopyParams c;
  c.bytes_per_slot = 64;
  c.count = 1;
  c.src = a.data();
  c.src_stride_bytes = 64;
  c.src_num_slots = 1;
  c.dst = b.data();
  c.dst_stride_bytes = 64;
  c.dst_num_slots = 1;
  c.src_slots = &zero;
  c.dst_slots = &zero;
  EXPECT_EQ(CopySlots(c, nullptr).code(), StatusCode::kUnavailable);
}

TEST(BlockTableTest, PadsWithNoSlot) {
  auto t = BuildBlockTable({{4, 5, 6}, {}, {9}});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->batch, 3u);
  EXPECT_EQ(t->max_blocks_per_seq, 3u);
  EXPECT_EQ(t->slots,
            (std::vector<int32_t>{4, 5, 6, kNoSlot, kNoSlot, kNoSlot, 9, kNoSlot, kNoSlot}));
  t = BuildBlockTable({{1}, {2, 3}}, 4);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->slots, (std::vector<int32_t>{1, kNoSlot, kNoSlot, kNoSlot, 2, 3, kNoSlot, kNoSlot}));
  t = BuildBlockTable({{}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->max_blocks_per_seq, 1u);
}

TEST(BlockTableTest, RefusesWhatDoesNotFit) {
  EXPECT_EQ(BuildBlockTable({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildBlockTable({{1, 2, 3}}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildBlockTable({{0x80000000u}}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::kernels

// common/layout.h: the sizes, validation and names of K/V and MLA latent
// layouts.
#include "common/layout.h"

#include <gtest/gtest.h>

#include <string>

namespace kvtier {
namespace {

TEST(LayoutTest, AKvLayoutHasTwoPlanes) {
  const Layout kv{32, 8, 128, DType::kFloat16, 16};  // Llama-3-8B
  EXPECT_EQ(kv.kind, KvKind::kKeyValue);
  EXPECT_EQ(kv.Planes(), 2u);
  EXPECT_EQ(kv.BytesPerToken(), 2u * 32 * 8 * 128 * 2);
  EXPECT_EQ(kv.BlockBytes(), 2u * 1024 * 1024);
  EXPECT_TRUE(kv.Validate().ok());
  // The string of a K/V layout names no kind, as before kinds.
  EXPECT_EQ(kv.ToString(), "layers=32 kv_heads=8 head_dim=128 dtype=fp16 block_tokens=16");
}

TEST(LayoutTest, ALatentLayoutHasOnePlane) {
  // DeepSeek-V3: 61 layers, one 512 + 64 latent per token and layer.
  const Layout mla{61, 1, 576, DType::kBFloat16, 64, KvKind::kLatent};
  EXPECT_EQ(mla.Planes(), 1u);
  EXPECT_EQ(mla.BytesPerToken(), 61u * 576 * 2);
  EXPECT_EQ(mla.ValueBytes(), 61u * 576 * 2 * 64);
  EXPECT_EQ(mla.ScaleBytes(), 0u);
  EXPECT_EQ(mla.BlockBytes(), mla.ValueBytes());
  EXPECT_TRUE(mla.Validate().ok()) << mla.Validate().ToString();
  EXPECT_EQ(mla.ToString(),
            "layers=61 kv_heads=1 head_dim=576 dtype=bf16 block_tokens=64 kind=latent");

  Layout fp8 = mla;
  fp8.dtype = DType::kFp8E4M3;
  EXPECT_EQ(fp8.ScaleBytes(), 61u * 4);  // one fp32 per layer
  EXPECT_EQ(fp8.BlockBytes(), 61u * 576 * 64 + 61 * 4);

  // The kind is part of the layout.
  Layout kv = mla;
  kv.kind = KvKind::kKeyValue;
  EXPECT_NE(kv, mla);
  EXPECT_EQ(kv.BlockBytes(), 2 * mla.BlockBytes());
}

TEST(LayoutTest, ALatentLayoutHasOneKvHead) {
  const Layout two{4, 2, 576, DType::kFloat16, 16, KvKind::kLatent};
  const Status s = two.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("an MLA latent layout has kv_heads 1"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("not 2"), std::string::npos) << s.ToString();

  Layout unknown{4, 1, 576, DType::kFloat16, 16};
  unknown.kind = static_cast<KvKind>(2);
  EXPECT_NE(unknown.Validate().message().find("unknown layout kind 2"), std::string::npos);
  EXPECT_FALSE(Layout({4, 0, 576, DType::kFloat16, 16, KvKind::kLatent}).Validate().ok());
}

TEST(LayoutTest, TheBlockLimitCountsPlanes) {
  // 2^30 bytes exactly as a latent layout, twice that as K/V.
  const Layout latent{1024, 1, 512, DType::kFloat16, 1024, KvKind::kLatent};
  EXPECT_EQ(latent.BlockBytes(), kMaxBlockBytes);
  EXPECT_TRUE(latent.Validate().ok());
  Layout kv = latent;
  kv.kind = KvKind::kKeyValue;
  EXPECT_NE(kv.Validate().message().find("exceeds the 1 GiB block limit"), std::string::npos);
}

TEST(LayoutTest, KindNamesRoundTrip) {
  for (KvKind k : {KvKind::kKeyValue, KvKind::kLatent}) {
    KvKind parsed{};
    ASSERT_TRUE(ParseKvKind(KvKindName(k), &parsed));
    EXPECT_EQ(parsed, k);
  }
  EXPECT_EQ(KvKindName(KvKind::kKeyValue), "kv");
  EXPECT_EQ(KvKindName(KvKind::kLatent), "latent");
  KvKind out = KvKind::kLatent;
  EXPECT_FALSE(ParseKvKind("mla", &out));
  EXPECT_EQ(out, KvKind::kLatent);
}

}  // namespace
}  // namespace kvtier

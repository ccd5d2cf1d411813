// Quantize on demote (NamespaceSpec::quantize_lower) with a real SSD tier:
// blocks go down in fp8 and come back within the format's bound, through a
// warm restart too; NaN and infinity are never stored; the checksums cover
// the stored bytes; a namespace's setting is one for all its workers.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <map>

#include "engine_test_util.h"
#include "quantize_test_util.h"
#include "ssd_engine_fixture.h"
#include "tiers/internal/ssd_tier.h"

namespace kvtier::engine {
namespace {

using testing::Chain;
using testing::FillValues;
using testing::ValueLayout;
using testing::WithinFp8Bound;

class QuantizeLowerTest : public testing::SsdEngineFixture {
 protected:
  // A host tier of `host_blocks` blocks of layout_ over an SSD.
  void Build(uint64_t host_blocks, Quantize q, bool faulty = false, bool write_through = false) {
    const uint64_t block = layout_.BlockBytes();
    BuildEngine(host_blocks * block, 16 * block, 64 * block, faulty, write_through);
    if (HasFatalFailure()) return;
    auto ns = engine_->AddNamespace({"model", "", layout_, q});
    ASSERT_TRUE(ns.ok()) << ns.status().ToString();
    ns_ = *ns;
  }

  // Writes `keys` with their values (originals_ keeps them); returns how
  // many were written.
  size_t Put(std::span<const BlockKey> keys) {
    auto a = engine_->Allocate(ns_, std::nullopt, keys, TierKind::kHost);
    if (!a.ok()) return 0;
    for (size_t i = 0; i < a->size(); ++i) {
      if (a->state(i) != WriteState::kAllocated) continue;
      FillValues(a->Bytes(i), layout_, keys[i]);
      originals_[keys[i]].assign(a->Bytes(i).begin(), a->Bytes(i).end());
    }
    const size_t n = a->allocated();
    EXPECT_TRUE(a->Commit().ok());
    return n;
  }

  std::vector<TierKind> Where(std::span<const BlockKey> keys) {
    return engine_->Lookup(ns_, keys)->tiers;
  }

  Lease AcquireAll(std::span<const BlockKey> keys) {
    std::optional<Result<Lease>> got;
    engine_->AcquireAsync(ns_, keys, TierKind::kHost,
                          [&](Result<Lease> r) { got.emplace(std::move(r)); });
    io_.RunAll();
    EXPECT_TRUE(got.has_value() && got->ok());
    return std::move(*got).value();
  }

  uint64_t StoredSlot(Quantize q) const {
    return AlignUp(StoredLayout(layout_, q).BlockBytes(), tiers::kSlotPageBytes);
  }

  Layout layout_ = ValueLayout();
  std::map<BlockKey, std::vector<std::byte>> originals_;
};

struct Case {
  DType dtype;
  Quantize q;
};

class QuantizeRoundTripTest : public QuantizeLowerTest,
                              public ::testing::WithParamInterface<Case> {};

TEST_P(QuantizeRoundTripTest, BlocksGoDownInFp8AndComeBackWithinTheBound) {
  layout_ = ValueLayout(GetParam().dtype);
  const Quantize q = GetParam().q;
  Build(4, q);
  const auto a = Chain(1, 4);
  ASSERT_EQ(Put(a), 4u);
  ASSERT_EQ(Put(Chain(2, 4)), 4u);  // pushes chain 1 down to the ssd
  io_.RunAll();
  ASSERT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kSsd));
  EngineStats s = engine_->Stats();
  // Half the bytes, plus a page for the scales' 32 bytes at this small size.
  EXPECT_EQ(s.tiers[2].used_bytes, 4 * StoredSlot(q));
  EXPECT_EQ(s.tiers[2].bytes_in, 4 * StoredLayout(layout_, q).BlockBytes());
  EXPECT_EQ(s.quantized_blocks, 4u);

  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(WithinFp8Bound(originals_[a[i]], lease.Bytes(i), layout_, q)) << "block " << i;
  }
  s = engine_->Stats();
  EXPECT_EQ(s.dequantized_blocks, 4u);
  EXPECT_EQ(s.tiers[1].bytes_in, 4 * layout_.BlockBytes());  // moves only: the 4 restored
}

INSTANTIATE_TEST_SUITE_P(Forms, QuantizeRoundTripTest,
                         ::testing::Values(Case{DType::kFloat16, Quantize::kFp8E4M3},
                                           Case{DType::kBFloat16, Quantize::kFp8E4M3},
                                           Case{DType::kFloat16, Quantize::kFp8E5M2},
                                           Case{DType::kBFloat16, Quantize::kFp8E5M2}));

TEST_F(QuantizeLowerTest, OffKeepsEveryByteAndTheFullSize) {
  Build(4, Quantize::kOff);
  const auto a = Chain(1, 4);
  Put(a);
  Put(Chain(2, 4));
  io_.RunAll();
  EXPECT_EQ(engine_->Stats().tiers[2].used_bytes, 4 * layout_.BlockBytes());
  EXPECT_EQ(engine_->Stats().quantized_blocks, 0u);
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const auto got = lease.Bytes(i);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), originals_[a[i]].begin())) << i;
  }
}

TEST_F(QuantizeLowerTest, ABlockWithNanOrInfinityIsNeverStoredAndTheDiskIsNotBlamed) {
  Build(4, Quantize::kFp8E4M3);
  const auto a = Chain(1, 2);
  auto alloc = engine_->Allocate(ns_, std::nullopt, a, TierKind::kHost);
  ASSERT_TRUE(alloc.ok());
  for (size_t i = 0; i < 2; ++i) FillValues(alloc->Bytes(i), layout_, a[i]);
  // Block 0 holds a NaN in layer 1's V, head 1; block 1 an infinity there.
  const uint16_t nan = 0x7e00, inf = 0x7c00;
  const uint64_t v_head1 = (((1 * 2 + 1) * 16 + 3) * 2 + 1) * 64 + 5;
  std::memcpy(alloc->Bytes(0).data() + 2 * v_head1, &nan, 2);
  std::memcpy(alloc->Bytes(1).data() + 2 * (v_head1 + 64 * 2 * 5), &inf, 2);
  ASSERT_TRUE(alloc->Commit().ok());
  Put(Chain(2, 4));  // pushes both down
  io_.RunAll();
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.quantize_refused, 2u);
  EXPECT_EQ(s.io_errors, 0u);
  EXPECT_FALSE(s.ssd_paused);      // not the disk's fault: it keeps taking blocks
  EXPECT_EQ(Where(a).size(), 0u);  // a miss (recomputed), never garbage
  EXPECT_EQ(s.tiers[2].used_bytes, 0u);
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_[0].find("layer 1 V head 1"), std::string::npos) << log_[0];
  Put(Chain(3, 4));  // chain 2 goes down, fine
  io_.RunAll();
  EXPECT_EQ(Where(Chain(2, 4)), std::vector<TierKind>(4, TierKind::kSsd));
}

TEST_F(QuantizeLowerTest, WarmRestartRestoresWithinTheBoundWhateverTheSettingIsNow) {
  Build(4, Quantize::kFp8E4M3);
  const auto a = Chain(1, 4);
  Put(a);
  Put(Chain(2, 4));
  io_.RunAll();
  ASSERT_TRUE(engine_->tier(TierKind::kSsd)->Sync().ok());
  engine_.reset();
  // Restarted with the setting changed: each block keeps the form it was
  // written in, and is read in that form.
  Build(4, Quantize::kFp8E5M2);
  auto restored = engine_->Recover();
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 4u);
  EXPECT_EQ(engine_->Stats().tiers[2].used_bytes, 4 * StoredSlot(Quantize::kFp8E4M3));
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(WithinFp8Bound(originals_[a[i]], lease.Bytes(i), layout_, Quantize::kFp8E4M3)) << i;
  }
}

TEST_F(QuantizeLowerTest, TheChecksumCoversTheStoredBytes) {
  Build(4, Quantize::kFp8E4M3, /*faulty=*/true);
  const auto a = Chain(1, 2);
  Put(a);
  Put(Chain(2, 4));
  io_.RunAll();
  faults_.SetFlipByteOnRead(true);
  Lease lease = AcquireAll(a);
  EXPECT_EQ(lease.size(), 0u);
  lease.Release();
  io_.RunAll();
  EXPECT_GE(engine_->Stats().checksum_failures, 1u);
  EXPECT_EQ(Where(a).size(), 0u);
}

TEST_F(QuantizeLowerTest, WriteThroughShadowsAreStoredInFp8) {
  Build(4, Quantize::kFp8E4M3, false, /*write_through=*/true);
  const auto a = Chain(1, 4);
  Put(a);
  io_.RunAll();
  EXPECT_EQ(engine_->Stats().shadow_blocks, 4u);
  EXPECT_EQ(engine_->Stats().tiers[2].used_bytes, 4 * StoredSlot(Quantize::kFp8E4M3));
  Put(Chain(2, 4));  // chain 1's shadows become the blocks, no I/O
  EXPECT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kSsd));
  io_.RunAll();
  Lease lease = AcquireAll(a);
  ASSERT_EQ(lease.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(WithinFp8Bound(originals_[a[i]], lease.Bytes(i), layout_, Quantize::kFp8E4M3));
  }
}

TEST_F(QuantizeLowerTest, TheFirstWorkerSetsItAndOthersMustAgree) {
  Build(4, Quantize::kFp8E4M3);
  auto other = engine_->AddNamespace({"model", "", layout_, Quantize::kOff});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().ToString().find("quantize_lower fp8_e4m3"), std::string::npos);
  EXPECT_EQ(*engine_->AddNamespace({"model", "", layout_, Quantize::kFp8E4M3}), ns_);
  // fp8 is for 16-bit namespaces only.
  auto fp32 = engine_->AddNamespace(
      {"fp32-model", "", Layout{2, 2, 64, DType::kFloat32, 16}, Quantize::kFp8E4M3});
  EXPECT_EQ(fp32.status().code(), StatusCode::kInvalidArgument);

  // After a restart, a namespace restored from the disk takes the setting
  // of the first worker that attaches to it.
  Put(Chain(1, 4));
  Put(Chain(2, 4));
  io_.RunAll();
  engine_.reset();
  const uint64_t block = layout_.BlockBytes();
  auto host = tiers::NewHostTier({4 * block, 16 * block, false});
  tiers::internal::SsdOptions so;
  so.dir = dir_;
  so.capacity_bytes = 64 * block;
  EngineOptions options;
  options.io = &io_;
  auto e =
      CacheEngine::Create(options, nullptr, std::move(host).value(),
                          tiers::internal::NewSsdTierOver(*tiers::internal::SsdStore::Open(so)));
  ASSERT_TRUE(e.ok());
  engine_ = std::move(e).value();
  ASSERT_EQ(*engine_->Recover(), 4u);
  auto again = engine_->AddNamespace({"model", "", layout_, Quantize::kOff});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ns_ = *again;
  Lease lease = AcquireAll(Chain(1, 4));  // still read as the fp8 they were written in
  ASSERT_EQ(lease.size(), 4u);
  EXPECT_TRUE(
      WithinFp8Bound(originals_[Chain(1, 1)[0]], lease.Bytes(0), layout_, Quantize::kFp8E4M3));
  lease.Release();
  Put(Chain(3, 8));  // new blocks go down as written now
  io_.RunAll();
  EXPECT_EQ(engine_->Stats().quantized_blocks, 0u);
}

}  // namespace
}  // namespace kvtier::engine

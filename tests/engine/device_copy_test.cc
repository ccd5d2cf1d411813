// Promotions into a tier whose copies are asynchronous (a real GPU's arena,
// here the emulated device tier with async_copies) run on the engine's copy
// pool: the acquirer waits, everyone else does not, the block stays served
// from the host until its copy lands, and a failed copy loses nothing. The
// CUDA tier itself is tested in tests/tiers/cuda_device_tier_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>

#include "engine_test_util.h"

namespace kvtier::engine {
namespace {

using testing::Chain;
using testing::Matches;
using testing::Put;
using testing::SmallLayout;

// Forwards to a tier, failing Write when told to (STYLE.md 12).
class FailingWrites final : public Tier {
 public:
  FailingWrites(std::unique_ptr<Tier> base, std::atomic<bool>& fail)
      : base_(std::move(base)), fail_(fail) {}
  TierKind kind() const override { return base_->kind(); }
  std::string description() const override { return base_->description(); }
  bool emulated() const override { return base_->emulated(); }
  uint64_t capacity_bytes() const override { return base_->capacity_bytes(); }
  uint64_t used_bytes() const override { return base_->used_bytes(); }
  uint64_t SlotBytes(uint64_t b) const override { return base_->SlotBytes(b); }
  Result<SlotId> Allocate(uint64_t b) override { return base_->Allocate(b); }
  void Free(SlotId s) override { base_->Free(s); }
  Status Read(SlotId s, std::span<std::byte> d) override { return base_->Read(s, d); }
  Status Write(SlotId s, std::span<const std::byte> src) override {
    if (fail_.load()) return UnavailableError("injected: copy engine fault");
    return base_->Write(s, src);
  }
  std::span<std::byte> HostView(SlotId s, uint64_t b) override { return base_->HostView(s, b); }
  uint64_t SlotOffset(SlotId s) const override { return base_->SlotOffset(s); }
  int arena_fd() const override { return base_->arena_fd(); }
  uint64_t arena_bytes() const override { return base_->arena_bytes(); }
  bool copies_async() const override { return base_->copies_async(); }

 private:
  std::unique_ptr<Tier> base_;
  std::atomic<bool>& fail_;
};

class DeviceCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiers::ArenaTierOptions d{16 * 4096, 16 * 4096, false};
    d.async_copies = true;
    auto device = tiers::NewEmulatedDeviceTier(d);
    auto host = tiers::NewHostTier({16 * 4096, 16 * 4096, false});
    ASSERT_TRUE(device.ok() && host.ok());
    EngineOptions options;
    options.copy = &copies_;
    auto e = CacheEngine::Create(options,
                                 std::make_unique<FailingWrites>(std::move(device).value(), fail_),
                                 std::move(host).value());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
    ns_ = *engine_->AddNamespace({"model", "", SmallLayout()});
  }
  void TearDown() override {
    copies_.RunAll();
    const Status s = engine_->CheckInvariants();
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<TierKind> Where(std::span<const BlockKey> keys) {
    return engine_->Lookup(ns_, keys)->tiers;
  }

  ManualExecutor copies_;
  std::atomic<bool> fail_{false};
  std::unique_ptr<CacheEngine> engine_;
  NamespaceId ns_ = 0;
};

TEST_F(DeviceCopyTest, PromotionToTheDeviceRunsOffTheEnginesThread) {
  const auto a = Chain(1, 4);
  ASSERT_EQ(Put(*engine_, ns_, a), 4u);
  std::optional<Result<Lease>> first, second;
  engine_->AcquireAsync(ns_, a, TierKind::kDevice,
                        [&](Result<Lease> r) { first.emplace(std::move(r)); });
  // Queued, not done: the engine did not copy on its own thread.
  EXPECT_FALSE(first.has_value());
  EXPECT_EQ(copies_.in_flight(), 4u);
  EXPECT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kHost));  // still served from the host
  // A second acquirer for the device joins the same copies...
  engine_->AcquireAsync(ns_, a, TierKind::kDevice,
                        [&](Result<Lease> r) { second.emplace(std::move(r)); });
  EXPECT_EQ(copies_.in_flight(), 4u);
  // ...and a reader of the host copy is refused those blocks: their host
  // slots are freed when the copies land.
  EXPECT_EQ(engine_->Acquire(ns_, a, TierKind::kHost)->size(), 0u);
  // Other work goes on meanwhile.
  ASSERT_EQ(Put(*engine_, ns_, Chain(2, 2)), 2u);

  copies_.RunAll();
  ASSERT_TRUE(first.has_value() && first->ok() && second.has_value() && second->ok());
  for (Lease* lease : {&first->value(), &second->value()}) {
    ASSERT_EQ(lease->size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(lease->location(i).tier, TierKind::kDevice);
      EXPECT_TRUE(Matches(lease->Bytes(i), a[i])) << i;
    }
  }
  EXPECT_EQ(Where(a), std::vector<TierKind>(4, TierKind::kDevice));
  const EngineStats s = engine_->Stats();
  EXPECT_EQ(s.tiers[0].promotions_in, 4u);
  EXPECT_EQ(s.tiers[0].bytes_in, 4u * 4096);
  EXPECT_EQ(s.tiers[1].blocks, 2u);  // the host slots of chain 1 were freed
  EXPECT_EQ(s.moves_in_flight, 0u);
}

TEST_F(DeviceCopyTest, AFailedCopyLeavesTheBlockInTheHost) {
  const auto a = Chain(1, 3);
  ASSERT_EQ(Put(*engine_, ns_, a), 3u);
  fail_ = true;
  std::optional<Result<Lease>> got;
  engine_->AcquireAsync(ns_, a, TierKind::kDevice,
                        [&](Result<Lease> r) { got.emplace(std::move(r)); });
  copies_.RunAll();
  ASSERT_TRUE(got.has_value() && got->ok());
  EXPECT_EQ((*got)->size(), 0u);  // nothing landed on the device
  got.reset();
  EXPECT_EQ(Where(a), std::vector<TierKind>(3, TierKind::kHost));
  EXPECT_EQ(engine_->Stats().io_errors, 3u);
  EXPECT_EQ(engine_->Stats().tiers[0].used_bytes, 0u);  // the device slots went back
  // Served from the host, bytes intact; and the device once it works again.
  auto host = engine_->Acquire(ns_, a, TierKind::kHost);
  ASSERT_EQ(host->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(Matches(host->Bytes(i), a[i]));
  host->Release();
  fail_ = false;
  engine_->AcquireAsync(ns_, a, TierKind::kDevice,
                        [&](Result<Lease> r) { got.emplace(std::move(r)); });
  copies_.RunAll();
  ASSERT_TRUE(got.has_value() && got->ok());
  EXPECT_EQ((*got)->size(), 3u);
}

}  // namespace
}  // namespace kvtier::engine

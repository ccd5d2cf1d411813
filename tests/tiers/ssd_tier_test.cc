// The SSD tier over a real store: a freed slot's old record never outlives
// the next block written into it, whenever the engine's deferred
// ForgetBlock runs (or never does: a kill, a full queue).
#include "tiers/internal/ssd_tier.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "common/units.h"
#include "support/temp_dir.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::tiers {
namespace {

using kvtier::testing::TempDir;
using prefix_index::BlockKey;

constexpr uint64_t kBlockBytes = 16 << 10;

class SsdTierTest : public ::testing::Test {
 protected:
  void Open() {
    tier_.reset();
    internal::SsdOptions o;
    o.dir = dir_.path();
    o.capacity_bytes = 64ULL << 20;
    auto store = internal::SsdStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    tier_ = internal::NewSsdTierOver(std::move(store).value());
  }
  // Records are kept in key order, and a restart takes the first record
  // of two naming one slot: block i sorts before block i + 1.
  static BlockInfo Info(uint64_t i) {
    BlockInfo info;
    info.key = BlockKey{i, i};
    info.block_bytes = kBlockBytes;
    return info;
  }
  // Writes block i into a fresh slot; its checksum lands in info.
  SlotId Write(BlockInfo& info) {
    auto slot = tier_->Allocate(kBlockBytes);
    EXPECT_TRUE(slot.ok()) << slot.status().ToString();
    bytes_.assign(kBlockBytes, static_cast<std::byte>(info.key.lo));
    auto checksum = tier_->WriteBlock(*slot, info, bytes_);
    EXPECT_TRUE(checksum.ok()) << checksum.status().ToString();
    info.checksum = *checksum;
    return *slot;
  }
  // What a restart finds: key.lo → slot.
  std::map<uint64_t, SlotId> Stored() {
    Open();
    std::map<uint64_t, SlotId> found;
    const Status s = tier_->ForEachStoredBlock([&](const BlockInfo& info, SlotId slot) {
      found[info.key.lo] = slot;
      std::vector<std::byte> out(info.block_bytes);
      const Status read = tier_->ReadBlock(slot, info, out);
      EXPECT_TRUE(read.ok()) << "block " << info.key.lo << ": " << read.ToString();
      return Status::Ok();
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return found;
  }

  TempDir dir_{"/var/tmp/kvtier-ssd-tier"};
  std::unique_ptr<Tier> tier_;
  std::vector<std::byte> bytes_;
};

TEST_F(SsdTierTest, AFreedSlotsRecordGoesBeforeTheNextBlockIsWrittenThere) {
  Open();
  BlockInfo a = Info(1), b = Info(2);
  const SlotId slot = Write(a);
  // a leaves the tier; its ForgetBlock is queued, and has not run when b
  // takes the same slot (the lowest free one) and is written there. Were
  // a's record left, the restart would take it (it sorts first) over b's
  // bytes, and fail its checksum.
  tier_->FreeBlock(slot, a);
  EXPECT_EQ(Write(b), slot);
  const auto stored = Stored();  // as after a kill -9 here
  EXPECT_EQ(stored, (std::map<uint64_t, SlotId>{{b.key.lo, slot}}));
}

TEST_F(SsdTierTest, ALateForgetLeavesTheSlotsNextOwnerAndTheBlocksNewRecord) {
  Open();
  BlockInfo a = Info(1), b = Info(2);
  const SlotId first = Write(a);
  tier_->FreeBlock(first, a);
  // a comes back to disk at another slot, b takes a's old one; then the
  // ForgetBlock queued for a's first slot runs, late.
  Write(b);
  BlockInfo a_again = Info(1);
  const SlotId second = Write(a_again);
  ASSERT_NE(second, first);
  EXPECT_TRUE(tier_->ForgetBlock(first, a).ok());
  const auto stored = Stored();
  EXPECT_EQ(stored, (std::map<uint64_t, SlotId>{{a.key.lo, second}, {b.key.lo, first}}));
}

TEST_F(SsdTierTest, ForgetBlockDeletesTheRecordOfAFreedSlot) {
  Open();
  BlockInfo a = Info(1), b = Info(2);
  const SlotId sa = Write(a);
  const SlotId sb = Write(b);
  tier_->FreeBlock(sa, a);
  EXPECT_TRUE(tier_->ForgetBlock(sa, a).ok());
  EXPECT_EQ(Stored(), (std::map<uint64_t, SlotId>{{b.key.lo, sb}}));
}

}  // namespace
}  // namespace kvtier::tiers

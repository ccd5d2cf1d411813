#include "tiers/internal/ssd_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "common/units.h"

namespace kvtier::tiers::internal {
namespace {

constexpr uint64_t kPage = kSsdPageBytes;

SsdSpace Make(uint64_t capacity, uint64_t region) {
  auto s = SsdSpace::Create(capacity, region);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// Byte ranges of the slots in use; checks none overlap and all lie in the file.
void ExpectDisjoint(const std::map<uint64_t, uint64_t>& slots, const SsdSpace& space) {
  uint64_t end = 0;
  for (const auto& [page, bytes] : slots) {
    ASSERT_GE(page * kPage, end) << "slot at page " << page << " overlaps the one before";
    end = page * kPage + bytes;
    ASSERT_LE(end, space.regions() * space.region_bytes());
    ASSERT_EQ(space.SlotBytesAt(page), bytes);
  }
}

TEST(SsdSpaceTest, RegionSizeFollowsCapacity) {
  EXPECT_EQ(SsdSpace::RegionBytesFor(256 * kKiB), 4 * kKiB);
  EXPECT_EQ(SsdSpace::RegionBytesFor(64 * kMiB), kMiB);
  EXPECT_EQ(SsdSpace::RegionBytesFor(100 * kMiB), kMiB);
  EXPECT_EQ(SsdSpace::RegionBytesFor(16 * kGiB), 64 * kMiB);
  EXPECT_EQ(SsdSpace::RegionBytesFor(4096 * kGiB), 64 * kMiB);
  EXPECT_EQ(SsdSpace::Create(kMiB, 3 * kPage).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SsdSpace::Create(kMiB, 2 * kMiB).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SsdSpace::Create(32 * 1024 * kGiB, 64 * kMiB).status().code(),
            StatusCode::kInvalidArgument);  // above 16 TiB of pages
}

TEST(SsdSpaceTest, ExtentsWasteAtMostAnEighth) {
  const SsdSpace space = Make(64 * kGiB, 64 * kMiB);
  for (uint64_t slot : {kPage, 100 * kPage, 2 * kMiB, 9 * kMiB, 40 * kMiB, 64 * kMiB, 65 * kMiB,
                        96 * kMiB, 160 * kMiB, kGiB}) {
    const uint64_t bytes = space.ExtentRegions(slot) * space.region_bytes();
    EXPECT_GE(bytes, slot);
    EXPECT_LE(bytes % slot, bytes / 8) << slot;
  }
}

TEST(SsdSpaceTest, LowestFirstAndEmptiedExtentsGoBackToThePool) {
  SsdSpace space = Make(4 * kMiB, kMiB);  // four regions
  // 256 KiB slots: four to an extent of one region.
  std::vector<uint64_t> pages;
  for (int i = 0; i < 8; ++i) pages.push_back(*space.Allocate(256 * kKiB, 4));
  EXPECT_EQ(pages, (std::vector<uint64_t>{0, 64, 128, 192, 256, 320, 384, 448}));
  // 2 MiB slots take two aligned regions: regions 2-3 are the only such.
  auto big = space.Allocate(2 * kMiB, 4);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big, 512u);
  EXPECT_EQ(space.Allocate(256 * kKiB, 4).status().code(), StatusCode::kResourceExhausted);
  // Free a whole 256 KiB extent: it serves a 1 MiB block next.
  for (size_t i = 4; i < 8; ++i) ASSERT_TRUE(space.Free(256 * kKiB, pages[i]).ok());
  EXPECT_EQ(*space.Allocate(kMiB, 4), 256u);
  // Freeing one slot reopens it for its own size only, lowest first.
  ASSERT_TRUE(space.Free(256 * kKiB, pages[1]).ok());
  EXPECT_EQ(space.Free(256 * kKiB, pages[1]).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(space.Free(kMiB, pages[0]).code(), StatusCode::kFailedPrecondition);  // wrong size
  EXPECT_EQ(*space.Allocate(256 * kKiB, 4), 64u);
  EXPECT_TRUE(space.CheckInvariants().ok());
  EXPECT_EQ(space.used_bytes(), 4 * kMiB);
}

TEST(SsdSpaceTest, UnpreparedRegionsAreUnavailableNotFull) {
  SsdSpace space = Make(4 * kMiB, kMiB);
  EXPECT_EQ(space.Allocate(kMiB, 0).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(*space.Allocate(kMiB, 1), 0u);
  EXPECT_EQ(space.Allocate(kMiB, 1).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(*space.Allocate(kMiB, 4), 256u);
  // Restoring a slot past the usable part is refused.
  EXPECT_EQ(space.Reserve(kMiB, 768, 3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(space.Reserve(kMiB, 768, 4).ok());
}

TEST(SsdSpaceTest, ReserveRebuildsTheMapFromSlotsAlone) {
  const uint64_t capacity = 64 * kMiB, region = kMiB, usable = 64;
  const uint64_t sizes[] = {4 * kKiB, 100 * kKiB, 256 * kKiB, 2 * kMiB + 4 * kKiB, 5 * kMiB};
  SsdSpace first = Make(capacity, region);
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> live;  // page -> slot bytes
  for (int i = 0; i < 3000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(first.Free(it->second, it->first).ok());
      live.erase(it);
    } else {
      const uint64_t bytes = sizes[rng() % std::size(sizes)];
      auto page = first.Allocate(bytes, usable);
      if (!page.ok()) {
        ASSERT_EQ(page.status().code(), StatusCode::kResourceExhausted);
        continue;
      }
      ASSERT_TRUE(live.emplace(*page, bytes).second);
    }
    if (i % 100 == 0) {
      ASSERT_TRUE(first.CheckInvariants().ok());
      ExpectDisjoint(live, first);
    }
  }
  // A second map built from the slots in any order holds the same slots,
  // refuses a second claim on any, and goes on allocating without overlap.
  std::vector<std::pair<uint64_t, uint64_t>> order(live.begin(), live.end());
  std::shuffle(order.begin(), order.end(), rng);
  SsdSpace second = Make(capacity, region);
  for (const auto& [page, bytes] : order) {
    ASSERT_TRUE(second.Reserve(bytes, page, usable).ok());
  }
  EXPECT_EQ(second.used_bytes(), first.used_bytes());
  EXPECT_TRUE(second.CheckInvariants().ok());
  for (const auto& [page, bytes] : order) {
    EXPECT_EQ(second.Reserve(bytes, page, usable).code(), StatusCode::kFailedPrecondition);
  }
  for (int i = 0; i < 500; ++i) {
    const uint64_t bytes = sizes[rng() % std::size(sizes)];
    auto page = second.Allocate(bytes, usable);
    if (page.ok()) {
      ASSERT_TRUE(live.emplace(*page, bytes).second);
    }
  }
  ExpectDisjoint(live, second);
  EXPECT_LE(second.used_bytes(), capacity);
  EXPECT_TRUE(second.CheckInvariants().ok());
}

TEST(SsdSpaceTest, ReserveRefusesSlotsThatCannotBe) {
  SsdSpace space = Make(16 * kMiB, kMiB);
  EXPECT_EQ(space.Reserve(256 * kKiB, 1, 16).code(),
            StatusCode::kInvalidArgument);  // not a boundary
  EXPECT_EQ(space.Reserve(256 * kKiB, 16 * 256, 16).code(),
            StatusCode::kInvalidArgument);  // past the end
  ASSERT_TRUE(space.Reserve(256 * kKiB, 64, 16).ok());
  // Another size inside that extent's region is refused.
  EXPECT_EQ(space.Reserve(kMiB, 0, 16).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(space.CheckInvariants().ok());
}

}  // namespace
}  // namespace kvtier::tiers::internal

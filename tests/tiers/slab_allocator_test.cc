#include "tiers/internal/slab_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace kvtier::tiers::internal {
namespace {

constexpr uint64_t kPage = kSlotPageBytes;

SlabAllocator Make(uint64_t arena_bytes, uint64_t slab_bytes) {
  auto a = SlabAllocator::Create(arena_bytes, slab_bytes);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

TEST(SlabAllocatorTest, CreateRejectsBadArenas) {
  EXPECT_EQ(SlabAllocator::Create(0, kMiB).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SlabAllocator::Create(kPage + 1, kMiB).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SlabAllocator::Create(kMiB, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SlabAllocator::Create(SlabAllocator::kMaxArenaBytes + kPage, kMiB).status().code(),
            StatusCode::kInvalidArgument);
  // The largest arena costs no memory up front: nothing is kept per page.
  EXPECT_TRUE(SlabAllocator::Create(SlabAllocator::kMaxArenaBytes, 64 * kMiB).ok());
}

TEST(SlabAllocatorTest, RejectsZeroAndTooLargeBlocks) {
  SlabAllocator a = Make(16 * kMiB, 4 * kMiB);
  EXPECT_EQ(a.Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Allocate(16 * kMiB + 1).status().code(), StatusCode::kInvalidArgument);
  // Exactly the arena is one slab of its own; then nothing else fits.
  auto whole = a.Allocate(16 * kMiB);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, 0u);
  EXPECT_EQ(a.Allocate(1).status().code(), StatusCode::kResourceExhausted);
  a.Free(*whole);
  EXPECT_TRUE(a.Allocate(1).ok());
  EXPECT_TRUE(a.CheckInvariants().ok());
}

TEST(SlabAllocatorTest, SlotsArePageRoundedAndDistinct) {
  EXPECT_EQ(SlabAllocator::SlotBytes(1), kPage);
  EXPECT_EQ(SlabAllocator::SlotBytes(kPage), kPage);
  EXPECT_EQ(SlabAllocator::SlotBytes(kPage + 1), 2 * kPage);

  SlabAllocator a = Make(8 * kMiB, kMiB);
  auto s1 = a.Allocate(5000);
  auto s2 = a.Allocate(5000);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(*s2 - *s1, 2u);  // 5000 bytes take two pages
  EXPECT_EQ(a.AllocatedSlotBytes(*s1), 2 * kPage);
  EXPECT_EQ(a.AllocatedSlotBytes(*s1 + 1), 0u);  // inside a slot, not a slot
  EXPECT_EQ(a.used_bytes(), 4 * kPage);
  a.Free(*s1);
  EXPECT_EQ(a.AllocatedSlotBytes(*s1), 0u);
  EXPECT_EQ(a.used_bytes(), 2 * kPage);
}

TEST(SlabAllocatorTest, SlabIsWholeSlotsWithNoTailWaste) {
  SlabAllocator a = Make(256 * kMiB, 64 * kMiB);
  ASSERT_TRUE(a.Allocate(3 * kMiB).ok());
  const SlabAllocatorStats s = a.Stats();
  EXPECT_EQ(s.slabs, 1u);
  EXPECT_EQ(s.slab_bytes, 21 * 3 * kMiB);  // 21 slots of 3 MiB, not 64 MiB
  EXPECT_EQ(s.free_extent_bytes, 256 * kMiB - 63 * kMiB);
  EXPECT_TRUE(a.CheckInvariants().ok());
}

TEST(SlabAllocatorTest, ShortSlabUsesTheArenaEnd) {
  // 100 MiB: one full slab of 21 x 3 MiB, then 37 MiB left, which a full
  // slab does not fit but 12 more slots do.
  SlabAllocator a = Make(100 * kMiB, 64 * kMiB);
  int n = 0;
  while (a.Allocate(3 * kMiB).ok()) ++n;
  EXPECT_EQ(n, 33);
  EXPECT_EQ(a.Stats().slabs, 2u);
  EXPECT_EQ(a.Stats().free_extent_bytes, kMiB);
  EXPECT_TRUE(a.CheckInvariants().ok());
}

TEST(SlabAllocatorTest, AllocatesFromLowestPartialSlab) {
  SlabAllocator a = Make(64 * kMiB, 4 * kMiB);  // 4 slots of 1 MiB per slab
  std::vector<SlotId> slots;
  for (int i = 0; i < 12; ++i) slots.push_back(*a.Allocate(kMiB));
  EXPECT_EQ(a.Stats().slabs, 3u);
  a.Free(slots[9]);  // third slab
  a.Free(slots[5]);  // second slab
  a.Free(slots[6]);
  EXPECT_EQ(*a.Allocate(kMiB), slots[5]);
  EXPECT_EQ(*a.Allocate(kMiB), slots[6]);
  EXPECT_EQ(*a.Allocate(kMiB), slots[9]);
  EXPECT_EQ(a.Stats().slabs, 3u);
  EXPECT_TRUE(a.CheckInvariants().ok());
}

TEST(SlabAllocatorTest, EmptiedSlabReturnsItsExtent) {
  const uint64_t arena = 512 * kMiB;
  SlabAllocator a = Make(arena, 64 * kMiB);
  std::vector<SlotId> slots;
  const uint64_t size_a = 3 * kMiB + 1;
  for (auto s = a.Allocate(size_a); s.ok(); s = a.Allocate(size_a)) slots.push_back(*s);
  ASSERT_FALSE(slots.empty());
  EXPECT_GT(a.used_bytes(), arena * 9 / 10);
  const uint64_t size_b = 5 * kMiB;
  EXPECT_EQ(a.Allocate(size_b).status().code(), StatusCode::kResourceExhausted);

  for (SlotId s : slots) a.Free(s);
  const SlabAllocatorStats empty = a.Stats();
  EXPECT_EQ(empty.slabs, 0u);
  EXPECT_EQ(empty.used_bytes, 0u);
  EXPECT_EQ(empty.free_extents, 1u);  // coalesced back into one extent
  EXPECT_EQ(empty.free_extent_bytes, arena);
  ASSERT_TRUE(a.CheckInvariants().ok());

  uint64_t n = 0;
  while (a.Allocate(size_b).ok()) ++n;
  EXPECT_EQ(n, arena / size_b);  // class B fills the whole arena
  EXPECT_TRUE(a.CheckInvariants().ok());
}

TEST(SlabAllocatorTest, RandomChurnNeverExceedsCapacityOrOverlaps) {
  const uint64_t arena = 256 * kMiB;
  SlabAllocator a = Make(arena, 16 * kMiB);
  std::mt19937_64 rng(20240611);
  const std::vector<uint64_t> common_sizes = {100 * kKiB + 1, 300 * kKiB, 1536 * kKiB + 1000,
                                              2411724, 9 * kMiB};
  std::map<SlotId, uint64_t> live;  // slot -> slot bytes
  uint64_t live_bytes = 0;
  int exhausted = 0;
  for (int step = 0; step < 4000; ++step) {
    const bool alloc = live.empty() || rng() % 100 < 55;
    if (alloc) {
      const uint64_t size =
          rng() % 8 == 0 ? 1 + rng() % (12 * kMiB) : common_sizes[rng() % common_sizes.size()];
      auto s = a.Allocate(size);
      if (!s.ok()) {
        ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted);
        ++exhausted;
      } else {
        const uint64_t bytes = SlabAllocator::SlotBytes(size);
        ASSERT_EQ(a.AllocatedSlotBytes(*s), bytes);
        ASSERT_LE(uint64_t{*s} * kPage + bytes, arena);
        auto next = live.lower_bound(*s);
        if (next != live.end()) {
          ASSERT_LE(uint64_t{*s} * kPage + bytes, next->first * kPage);
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first * kPage + prev->second, uint64_t{*s} * kPage);
        }
        live.emplace(*s, bytes);
        live_bytes += bytes;
      }
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      a.Free(it->first);
      live_bytes -= it->second;
      live.erase(it);
    }
    ASSERT_LE(a.used_bytes(), arena);
    ASSERT_EQ(a.used_bytes(), live_bytes);
    ASSERT_EQ(a.Stats().slots_in_use, live.size());
    const Status inv = a.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "step " << step << ": " << inv.ToString();
  }
  EXPECT_GT(exhausted, 0) << "the sequence never filled the arena";
  for (const auto& [slot, bytes] : live) a.Free(slot);
  EXPECT_EQ(a.Stats().free_extents, 1u);
  EXPECT_TRUE(a.CheckInvariants().ok());
}

// ---- The >= 90 % rule ------------------------------------------------------
//
// Filled to failure with a mix of block sizes that are neither page
// multiples nor divisors of the slab size, the blocks' own bytes must cover
// at least 90 % of the arena, also after churn changes the mix.

struct Mix {
  const char* name;
  uint64_t arena_bytes;
  uint64_t slab_bytes;
  uint64_t size_a;
  uint64_t size_b;
};

class FillFractionTest : public testing::TestWithParam<Mix> {
 protected:
  struct Live {
    SlotId slot;
    uint64_t bytes;
  };

  // Allocates in the repeating `pattern` of sizes until every size fails.
  void FillToFailure(const std::vector<uint64_t>& pattern) {
    std::vector<bool> failed(pattern.size(), false);
    size_t failed_count = 0;
    for (size_t i = 0; failed_count < pattern.size(); i = (i + 1) % pattern.size()) {
      if (failed[i]) continue;
      auto s = alloc_.Allocate(pattern[i]);
      if (s.ok()) {
        live_.push_back({*s, pattern[i]});
        continue;
      }
      ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted);
      // Every entry of that size fails from now on: no frees while filling.
      for (size_t j = 0; j < pattern.size(); ++j) {
        if (pattern[j] == pattern[i] && !failed[j]) {
          failed[j] = true;
          ++failed_count;
        }
      }
    }
  }

  double BlockFraction() const {
    uint64_t bytes = 0;
    for (const Live& l : live_) bytes += l.bytes;
    return static_cast<double>(bytes) / static_cast<double>(alloc_.capacity_bytes());
  }

  void Report(const std::string& phase, double fraction) {
    RecordProperty(phase, std::to_string(fraction));
    std::printf("[  fill    ] %s %s: blocks hold %.4f of the arena (%zu blocks, %llu slabs)\n",
                GetParam().name, phase.c_str(), fraction, live_.size(),
                static_cast<unsigned long long>(alloc_.Stats().slabs));
  }

  SlabAllocator alloc_ = Make(GetParam().arena_bytes, GetParam().slab_bytes);
  std::vector<Live> live_;
};

TEST_P(FillFractionTest, AtLeastNinetyPercentBeforeAndAfterChurn) {
  const Mix& mix = GetParam();
  const uint64_t a = mix.size_a;
  const uint64_t b = mix.size_b;

  FillToFailure({a, b});
  ASSERT_TRUE(alloc_.CheckInvariants().ok());
  double fraction = BlockFraction();
  Report("initial", fraction);
  EXPECT_GE(fraction, 0.90);

  // Churn that shifts the mix: free about half the blocks, 3/4 of one size
  // and 1/4 of the other, then refill to failure with the proportions
  // swapped (1:3, then 3:1, ...).
  std::mt19937_64 rng(7);
  for (int round = 0; round < 6; ++round) {
    const uint64_t leaving = round % 2 == 0 ? a : b;
    std::vector<Live> kept;
    for (const Live& l : live_) {
      const uint64_t free_percent = l.bytes == leaving ? 75 : 25;
      if (rng() % 100 < free_percent) {
        alloc_.Free(l.slot);
      } else {
        kept.push_back(l);
      }
    }
    live_ = std::move(kept);
    ASSERT_TRUE(alloc_.CheckInvariants().ok());
    const double low = BlockFraction();
    if (round % 2 == 0) {
      FillToFailure({a, b, b, b});
    } else {
      FillToFailure({a, a, a, b});
    }
    std::printf("[  fill    ] %s churn round %d: %.4f after frees\n", mix.name, round, low);
    const Status inv = alloc_.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv.ToString();
    ASSERT_LE(alloc_.used_bytes(), alloc_.capacity_bytes());
    fraction = BlockFraction();
    Report("churn round " + std::to_string(round), fraction);
    EXPECT_GE(fraction, 0.90) << "round " << round;
  }
}

TEST_P(FillFractionTest, AtLeastNinetyPercentAfterOneSizeLeaves) {
  // The hardest mix change: every block of one size leaves and the other size
  // must take over the memory, which only works if emptied slabs go back.
  const Mix& mix = GetParam();
  FillToFailure({mix.size_a, mix.size_b});
  std::vector<Live> kept;
  for (const Live& l : live_) {
    if (l.bytes == mix.size_a) {
      alloc_.Free(l.slot);
    } else {
      kept.push_back(l);
    }
  }
  live_ = std::move(kept);
  FillToFailure({mix.size_b});
  ASSERT_TRUE(alloc_.CheckInvariants().ok());
  const double fraction = BlockFraction();
  Report("after size A left", fraction);
  EXPECT_GE(fraction, 0.90);
}

INSTANTIATE_TEST_SUITE_P(
    Mixes, FillFractionTest,
    testing::Values(Mix{"large_4g", 4 * kGiB, 64 * kMiB, 1536 * kKiB + 1000, 2411724},
                    Mix{"large_1g", 1 * kGiB, 64 * kMiB, 1536 * kKiB + 1000, 2411724},
                    Mix{"small_1g", 1 * kGiB, 64 * kMiB, 100 * kKiB + 1, 300 * kKiB},
                    Mix{"small_slabs", 512 * kMiB, 8 * kMiB, 100 * kKiB + 1, 700 * kKiB + 5}),
    [](const testing::TestParamInfo<Mix>& param_info) {
      return std::string(param_info.param.name);
    });

}  // namespace
}  // namespace kvtier::tiers::internal

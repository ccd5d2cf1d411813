// SampleIndex (eviction/internal/sample_index.h): the adaptive policy's one
// map from sampled fingerprints to each miniature cache's ids, checked
// against std::unordered_map under random sets and clears.
#include "eviction/internal/sample_index.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <unordered_map>

namespace kvtier::eviction::internal {
namespace {

TEST(SampleIndexTest, RowsHoldEachColumnsIdUntilTheLastColumnClears) {
  SampleIndex index(3);
  EXPECT_EQ(index.Find(42), SampleIndex::kNoRow);
  index.Set(42, 1, 7);
  const uint32_t row = index.Find(42);
  ASSERT_NE(row, SampleIndex::kNoRow);
  EXPECT_EQ(index.Get(row, 0), kNil);
  EXPECT_EQ(index.Get(row, 1), 7u);
  index.Set(42, 2, 9);
  EXPECT_EQ(index.Find(42), row);
  index.Clear(42, 1);
  EXPECT_EQ(index.Find(42), row);  // column 2 still holds it
  EXPECT_EQ(index.Get(row, 1), kNil);
  index.Clear(42, 2);
  EXPECT_EQ(index.Find(42), SampleIndex::kNoRow);
  EXPECT_EQ(index.size(), 0u);
}

TEST(SampleIndexTest, MatchesAMapUnderRandomSetsAndClears) {
  constexpr size_t kColumns = 3;
  SampleIndex index(kColumns);
  std::unordered_map<uint64_t, std::array<BlockId, kColumns>> model;
  std::mt19937_64 rng(5);
  // Fingerprints that share their low bits, as sampled ones do, from a small
  // pool so that sets and clears meet the same keys and probe runs form.
  std::vector<uint64_t> pool;
  for (int i = 0; i < 3000; ++i) pool.push_back(rng() << 4);
  for (int step = 0; step < 200'000; ++step) {
    const uint64_t fp = pool[rng() % pool.size()];
    const size_t col = rng() % kColumns;
    auto it = model.find(fp);
    const bool held = it != model.end() && it->second[col] != kNil;
    if (held) {
      index.Clear(fp, col);
      it->second[col] = kNil;
      if (it->second == std::array<BlockId, kColumns>{kNil, kNil, kNil}) model.erase(it);
    } else {
      const BlockId id = static_cast<BlockId>(rng() % 100'000);
      index.Set(fp, col, id);
      if (it == model.end())
        it = model.emplace(fp, std::array<BlockId, kColumns>{kNil, kNil, kNil}).first;
      it->second[col] = id;
    }
    if (step % 1000 == 0 || step > 199'000) {
      ASSERT_EQ(index.size(), model.size()) << "step " << step;
      for (uint64_t f : pool) {
        const uint32_t row = index.Find(f);
        auto m = model.find(f);
        ASSERT_EQ(row == SampleIndex::kNoRow, m == model.end()) << "step " << step;
        if (m == model.end()) continue;
        for (size_t c = 0; c < kColumns; ++c) ASSERT_EQ(index.Get(row, c), m->second[c]);
      }
    }
  }
  index.Reset();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Find(pool[0]), SampleIndex::kNoRow);
}

}  // namespace
}  // namespace kvtier::eviction::internal

// The frequency sketch the admission filters count lookups in, and the
// filters' decisions.
#include "eviction/admission.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/hash.h"
#include "eviction/internal/frequency_sketch.h"

namespace kvtier::eviction {
namespace {

using internal::FrequencySketch;

TEST(FrequencySketchTest, NeverUndercountsAndStopsAtFifteen) {
  FrequencySketch s(1024);
  // 500 keys counted 1..20 times each (well under one aging's worth).
  for (uint64_t k = 1; k <= 500; ++k) {
    for (uint64_t n = 0; n < k % 20 + 1; ++n) s.Increment(k * 0x9e3779b97f4a7c15ULL);
  }
  size_t exact = 0;
  for (uint64_t k = 1; k <= 500; ++k) {
    const unsigned want = std::min<unsigned>(15, static_cast<unsigned>(k % 20 + 1));
    const unsigned got = s.Frequency(k * 0x9e3779b97f4a7c15ULL);
    EXPECT_GE(got, want) << k;
    EXPECT_LE(got, 15u);
    exact += got == want;
  }
  // Half full, four counters a key: collisions in all four are rare.
  EXPECT_GT(exact, 480u);
  EXPECT_EQ(s.Frequency(0x1234), 0u);
}

TEST(FrequencySketchTest, AgingHalvesTheCounts) {
  FrequencySketch s(64);  // 64 words: ages after 640 counted increments
  ASSERT_EQ(s.words(), 64u);
  for (int i = 0; i < 12; ++i) s.Increment(7);
  ASSERT_EQ(s.Frequency(7), 12u);
  s.Age();
  EXPECT_EQ(s.Frequency(7), 6u);
  // Ten words' worth of increments of other keys age it by themselves:
  // what was frequent long ago fades (collisions add a little first).
  for (uint64_t k = 1; k <= 640; ++k) s.Increment(Mix64(k));
  EXPECT_LT(s.Frequency(7), 6u);
}

// IncrementAll (with its prefetches in a large table, without in a small
// one) counts exactly as Increment of each key in turn.
TEST(FrequencySketchTest, IncrementAllCountsAsIncrementDoes) {
  for (size_t keys : {size_t{1024}, size_t{1} << 16}) {
    FrequencySketch one(keys), all(keys);
    std::vector<uint64_t> chain;
    for (uint64_t k = 0; k < 100; ++k) chain.push_back(Mix64(k % 37 + 1));
    for (int round = 0; round < 5; ++round) {
      for (uint64_t fp : chain) one.Increment(fp);
      all.IncrementAll(chain);
    }
    for (uint64_t k = 0; k < 50; ++k) {
      EXPECT_EQ(all.Frequency(Mix64(k)), one.Frequency(Mix64(k))) << keys << " " << k;
    }
    EXPECT_EQ(all.Frequency(Mix64(1)), std::min(15u, 5u * 3));  // k % 37 == 0 thrice a chain
  }
}

TEST(FrequencySketchTest, GrowingKeepsEveryEstimate) {
  FrequencySketch s(64);
  std::vector<unsigned> before;
  for (uint64_t k = 0; k < 300; ++k) {
    for (uint64_t n = 0; n < k % 5; ++n) s.Increment(Mix64(k));
  }
  for (uint64_t k = 0; k < 400; ++k) before.push_back(s.Frequency(Mix64(k)));
  s.Grow(5000);
  EXPECT_EQ(s.words(), 8192u);
  for (uint64_t k = 0; k < 400; ++k) EXPECT_EQ(s.Frequency(Mix64(k)), before[k]) << k;
}

// A sketch given one key in 16 (an adaptive policy's miniature caches):
// a sixteenth of the words, aged after a sixteenth of the increments, so
// that it remembers as many references back as a sketch of every key.
TEST(FrequencySketchTest, ASampledSketchIsSmallerAndAgesSooner) {
  FrequencySketch full(64);
  FrequencySketch sampled(64);
  full.Grow(4096);
  sampled.Grow(4096, 16);
  EXPECT_EQ(full.words(), 4096u);
  EXPECT_EQ(sampled.words(), 256u);
  for (FrequencySketch* s : {&full, &sampled}) {
    for (int i = 0; i < 8; ++i) s->Increment(7);
  }
  // 10 x 4,096 / 16 increments of other keys: the sampled sketch has aged
  // (halved), the full one has not.
  for (uint64_t k = 1; k <= 2560; ++k) {
    full.Increment(Mix64(k));
    sampled.Increment(Mix64(k));
  }
  EXPECT_GE(full.Frequency(7), 8u);
  EXPECT_LT(sampled.Frequency(7), 8u);
  // Never fewer than 64 words.
  FrequencySketch tiny(64);
  tiny.Grow(100, 64);
  EXPECT_EQ(tiny.words(), 64u);
}

TEST(AdmissionFilterTest, NamesAndErrors) {
  auto off = NewAdmissionFilter("off");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, nullptr);
  for (std::string_view name : AdmissionNames()) {
    auto f = NewAdmissionFilter(name);
    ASSERT_TRUE(f.ok()) << name;
    if (name != "off") {
      EXPECT_EQ((*f)->name(), name);
    }
  }
  auto bad = NewAdmissionFilter("lru");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown admission filter 'lru' (off, seen, tinylfu)");
}

// "seen": a block enters a full tier on its second sighting (its own
// lookup counts once); "tinylfu": only if looked up more often than the
// victim.
TEST(AdmissionFilterTest, SeenAndTinyLfuDecide) {
  auto seen = std::move(NewAdmissionFilter("seen")).value();
  auto tiny = std::move(NewAdmissionFilter("tinylfu")).value();
  for (AdmissionFilter* f : {seen.get(), tiny.get()}) {
    f->SetCapacity(1000);
    const std::vector<uint64_t> hot = {Mix64(1), Mix64(2)};
    for (int i = 0; i < 3; ++i) f->Referenced(hot);  // a prefix asked for three times
    const std::vector<uint64_t> once = {Mix64(1), Mix64(2), Mix64(3)};
    f->Referenced(once);  // ... and once with a new block under it
  }
  EXPECT_FALSE(seen->Admit(Mix64(3), Mix64(2)));  // first sighting
  EXPECT_TRUE(seen->Admit(Mix64(2), Mix64(3)));
  EXPECT_FALSE(tiny->Admit(Mix64(3), Mix64(2)));  // 1 against 4
  EXPECT_TRUE(tiny->Admit(Mix64(2), Mix64(3)));   // 4 against 1
  EXPECT_FALSE(tiny->Admit(Mix64(1), Mix64(2)));  // a tie keeps the victim
  const std::vector<uint64_t> again = {Mix64(1), Mix64(2), Mix64(3)};
  seen->Referenced(again);
  EXPECT_TRUE(seen->Admit(Mix64(3), Mix64(2)));  // its second sighting
}

}  // namespace
}  // namespace kvtier::eviction

// The adaptive policy's own rules (the contract tests cover the rest, and
// tests/replay/adaptive_test.cc its choices on whole traces).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/hash.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/adaptive.h"

namespace kvtier::eviction {
namespace {

BlockMeta Meta(uint8_t priority = kDefaultPriority, TimeNs expires = kNoExpiry) {
  BlockMeta m;
  m.size_bytes = 4096;
  m.priority = priority;
  m.priority_expires_at = expires;
  return m;
}

TEST(AdaptivePolicyTest, PriorityRetentionAppliesOnTop) {
  ManualClock clock;
  auto p = NewPolicy("adaptive", clock);
  ASSERT_TRUE(p.ok());
  EvictionPolicy& a = **p;
  a.Insert(0, Meta(90));                          // kept longest
  a.Insert(1, Meta());                            // the candidates' block
  a.Insert(2, Meta(10));                          // goes first
  a.Insert(3, Meta(5, clock.Now() + kNsPerSec));  // would go first, but expires
  clock.Advance(2 * kNsPerSec);
  std::vector<BlockId> order;
  while (auto v = a.Victim()) {
    order.push_back(*v);
    a.Erase(*v);
  }
  // 3's priority has expired: it counts as the default, behind the
  // candidates' blocks.
  EXPECT_EQ(order, (std::vector<BlockId>{2, 1, 3, 0}));
}

TEST(AdaptivePolicyTest, ReportsItsCandidatesAndFollowsTheFirstAtFirst) {
  ManualClock clock;
  AdaptiveOptions o;
  o.candidates = {"lru", "s3fifo"};
  auto p = NewAdaptivePolicy(clock, o);
  ASSERT_TRUE(p.ok());
  const auto r = (*p)->adaptive_report();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->candidates.size(), 2u);
  EXPECT_EQ(r->candidates[0].name, "lru");
  EXPECT_TRUE(r->candidates[0].followed);
  EXPECT_FALSE(r->candidates[1].followed);
  EXPECT_EQ(r->switches, 0u);
  EXPECT_TRUE((*p)->wants_references());
  // Fixed policies report nothing and want no references.
  auto lru = NewPolicy("lru", clock);
  EXPECT_FALSE((*lru)->adaptive_report().has_value());
  EXPECT_FALSE((*lru)->wants_references());
}

// The sampling rate: every key while a miniature cache would hold fewer
// than min_sample_blocks at one in min_stride, then one in min_stride, then
// lower as the tier outgrows sample_blocks * min_stride.
TEST(AdaptivePolicyTest, SamplesEveryKeyOfATinyTierAndFewerAsItGrows) {
  ManualClock clock;
  auto p = NewAdaptivePolicy(clock);  // 8 blocks at least, 2048 wanted, 1 in 16
  ASSERT_TRUE(p.ok());
  const auto stride_at = [&](BlockId blocks) {
    for (BlockId id = static_cast<BlockId>((*p)->size()); id < blocks; ++id) {
      BlockMeta m;
      m.fingerprint = Mix64(id + 1);
      (*p)->Insert(id, m);
    }
    return (*p)->adaptive_report()->sample_stride;
  };
  EXPECT_EQ(stride_at(1), 1u);
  EXPECT_EQ(stride_at(12), 1u);
  EXPECT_EQ(stride_at(40), 4u);      // 32 / 8
  EXPECT_EQ(stride_at(1000), 16u);   // 512 / 8 = 64, at most 16
  EXPECT_EQ(stride_at(70000), 32u);  // 65536 / 2048
}

// A session's chain twice the tier, written as the engine writes it (every
// new block pinned, each a child of the one before) until the tier first
// wants a victim. The probe then serves the chain again with one block
// more: plain LRU drops the block before the one it writes under, leaf-first
// LRU keeps the chain whole. Where victims go to a tier below, nothing is
// lost by that, and the first candidate starts.
std::string StartsWith(bool victims_demoted) {
  ManualClock clock;
  auto p = NewAdaptivePolicy(clock);
  EXPECT_TRUE(p.ok());
  (*p)->SetVictimsDemoted(victims_demoted);
  constexpr BlockId kTier = 400;
  std::vector<uint64_t> chain;
  for (BlockId i = 0; i < 2 * kTier; ++i) chain.push_back(Mix64(i + 1));
  (*p)->Referenced(chain);
  for (BlockId id = 0; id < kTier; ++id) {
    BlockMeta m;
    m.fingerprint = chain[id];
    m.pinned = true;
    (*p)->Insert(id, m);
    if (id > 0) {
      m.fingerprint = chain[id - 1];
      m.children_in_tier = 1;
      (*p)->Update(id - 1, m);
    }
  }
  EXPECT_FALSE((*p)->Victim().has_value());  // every block pinned
  const std::optional<AdaptiveReport> report = (*p)->adaptive_report();
  for (const CandidateReport& c : report->candidates) {
    if (c.followed) return c.name;
  }
  return "";
}

// An ssd tier below a host tier that has not filled yet is told of every
// lookup while it holds nothing; its miniature caches would sample every
// key (the stride follows the high water mark, still 0). They wait for the
// tier's first block instead. A tier on top counts from the first lookup.
TEST(AdaptivePolicyTest, ATierBelowThatNeverHeldABlockSamplesNothing) {
  ManualClock clock;
  std::vector<uint64_t> chain;
  for (uint64_t i = 1; i <= 64; ++i) chain.push_back(Mix64(i));
  auto top = NewAdaptivePolicy(clock);
  ASSERT_TRUE(top.ok());
  (*top)->Referenced(chain);
  EXPECT_EQ((*top)->adaptive_report()->sampled_refs, chain.size());

  auto p = NewAdaptivePolicy(clock);
  ASSERT_TRUE(p.ok());
  (*p)->SetBelowAnotherTier(true);
  for (int r = 0; r < 10; ++r) (*p)->Referenced(chain);
  EXPECT_EQ((*p)->adaptive_report()->sampled_refs, 0u);
  BlockMeta m;
  m.fingerprint = chain[0];
  (*p)->Insert(0, m);
  (*p)->Referenced(chain);  // stride 1 now: every key
  EXPECT_EQ((*p)->adaptive_report()->sampled_refs, chain.size());
  // Emptied again, it keeps counting: only never having held a block is
  // the waiting state.
  (*p)->Erase(0);
  (*p)->Referenced(chain);
  EXPECT_EQ((*p)->adaptive_report()->sampled_refs, 2 * chain.size());
}

TEST(AdaptivePolicyTest, ALastTierStartsWithTheCandidateThatKeepsTheLastChain) {
  EXPECT_EQ(StartsWith(/*victims_demoted=*/false), "leaf-lru");
  EXPECT_EQ(StartsWith(/*victims_demoted=*/true), "lru");
}

// The recency stamps (the order a rebuilt candidate gets) are 32 bits,
// renumbered when they run out. A policy whose stamps run out every few
// dozen operations decides exactly as one whose never do: the same
// victims, switches and sampled hits, through inserts, touches, pins,
// children, erases and references that make it switch candidates (at
// any lead: margin 0). The first victim is wanted only after thousands of
// stamps, so the first candidate too is built from renumbered ones.
TEST(AdaptivePolicyTest, RenumberedStampsKeepEveryDecision) {
  ManualClock clock;
  AdaptiveOptions options;
  options.margin = 0;
  auto wide = NewAdaptivePolicy(clock, options);
  auto narrow = internal::NewAdaptivePolicyWithStampLimit(clock, options, 64);
  ASSERT_TRUE(wide.ok());
  ASSERT_TRUE(narrow.ok());
  EvictionPolicy* both[] = {wide->get(), narrow->get()};
  std::mt19937 rng(5);
  constexpr BlockId kIds = 40;
  std::vector<bool> tracked(kIds, false);
  std::vector<BlockMeta> meta(kIds);
  size_t victims = 0;
  for (int step = 0; step < 40'000; ++step) {
    const BlockId id = static_cast<BlockId>(rng() % kIds);
    const int op = static_cast<int>(rng() % 6);
    if (op == 0 && !tracked[id]) {
      meta[id] = BlockMeta{};
      meta[id].fingerprint = Mix64(rng() % 200 + 1);
      meta[id].pinned = rng() % 4 == 0;
      for (EvictionPolicy* p : both) p->Insert(id, meta[id]);
      tracked[id] = true;
    } else if (op == 1 && tracked[id]) {
      for (EvictionPolicy* p : both) p->Touch(id, meta[id]);
    } else if (op == 2 && tracked[id]) {
      meta[id].pinned = rng() % 3 == 0;
      meta[id].children_in_tier = rng() % 3 == 0 ? 1 : 0;
      for (EvictionPolicy* p : both) p->Update(id, meta[id]);
    } else if (op == 3 && tracked[id]) {
      for (EvictionPolicy* p : both) p->Erase(id);
      tracked[id] = false;
    } else if (op == 4 && step > 5'000) {
      const std::optional<BlockId> v = wide->get()->Victim();
      ASSERT_EQ(v, narrow->get()->Victim()) << "step " << step;
      if (v) {
        for (EvictionPolicy* p : both) p->Erase(*v);
        tracked[*v] = false;
        ++victims;
      }
    } else if (op == 5) {
      std::vector<uint64_t> chain;
      for (size_t n = rng() % 12; n > 0; --n) chain.push_back(Mix64(rng() % 200 + 1));
      for (EvictionPolicy* p : both) p->Referenced(chain);
    }
  }
  const AdaptiveReport a = *wide->get()->adaptive_report();
  const AdaptiveReport b = *narrow->get()->adaptive_report();
  EXPECT_GT(victims, 1000u);
  EXPECT_GT(a.switches, 10u);
  EXPECT_EQ(a.switches, b.switches);
  for (size_t i = 0; i < a.candidates.size(); ++i) {
    EXPECT_EQ(a.candidates[i].followed, b.candidates[i].followed);
    EXPECT_EQ(a.candidates[i].sampled_hit_rate, b.candidates[i].sampled_hit_rate);
    EXPECT_EQ(a.candidates[i].overall_sampled_hit_rate, b.candidates[i].overall_sampled_hit_rate);
  }
}

TEST(AdaptivePolicyTest, BadOptionsAreRefused) {
  ManualClock clock;
  AdaptiveOptions none;
  none.candidates = {};
  EXPECT_FALSE(NewAdaptivePolicy(clock, none).ok());
  AdaptiveOptions self;
  self.candidates = {"lru", "adaptive"};
  EXPECT_FALSE(NewAdaptivePolicy(clock, self).ok());
  AdaptiveOptions unknown;
  unknown.candidates = {"lru", "nope"};
  EXPECT_FALSE(NewAdaptivePolicy(clock, unknown).ok());
  AdaptiveOptions stride;
  stride.min_stride = 6;
  EXPECT_FALSE(NewAdaptivePolicy(clock, stride).ok());
  // A filtered candidate is its policy's filter: the policy must be a
  // candidate too, and comes first.
  const auto refused = [&](std::vector<std::string> candidates) {
    AdaptiveOptions o;
    o.candidates = std::move(candidates);
    auto p = NewAdaptivePolicy(clock, o);
    return p.ok() ? std::string() : std::string(p.status().message());
  };
  EXPECT_EQ(refused({"lru", "leaf-lru/seen"}),
            "adaptive: candidate 'leaf-lru/seen' needs 'leaf-lru' among the candidates: it is "
            "followed as that policy's filter");
  EXPECT_EQ(refused({"lru/seen", "lru"}),
            "adaptive: the first candidate, followed at the start, has no filter");
  EXPECT_EQ(refused({"lru", "lru/nope"}),
            "adaptive: candidate 'lru/nope': unknown admission filter 'nope' (off, seen, tinylfu)");
  EXPECT_EQ(refused({"lru", "lru/off"}),
            "adaptive: candidate 'lru/off': 'off' is no filter: name the policy alone");
  EXPECT_EQ(refused({"lru", "lru/seen", "lru/tinylfu"}), "");
}

// "adaptive:<candidates joined by +>" names an adaptive policy with its own
// candidates, wherever a policy is named (the daemon's configuration,
// kvtier replay); a bad list is refused with AdaptiveOptions' reason.
TEST(AdaptivePolicyTest, CandidatesByName) {
  ManualClock clock;
  auto p = NewPolicy("adaptive:lru+leaf-learned+lru/seen", clock);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->name(), "adaptive");
  std::vector<std::string> names;
  const std::optional<AdaptiveReport> report = (*p)->adaptive_report();
  ASSERT_TRUE(report.has_value());
  for (const CandidateReport& c : report->candidates) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"lru", "leaf-learned", "lru/seen"}));
  EXPECT_TRUE(CheckPolicyName("adaptive:learned").ok());
  EXPECT_EQ(CheckPolicyName("adaptive:lru+").message(),
            "eviction policy 'adaptive:lru+': an empty candidate (adaptive:lru+learned names two)");
  EXPECT_EQ(CheckPolicyName("adaptive:").message(),
            "eviction policy 'adaptive:': an empty candidate (adaptive:lru+learned names two)");
  EXPECT_EQ(CheckPolicyName("adaptive:lru+adaptive").message(),
            "adaptive: cannot be its own candidate");
  EXPECT_FALSE(CheckPolicyName("adaptive:lru+nope").ok());
  EXPECT_FALSE(CheckPolicyName("adaptive-lru").ok());
}

// The default candidates include filtered ones: the policy may filter
// admission, and reports them by name; until the tier is full it follows
// no filter.
TEST(AdaptivePolicyTest, DefaultCandidatesIncludeFilteredOnes) {
  ManualClock clock;
  auto p = NewAdaptivePolicy(clock);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*p)->filters_admission());
  EXPECT_EQ((*p)->admission(), nullptr);
  std::vector<std::string> names;
  const std::optional<AdaptiveReport> report = (*p)->adaptive_report();
  ASSERT_TRUE(report.has_value());
  for (const CandidateReport& c : report->candidates) names.push_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"lru", "leaf-lru", "s3fifo", "lru/seen", "leaf-lru/seen"}));
  AdaptiveOptions plain;
  plain.candidates = {"lru", "s3fifo"};
  EXPECT_FALSE((*NewAdaptivePolicy(clock, plain))->filters_admission());
  EXPECT_FALSE((*NewPolicy("lru", clock))->filters_admission());
}

}  // namespace
}  // namespace kvtier::eviction

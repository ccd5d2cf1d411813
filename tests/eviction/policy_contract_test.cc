// The contract every eviction policy honours (eviction_policy.h), run over
// every policy NewPolicy() knows (STYLE.md 17).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction {
namespace {

class PolicyContractTest : public ::testing::TestWithParam<std::string_view> {
 protected:
  void SetUp() override {
    auto p = NewPolicy(GetParam(), clock_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    policy_ = std::move(p).value();
  }

  static BlockMeta Meta(bool pinned = false) {
    BlockMeta m;
    m.size_bytes = 4096;
    m.pinned = pinned;
    return m;
  }

  ManualClock clock_;
  std::unique_ptr<EvictionPolicy> policy_;
};

TEST_P(PolicyContractTest, NameMatches) { EXPECT_EQ(policy_->name(), GetParam()); }

TEST_P(PolicyContractTest, EmptyHasNoVictim) {
  EXPECT_EQ(policy_->size(), 0u);
  EXPECT_FALSE(policy_->Victim().has_value());
}

TEST_P(PolicyContractTest, VictimIsATrackedBlock) {
  for (BlockId id = 0; id < 10; ++id) policy_->Insert(id, Meta());
  EXPECT_EQ(policy_->size(), 10u);
  auto v = policy_->Victim();
  ASSERT_TRUE(v.has_value());
  EXPECT_LT(*v, 10u);
}

TEST_P(PolicyContractTest, PinnedBlocksAreNeverVictims) {
  for (BlockId id = 0; id < 8; ++id) policy_->Insert(id, Meta(/*pinned=*/id % 2 == 0));
  std::set<BlockId> seen;
  while (auto v = policy_->Victim()) {
    EXPECT_EQ(*v % 2, 1u) << "pinned block " << *v << " named as victim";
    seen.insert(*v);
    policy_->Erase(*v);
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(policy_->size(), 4u);  // the pinned ones are still tracked
  // Unpinning makes them candidates again.
  policy_->Update(0, Meta(false));
  auto v = policy_->Victim();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, 0u);
}

TEST_P(PolicyContractTest, AllPinnedMeansNoVictim) {
  for (BlockId id = 0; id < 4; ++id) policy_->Insert(id, Meta(true));
  EXPECT_FALSE(policy_->Victim().has_value());
  policy_->Touch(2, Meta(true));
  EXPECT_FALSE(policy_->Victim().has_value());
}

TEST_P(PolicyContractTest, ErasedBlocksAreNeverNamed) {
  for (BlockId id = 0; id < 6; ++id) policy_->Insert(id, Meta());
  policy_->Erase(3);
  policy_->Erase(0);
  std::set<BlockId> victims;
  while (auto v = policy_->Victim()) {
    EXPECT_TRUE(victims.insert(*v).second) << "named twice";
    policy_->Erase(*v);
  }
  EXPECT_EQ(victims, (std::set<BlockId>{1, 2, 4, 5}));
}

TEST_P(PolicyContractTest, IdsCanBeReusedAfterErase) {
  policy_->Insert(5, Meta());
  policy_->Erase(5);
  policy_->Insert(5, Meta(true));
  EXPECT_EQ(policy_->size(), 1u);
  EXPECT_FALSE(policy_->Victim().has_value());
}

// Random events, with a model of which blocks are tracked and pinned: a
// victim is always tracked and unpinned, and exists iff one such block does.
TEST_P(PolicyContractTest, RandomEventsKeepTheContract) {
  std::mt19937 rng(7);
  std::vector<int> state(64, -1);  // -1 untracked, 0 unpinned, 1 pinned
  for (int step = 0; step < 20'000; ++step) {
    const BlockId id = rng() % 64;
    const bool pinned = rng() % 3 == 0;
    switch (rng() % 5) {
      case 0:
        if (state[id] < 0) {
          policy_->Insert(id, Meta(pinned));
          state[id] = pinned;
        }
        break;
      case 1:
        if (state[id] >= 0) {
          policy_->Touch(id, Meta(pinned));
          state[id] = pinned;
        }
        break;
      case 2:
        if (state[id] >= 0) {
          policy_->Update(id, Meta(pinned));
          state[id] = pinned;
        }
        break;
      case 3:
        if (state[id] >= 0) {
          policy_->Erase(id);
          state[id] = -1;
        }
        break;
      default: {
        clock_.Advance(kNsPerMs);
        const auto v = policy_->Victim();
        const bool any = std::count(state.begin(), state.end(), 0) > 0;
        ASSERT_EQ(v.has_value(), any) << "step " << step;
        if (v) {
          ASSERT_EQ(state[*v], 0) << "victim " << *v << " untracked or pinned";
        }
      }
    }
    ASSERT_EQ(policy_->size(),
              static_cast<size_t>(64 - std::count(state.begin(), state.end(), -1)));
  }
}

// The same with every field of the metadata random (priorities that
// expire, children, fingerprints): only pinned decides the contract, except
// that a leaf-first policy may keep blocks with children.
TEST_P(PolicyContractTest, RandomMetadataKeepsTheContract) {
  const bool leaf_first = GetParam().starts_with("leaf-");
  std::mt19937 rng(13);
  std::vector<int> state(64, -1);  // -1 untracked, 0 candidate, 1 kept
  auto random_meta = [&](bool pinned) {
    BlockMeta m = Meta(pinned);
    m.priority = static_cast<uint8_t>(rng() % 101);
    if (rng() % 2 == 0)
      m.priority_expires_at = clock_.Now() + static_cast<TimeNs>(rng() % 50) * kNsPerMs;
    m.children_in_tier = rng() % 4 == 0 ? 1 : 0;
    m.fingerprint = rng() % 3;
    return m;
  };
  // The adaptive policy keeps blocks with children while it follows a
  // leaf-first candidate.
  auto follows_leaf_first = [&] {
    const auto report = policy_->adaptive_report();
    if (!report) return false;
    for (const CandidateReport& c : report->candidates) {
      if (c.followed) return c.name.starts_with("leaf-");
    }
    return false;
  };
  auto kept = [&](const BlockMeta& m) {
    return m.pinned || ((leaf_first || follows_leaf_first()) && m.children_in_tier > 0);
  };
  for (int step = 0; step < 20'000; ++step) {
    const BlockId id = rng() % 64;
    const BlockMeta m = random_meta(rng() % 3 == 0);
    const int op = static_cast<int>(rng() % 5);
    if (op == 0 && state[id] < 0) {
      policy_->Insert(id, m);
    } else if (op == 1 && state[id] >= 0) {
      policy_->Touch(id, m);
    } else if (op == 2 && state[id] >= 0) {
      policy_->Update(id, m);
    } else if (op == 3 && state[id] >= 0) {
      policy_->Erase(id);
      state[id] = -1;
      continue;
    } else if (op == 4) {
      clock_.Advance(kNsPerMs);
      const auto v = policy_->Victim();
      const bool any = std::count(state.begin(), state.end(), 0) > 0;
      ASSERT_EQ(v.has_value(), any) << "step " << step;
      if (v) {
        ASSERT_EQ(state[*v], 0) << "victim " << *v << " untracked or kept";
        if (rng() % 2 == 0) {
          policy_->Erase(*v);
          state[*v] = -1;
        }
      }
      continue;
    } else {
      continue;
    }
    state[id] = kept(m) ? 1 : 0;
  }
}

// The contract of the policies the adaptive one follows (every policy but
// adaptive itself).
class CandidateContractTest : public PolicyContractTest {};

// An Update that changes nothing the policy reads (pinned, priority and,
// leaf first, whether it has children) changes none of its decisions: the
// adaptive policy tells its followed candidate only of the others. Two
// instances see the same events; one also gets such updates (children
// counts that stay on the same side of 0, or any count where leaves do not
// count), and they name the same victims.
TEST_P(CandidateContractTest, UpdatesThatChangeNothingReadChangeNothing) {
  const bool leaf_first = GetParam().starts_with("leaf-");
  auto twin = NewPolicy(GetParam(), clock_);
  ASSERT_TRUE(twin.ok());
  EvictionPolicy& told = *policy_;
  EvictionPolicy& plain = **twin;
  std::mt19937 rng(29);
  std::vector<std::optional<BlockMeta>> meta(32);
  for (int step = 0; step < 20'000; ++step) {
    const BlockId id = static_cast<BlockId>(rng() % meta.size());
    const int op = static_cast<int>(rng() % 6);
    if (op == 0 && !meta[id]) {
      BlockMeta m = Meta(rng() % 3 == 0);
      m.children_in_tier = static_cast<uint32_t>(rng() % 2);
      m.priority = rng() % 4 == 0 ? 60 : kDefaultPriority;
      meta[id] = m;
      told.Insert(id, m);
      plain.Insert(id, m);
    } else if (op == 1 && meta[id]) {
      told.Touch(id, *meta[id]);
      plain.Touch(id, *meta[id]);
    } else if (op == 2 && meta[id]) {
      meta[id]->pinned = rng() % 3 == 0;
      meta[id]->children_in_tier = static_cast<uint32_t>(rng() % 2);
      told.Update(id, *meta[id]);
      plain.Update(id, *meta[id]);
    } else if (op == 3 && meta[id]) {
      // Only `told` hears of it.
      BlockMeta m = *meta[id];
      const uint32_t children = m.children_in_tier;
      const auto some = static_cast<uint32_t>(rng() % 3);
      m.children_in_tier = leaf_first ? (children > 0 ? 1 + some : 0) : some;
      told.Update(id, m);
    } else if (op == 4) {
      const std::optional<BlockId> v = told.Victim();
      ASSERT_EQ(v, plain.Victim()) << "step " << step;
      if (v) {
        told.Erase(*v);
        plain.Erase(*v);
        meta[*v].reset();
      }
    } else if (op == 5 && meta[id]) {
      told.Erase(id);
      plain.Erase(id);
      meta[id].reset();
    }
  }
}

// gtest names allow only [A-Za-z0-9_]: "leaf-lru" runs as leaf_lru.
std::string TestName(const ::testing::TestParamInfo<std::string_view>& p) {
  std::string name(p.param);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::vector<std::string_view> CandidateNames() {
  std::vector<std::string_view> names;
  for (std::string_view n : PolicyNames()) {
    if (n != "adaptive") names.push_back(n);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContractTest, ::testing::ValuesIn(PolicyNames()),
                         TestName);
INSTANTIATE_TEST_SUITE_P(Candidates, CandidateContractTest, ::testing::ValuesIn(CandidateNames()),
                         TestName);

TEST(PolicyFactoryTest, UnknownNameIsAClearError) {
  ManualClock clock;
  auto p = NewPolicy("fifo-ish", clock);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("lru"), std::string_view::npos);
}

}  // namespace
}  // namespace kvtier::eviction

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "eviction/eviction_policy.h"
#include "policy_test_util.h"

namespace kvtier::eviction {
namespace {

using testing::Drain;
using testing::Meta;

BlockMeta WithFingerprint(uint64_t fp) {
  BlockMeta m = Meta();
  m.fingerprint = fp;
  return m;
}

// A cache of `capacity` blocks in front of the policy: a miss evicts the
// victim when full and inserts.
class Cache {
 public:
  Cache(EvictionPolicy& p, size_t capacity) : p_(p), capacity_(capacity) {}

  void Access(BlockId id) {
    if (cached_.contains(id)) {
      p_.Touch(id, Meta());
      return;
    }
    if (cached_.size() == capacity_) {
      const BlockId v = *p_.Victim();
      p_.Erase(v);
      cached_.erase(v);
    }
    p_.Insert(id, Meta());
    cached_.insert(id);
  }
  bool Cached(BlockId id) const { return cached_.contains(id); }

 private:
  EvictionPolicy& p_;
  size_t capacity_;
  std::set<BlockId> cached_;
};

TEST(S3FifoPolicyTest, OneHitWondersLeaveBeforeTouchedBlocks) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 10; ++id) p->Insert(id, Meta());
  p->Touch(2, Meta());  // touched in the order 2, 1, 0 ...
  p->Touch(1, Meta());
  p->Touch(0, Meta());
  // ... yet they reach main in FIFO order (lazy promotion: a touch moves
  // nothing), after every untouched block left small.
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{3, 4, 5, 6, 7, 8, 9, 0, 1, 2}));
}

TEST(S3FifoPolicyTest, HotBlocksSurviveAScan) {
  auto p = NewS3FifoPolicy();
  Cache cache(*p, 10);
  for (int round = 0; round < 2; ++round) {
    for (BlockId id = 0; id < 5; ++id) cache.Access(id);
  }
  for (BlockId id = 100; id < 1000; ++id) cache.Access(id);  // read once each
  for (BlockId id = 0; id < 5; ++id) EXPECT_TRUE(cache.Cached(id)) << id;
}

TEST(S3FifoPolicyTest, MainGivesOneMoreChancePerTouch) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 3; ++id) p->Insert(id, Meta());
  for (BlockId id = 0; id < 3; ++id) p->Touch(id, Meta());
  p->Insert(3, Meta());
  EXPECT_EQ(*p->Victim(), 3u);  // promotes 0, 1, 2 to main on the way
  p->Erase(3);
  p->Touch(0, Meta());
  p->Touch(0, Meta());
  p->Touch(1, Meta());
  // Main is a CLOCK: 0 passes twice, 1 once, 2 not at all.
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{2, 1, 0}));
}

TEST(S3FifoPolicyTest, GhostIsReadmittedToMain) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 10; ++id) p->Insert(id, Meta());
  EXPECT_EQ(*p->Victim(), 0u);
  p->Erase(0);            // evicted from small: a ghost
  p->Insert(0, Meta());   // back while a ghost: into main
  p->Insert(10, Meta());  // new: into small
  // Small (1..10) empties before main (0), although 0 came back before 10.
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0}));
}

TEST(S3FifoPolicyTest, AReusedIdWithAnotherFingerprintIsNoGhost) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 10; ++id) p->Insert(id, WithFingerprint(1000 + id));
  EXPECT_EQ(*p->Victim(), 0u);
  p->Erase(0);
  p->Insert(0, WithFingerprint(7));  // id 0 now names another block
  p->Insert(10, WithFingerprint(1010));
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 10}));
}

TEST(S3FifoPolicyTest, AnEraseThatIsNoEvictionLeavesNoGhost) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 10; ++id) p->Insert(id, Meta());
  p->Erase(0);  // deleted, never named by Victim()
  p->Insert(0, Meta());
  p->Insert(10, Meta());
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 10}));
}

TEST(S3FifoPolicyTest, VictimIsStableUntilErased) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 4; ++id) p->Insert(id, Meta());
  p->Touch(0, Meta());
  const auto first = p->Victim();
  EXPECT_EQ(first, p->Victim());
  EXPECT_EQ(*first, 1u);
}

TEST(S3FifoPolicyTest, UnpinnedBlockReturnsToItsQueue) {
  auto p = NewS3FifoPolicy();
  for (BlockId id = 0; id < 3; ++id) p->Insert(id, Meta());
  p->Update(0, Meta(true));
  EXPECT_EQ(*p->Victim(), 1u);
  p->Update(0, Meta(false));  // back at small's new end
  EXPECT_EQ(Drain(*p), (std::vector<BlockId>{1, 2, 0}));
}

}  // namespace
}  // namespace kvtier::eviction

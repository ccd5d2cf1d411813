#include "prefix_index/prefix_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace kvtier::prefix_index {
namespace {

BlockKey K(uint64_t i) { return BlockKey{i * 0x9e3779b97f4a7c15ULL, i}; }

// A chain of n keys, each the parent of the next, all visible.
std::vector<EntryId> InsertChain(PrefixIndex& index, NamespaceId ns, uint64_t first, size_t n) {
  std::vector<EntryId> ids;
  EntryId parent = kNoEntry;
  for (size_t i = 0; i < n; ++i) {
    parent = index.Insert(ns, K(first + i), parent);
    index.SetVisible(parent, true);
    ids.push_back(parent);
  }
  return ids;
}

std::vector<BlockKey> Keys(uint64_t first, size_t n) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(K(first + i));
  return keys;
}

TEST(PrefixIndexTest, InsertFindErase) {
  PrefixIndex index;
  EXPECT_EQ(index.Find(0, K(1)), kNoEntry);
  const EntryId a = index.Insert(0, K(1), kNoEntry);
  EXPECT_EQ(index.Find(0, K(1)), a);
  EXPECT_EQ(index.key(a), K(1));
  EXPECT_EQ(index.ns(a), 0u);
  EXPECT_EQ(index.size(), 1u);
  index.Erase(a);
  EXPECT_EQ(index.Find(0, K(1)), kNoEntry);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_FALSE(index.live(a));
}

TEST(PrefixIndexTest, NamespacesNeverCollide) {
  PrefixIndex index;
  const EntryId a = index.Insert(1, K(7), kNoEntry);
  EXPECT_EQ(index.Find(2, K(7)), kNoEntry);
  const EntryId b = index.Insert(2, K(7), kNoEntry);
  EXPECT_NE(a, b);
  EXPECT_EQ(index.Find(1, K(7)), a);
  EXPECT_EQ(index.Find(2, K(7)), b);
}

TEST(PrefixIndexTest, LeadingRunCountsOnlyVisibleLeadingKeys) {
  PrefixIndex index;
  const auto ids = InsertChain(index, 0, 100, 5);
  EXPECT_EQ(index.LeadingRun(0, Keys(100, 5)), 5u);
  EXPECT_EQ(index.LeadingRun(0, Keys(100, 8)), 5u);
  EXPECT_EQ(index.LeadingRun(1, Keys(100, 5)), 0u);  // another namespace
  index.SetVisible(ids[2], false);                   // e.g. not yet committed
  EXPECT_EQ(index.LeadingRun(0, Keys(100, 5)), 2u);
  index.SetVisible(ids[2], true);
  index.Erase(ids[0]);
  // Keys after a missing one never count, though they are present.
  EXPECT_EQ(index.LeadingRun(0, Keys(100, 5)), 0u);
  EXPECT_EQ(index.LeadingRun(0, Keys(101, 4)), 4u);
}

TEST(PrefixIndexTest, LeadingRunOfLongChainsStopsAtTheFirstGap) {
  // Long enough to run LeadingRun's prefetch pipeline in full.
  PrefixIndex index;
  const auto ids = InsertChain(index, 0, 1000, 300);
  for (size_t len : {size_t{1}, size_t{5}, size_t{8}, size_t{9}, size_t{64}, size_t{300}}) {
    EXPECT_EQ(index.LeadingRun(0, Keys(1000, len)), len);
  }
  EXPECT_EQ(index.LeadingRun(0, Keys(1000, 400)), 300u);
  for (size_t gap : {size_t{0}, size_t{3}, size_t{7}, size_t{8}, size_t{57}, size_t{299}}) {
    index.SetVisible(ids[gap], false);
    EXPECT_EQ(index.LeadingRun(0, Keys(1000, 300)), gap) << gap;
    index.SetVisible(ids[gap], true);
  }
}

// The run's entries, from a table small enough to walk without prefetching
// and from one large enough to prefetch, agree with Find key by key.
TEST(PrefixIndexTest, LeadingRunGivesTheEntriesFindWould) {
  for (size_t blocks : {size_t{300}, size_t{40000}}) {
    PrefixIndex index;
    InsertChain(index, 0, 1, blocks);
    const std::vector<EntryId> ids = InsertChain(index, 0, 1'000'000, 300);
    index.SetVisible(ids[77], false);
    const std::vector<BlockKey> keys = Keys(1'000'000, 300);
    std::vector<EntryId> found(keys.size(), kNoEntry);
    ASSERT_EQ(index.LeadingRun(0, keys, found), 77u) << blocks;
    for (size_t i = 0; i < 77; ++i) {
      EXPECT_EQ(found[i], index.Find(0, keys[i])) << blocks << " " << i;
      EXPECT_EQ(found[i], ids[i]);
    }
    EXPECT_EQ(found[77], kNoEntry);  // nothing written past the run
    EXPECT_EQ(index.LeadingRun(0, keys), 77u);
  }
}

// A small index's walk takes a chain's next key from its last key's newest
// child when it can. Across branches (the next key an older child, or no
// child of the last key at all), namespaces that share keys, orphans whose
// parent was erased and written again, and hidden entries, the run is the
// one Find gives key by key.
TEST(PrefixIndexTest, LeadingRunAcrossBranchesAndOrphansIsFindsRun) {
  PrefixIndex index;
  std::mt19937_64 rng(7);
  std::vector<std::vector<BlockKey>> chains;
  for (int c = 0; c < 60; ++c) {
    // Each chain shares a random prefix of an earlier one, then goes on.
    std::vector<BlockKey> keys;
    if (!chains.empty()) {
      const auto& base = chains[rng() % chains.size()];
      keys.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % base.size()));
    }
    while (keys.size() < 12) keys.push_back(K(1000 * static_cast<uint64_t>(c) + keys.size()));
    chains.push_back(keys);
  }
  for (NamespaceId ns : {NamespaceId{0}, NamespaceId{1}}) {
    for (size_t c = ns; c < chains.size(); c += 1 + ns) {  // ns 1 holds every other chain
      EntryId parent = kNoEntry;
      for (const BlockKey& key : chains[c]) {
        EntryId id = index.Find(ns, key);
        if (id == kNoEntry) {
          id = index.Insert(ns, key, parent);
          index.SetVisible(id, true);
        }
        parent = id;
      }
    }
  }
  // Orphans: an interior block erased, and one of them written again
  // without its children.
  for (size_t c : {size_t{3}, size_t{17}, size_t{40}}) {
    if (const EntryId id = index.Find(0, chains[c][4]); id != kNoEntry) index.Erase(id);
  }
  ASSERT_EQ(index.Find(0, chains[17][4]), kNoEntry);
  index.SetVisible(index.Insert(0, chains[17][4], index.Find(0, chains[17][3])), true);
  index.SetVisible(index.Find(1, chains[9][6]), false);
  for (NamespaceId ns : {NamespaceId{0}, NamespaceId{1}}) {
    for (const auto& keys : chains) {
      size_t want = 0;
      std::vector<EntryId> want_ids;
      for (const BlockKey& key : keys) {
        const EntryId id = index.Find(ns, key);
        if (id == kNoEntry || !index.visible(id)) break;
        want_ids.push_back(id);
        ++want;
      }
      std::vector<EntryId> found(keys.size(), kNoEntry);
      ASSERT_EQ(index.LeadingRun(ns, keys, found), want);
      for (size_t i = 0; i < want; ++i) EXPECT_EQ(found[i], want_ids[i]) << ns << " " << i;
    }
  }
}

TEST(PrefixIndexTest, ParentChildLinksAndOrphans) {
  PrefixIndex index;
  const EntryId root = index.Insert(0, K(1), kNoEntry);
  const EntryId c1 = index.Insert(0, K(2), root);
  const EntryId c2 = index.Insert(0, K(3), root);
  const EntryId g = index.Insert(0, K(4), c1);
  EXPECT_EQ(index.parent(c1), root);
  EXPECT_TRUE(index.has_children(root));
  std::vector<EntryId> children;
  for (EntryId c = index.first_child(root); c != kNoEntry; c = index.next_sibling(c)) {
    children.push_back(c);
  }
  EXPECT_EQ(children.size(), 2u);
  EXPECT_NE(std::find(children.begin(), children.end(), c1), children.end());
  EXPECT_NE(std::find(children.begin(), children.end(), c2), children.end());

  index.Erase(c2);  // unlinks from the parent
  EXPECT_EQ(index.first_child(root), c1);
  EXPECT_EQ(index.next_sibling(c1), kNoEntry);

  index.Erase(root);  // c1 becomes an orphan; g stays its child
  EXPECT_TRUE(index.orphan(c1));
  EXPECT_EQ(index.parent(c1), kNoEntry);
  EXPECT_FALSE(index.orphan(g));
  EXPECT_EQ(index.parent(g), c1);
}

TEST(PrefixIndexTest, ErasedIdsAreReused) {
  PrefixIndex index;
  const EntryId a = index.Insert(0, K(1), kNoEntry);
  index.Insert(0, K(2), kNoEntry);
  index.Erase(a);
  const EntryId c = index.Insert(0, K(3), kNoEntry);
  EXPECT_EQ(c, a);
  EXPECT_FALSE(index.orphan(c));
  EXPECT_FALSE(index.visible(c));
  EXPECT_EQ(index.id_limit(), 2u);
}

// Random inserts and erases (which exercise growth and backward-shift
// deletion) against std::map, including keys built to share table homes.
TEST(PrefixIndexTest, RandomOperationsMatchAModel) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    PrefixIndex index;
    std::map<std::pair<NamespaceId, BlockKey>, EntryId> model;
    for (int step = 0; step < 200'000; ++step) {
      const NamespaceId ns = static_cast<NamespaceId>(rng() % 3);
      // A small key space so inserts and erases hit existing keys often.
      const uint64_t i = rng() % 5000;
      const BlockKey key = (seed == 3) ? BlockKey{0, i} : K(i);
      auto it = model.find({ns, key});
      if (it == model.end()) {
        model[{ns, key}] = index.Insert(ns, key, kNoEntry);
      } else if (rng() % 2 == 0) {
        index.Erase(it->second);
        model.erase(it);
      }
      if (step % 20'000 == 0) {
        for (const auto& [k, id] : model) ASSERT_EQ(index.Find(k.first, k.second), id);
      }
    }
    ASSERT_EQ(index.size(), model.size());
    for (const auto& [k, id] : model) ASSERT_EQ(index.Find(k.first, k.second), id);
    for (uint64_t i = 5000; i < 6000; ++i) ASSERT_EQ(index.Find(0, K(i)), kNoEntry);
  }
}

// Entries inserted deferred (a warm restart's way), with the table growing
// while they wait and entries inserted before them, are found, linked and
// erased as entries inserted one by one are; keys built to share table
// homes (seed 2) make long probe runs.
TEST(PrefixIndexTest, DeferredInsertsArePlacedAsInsertsWouldBe) {
  for (uint32_t seed : {1u, 2u}) {
    std::mt19937_64 rng(seed);
    PrefixIndex index;  // the smallest table: deferring 40,000 grows it
    auto key = [&](uint64_t i) { return seed == 2 ? BlockKey{0, i} : K(i); };
    std::map<std::pair<NamespaceId, BlockKey>, EntryId> model;
    for (uint64_t i = 0; i < 100; ++i) {  // before: in the table already
      const EntryId id = index.Insert(0, key(i), kNoEntry);
      index.SetVisible(id, true);
      model[{0, key(i)}] = id;
    }
    std::vector<std::pair<EntryId, EntryId>> links;  // (child, parent)
    for (uint64_t i = 100; i < 40'100; ++i) {
      const NamespaceId ns = static_cast<NamespaceId>(rng() % 2);
      // The parent: a random earlier entry of the same namespace, if any.
      EntryId parent = kNoEntry;
      if (i % 4 != 0) {
        auto it = model.lower_bound({ns, BlockKey{rng(), rng()}});
        if (it != model.end() && it->first.first == ns) parent = it->second;
      }
      const EntryId id = index.InsertDeferred(ns, key(i), parent);
      index.SetVisible(id, true);
      model[{ns, key(i)}] = id;
      links.emplace_back(id, parent);
    }
    index.PlaceDeferred();
    ASSERT_EQ(index.size(), model.size());
    for (const auto& [k, id] : model) ASSERT_EQ(index.Find(k.first, k.second), id);
    for (uint64_t i = 50'000; i < 51'000; ++i) ASSERT_EQ(index.Find(0, key(i)), kNoEntry);
    for (const auto& [child, parent] : links) {
      ASSERT_EQ(index.parent(child), parent);
      if (parent == kNoEntry) continue;
      const std::vector<BlockKey> chain = {index.key(parent), index.key(child)};
      EntryId ids[2];
      ASSERT_EQ(index.LeadingRun(index.ns(child), chain, ids), 2u);
      EXPECT_EQ(ids[1], child);
    }
    // Erasing every other entry (backward shifts through the placed runs)
    // leaves the rest findable, and inserting after works as before.
    size_t n = 0;
    for (auto it = model.begin(); it != model.end();) {
      if (n++ % 2 == 0) {
        index.Erase(it->second);
        it = model.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [k, id] : model) ASSERT_EQ(index.Find(k.first, k.second), id);
    const EntryId late = index.Insert(1, key(60'000), kNoEntry);
    EXPECT_EQ(index.Find(1, key(60'000)), late);
  }
}

TEST(PrefixIndexTest, MemoryPerEntryIsSmall) {
  PrefixIndex index(1'000'000);
  InsertChain(index, 0, 0, 1'000'000);
  const double per_entry = static_cast<double>(index.MemoryBytes()) / 1e6;
  RecordProperty("bytes_per_entry", std::to_string(per_entry));
  EXPECT_LE(per_entry, 128.0);
}

}  // namespace
}  // namespace kvtier::prefix_index

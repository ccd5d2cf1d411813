// ChainFingerprints: a chain's fingerprints, remembered for recent chains.
// Whatever it remembers, it must answer as hashing every key would.
#include "engine/internal/chain_fingerprints.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvtier::engine::internal {
namespace {

using prefix_index::BlockKey;
using prefix_index::NamespaceId;

uint64_t Hash(NamespaceId ns, const BlockKey& key) {
  return (key.hi * 0x9e3779b97f4a7c15ULL) ^ key.lo ^ (uint64_t{ns} << 56);
}

// Sessions in two namespaces whose chains grow, repeat, shrink to a prefix,
// diverge and start over, with other traffic between them, and chains too
// short or too long to remember.
TEST(ChainFingerprintsTest, AnswersAsHashingEveryKey) {
  ChainFingerprints chains;
  std::mt19937_64 rng(3);
  constexpr size_t kSessions = 12;  // more than it remembers
  std::vector<std::vector<BlockKey>> session(kSessions);
  size_t hashed = 0;
  for (int step = 0; step < 3000; ++step) {
    const size_t s = rng() % kSessions;
    std::vector<BlockKey>& chain = session[s];
    switch (rng() % 8) {
      case 0:  // a new session, sharing its first key with the others
        chain.assign(1, BlockKey{1, 1});
        [[fallthrough]];
      default:  // the next turn: a few blocks more
        for (size_t n = 1 + rng() % 200; n > 0; --n) chain.push_back(BlockKey{rng(), rng()});
        break;
      case 1:  // an edit: the chain diverges
        if (chain.size() > 2) chain.resize(1 + rng() % (chain.size() - 1));
        chain.push_back(BlockKey{rng(), rng()});
        break;
      case 2:  // a retry of an earlier, shorter request
        if (!chain.empty()) chain.resize(1 + rng() % chain.size());
        break;
    }
    if (chain.size() > ChainFingerprints::kMaxRemembered + 100) chain.resize(10);
    const auto ns = static_cast<NamespaceId>(s % 2);  // the same keys, other namespaces
    const std::span<const uint64_t> got = chains.Of(ns, chain, &Hash);
    ASSERT_EQ(got.size(), chain.size());
    for (size_t i = 0; i < chain.size(); ++i) {
      ASSERT_EQ(got[i], Hash(ns, chain[i])) << "step " << step << " key " << i;
    }
    hashed += chain.size();
  }
  EXPECT_GT(hashed, 500'000u);
}

}  // namespace
}  // namespace kvtier::engine::internal

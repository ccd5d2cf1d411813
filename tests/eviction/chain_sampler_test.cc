// ChainSampler: the sampled keys of a chain, remembered for recent chains.
// Whatever it remembers, it must answer as testing every key would.
#include "eviction/internal/chain_sampler.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/hash.h"

namespace kvtier::eviction::internal {
namespace {

std::vector<uint64_t> EveryKey(const std::vector<uint64_t>& chain, uint64_t stride) {
  std::vector<uint64_t> out;
  for (uint64_t k : chain) {
    if (Mix64(k) % stride == 0) out.push_back(k);
  }
  return out;
}

// Sessions whose chains grow, repeat, shrink to a prefix, diverge and
// start over, with other traffic between them, a stride that changes now
// and then, and chains too short or too long to remember.
TEST(ChainSamplerTest, AnswersAsTestingEveryKey) {
  ChainSampler sampler;
  std::mt19937_64 rng(11);
  constexpr size_t kSessions = 12;  // more than it remembers
  std::vector<std::vector<uint64_t>> session(kSessions);
  uint64_t stride = 4;
  std::vector<uint64_t> out;
  size_t tested = 0;
  for (int step = 0; step < 3000; ++step) {
    std::vector<uint64_t>& chain = session[rng() % kSessions];
    switch (rng() % 8) {
      case 0:  // a new session, sharing its first key with the others
        chain.assign(1, 1);
        [[fallthrough]];
      default:  // the next turn: a few blocks more
        for (size_t n = 1 + rng() % 200; n > 0; --n) chain.push_back(rng());
        break;
      case 1:  // an edit: the chain diverges
        if (chain.size() > 2) chain.resize(1 + rng() % (chain.size() - 1));
        chain.push_back(rng());
        break;
      case 2:  // a retry of an earlier, shorter request
        if (!chain.empty()) chain.resize(1 + rng() % chain.size());
        break;
      case 3:
        if (rng() % 20 == 0) stride *= 2;
        break;
    }
    if (chain.size() > ChainSampler::kMaxRemembered + 100) chain.resize(10);
    sampler.Sample(
        chain, stride, [&](uint64_t k) { return Mix64(k) % stride == 0; }, &out);
    ASSERT_EQ(out, EveryKey(chain, stride)) << "step " << step;
    tested += chain.size();
  }
  EXPECT_GT(tested, 500'000u);
}

TEST(ChainSamplerTest, LongAndShortChains) {
  ChainSampler sampler;
  std::vector<uint64_t> out;
  const auto every = [](uint64_t k) { return Mix64(k) % 3 == 0; };
  std::vector<uint64_t> chain;
  for (uint64_t k = 1; k <= ChainSampler::kMaxRemembered + 10; ++k) chain.push_back(k);
  for (int i = 0; i < 2; ++i) {
    sampler.Sample(chain, 1, every, &out);
    EXPECT_EQ(out, EveryKey(chain, 3));
  }
  chain.resize(ChainSampler::kMinRemembered - 1);
  sampler.Sample(chain, 1, every, &out);
  EXPECT_EQ(out, EveryKey(chain, 3));
  chain.clear();
  sampler.Sample(chain, 1, every, &out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace kvtier::eviction::internal

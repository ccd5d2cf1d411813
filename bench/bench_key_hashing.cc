// Key hashing: the cost of KeyHasher::Chain per block and per 128k-token
// prompt, against the raw XXH3-128 of the same bytes measured in the same run.
//
// The peer hashes the same number of blocks of the same size (16 bytes of
// parent key + 4 bytes per token) with XXH3_128bits_withSecret, each block
// independent of the last. The chain cannot do that: block i's input holds
// key[i-1], so its hashes run back to back, and each input is first copied
// into one contiguous buffer. The ratio is what chaining and that copy cost.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "prefix_index/key_hasher.h"

#define XXH_INLINE_ALL  // as prefix_index/key_hasher.cc, so both inline XXH3
#include <xxhash.h>

namespace kvtier::bench {
namespace {

using prefix_index::BlockKey;
using prefix_index::KeyHasher;
using prefix_index::TokenId;

constexpr size_t kPromptTokens = 128 * 1024;
constexpr int64_t kBlockTokens[] = {16, 512};

// Bytes one block's hash reads: parent key + token ids.
uint64_t BlockInputBytes(size_t block_tokens) { return 16 + sizeof(TokenId) * block_tokens; }

std::vector<TokenId> Prompt() {
  Rng rng(1);
  std::vector<TokenId> tokens(kPromptTokens);
  for (TokenId& t : tokens) t = static_cast<TokenId>(rng.Next() % 128'256);  // Llama-3 vocab
  return tokens;
}

std::vector<std::byte> Secret() {
  Rng rng(2);
  std::vector<std::byte> secret(32);
  for (std::byte& b : secret) b = static_cast<std::byte>(rng.Next());
  return secret;
}

// Wall time of the timed loop, for the ns_per_block counter (an inverted
// rate counter would print its value with an "s" suffix).
class LoopTimer {
 public:
  LoopTimer() : start_(std::chrono::steady_clock::now()) {}
  double ns() const {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

void SetBlockCounters(benchmark::State& state, const LoopTimer& timer, size_t blocks,
                      size_t block_tokens) {
  const int64_t done = static_cast<int64_t>(blocks) * state.iterations();
  state.SetItemsProcessed(done);
  state.SetBytesProcessed(done * static_cast<int64_t>(BlockInputBytes(block_tokens)));
  state.counters["ns_per_block"] = timer.ns() / static_cast<double>(done);
}

// One iteration keys one 128k-token prompt, as a client would: Chain()
// allocates the returned vector.
void BM_KeyHasherChain(benchmark::State& state) {
  const auto block_tokens = static_cast<uint32_t>(state.range(0));
  const std::vector<TokenId> tokens = Prompt();
  const std::vector<std::byte> secret = Secret();
  auto hasher = KeyHasher::Create(secret, block_tokens);
  if (!hasher.ok()) {
    state.SkipWithError(hasher.status().ToString().c_str());
    return;
  }
  const size_t blocks = tokens.size() / block_tokens;
  LoopTimer timer;
  for (auto _ : state) {
    std::vector<BlockKey> keys = hasher->Chain(tokens);
    benchmark::DoNotOptimize(keys.data());
    benchmark::ClobberMemory();
  }
  SetBlockCounters(state, timer, blocks, block_tokens);
}

// The peer: the same bytes, hashed block by block without the chain
// (chained:0). chained:1 is a diagnostic, not the peer: it writes each hash
// into the next block's input in place, so the hashes serialize like the
// chain's but nothing is copied; chain vs chained:1 isolates the copy.
void BM_RawXxh3(benchmark::State& state) {
  const auto block_tokens = static_cast<size_t>(state.range(0));
  const size_t blocks = kPromptTokens / block_tokens;
  const size_t block_bytes = BlockInputBytes(block_tokens);
  Rng rng(3);
  std::vector<std::byte> input(blocks * block_bytes);
  for (std::byte& b : input) b = static_cast<std::byte>(rng.Next());
  alignas(64) std::byte secret[KeyHasher::kXxhSecretBytes];
  for (std::byte& b : secret) b = static_cast<std::byte>(rng.Next());
  std::vector<XXH128_hash_t> out(blocks);
  const bool chained = state.range(1) != 0;
  LoopTimer timer;
  for (auto _ : state) {
    XXH128_hash_t h{};
    for (size_t i = 0; i < blocks; ++i) {
      std::byte* block = input.data() + i * block_bytes;
      if (chained) {
        std::memcpy(block, &h.low64, 8);
        std::memcpy(block + 8, &h.high64, 8);
      }
      h = XXH3_128bits_withSecret(block, block_bytes, secret, sizeof(secret));
      out[i] = h;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  SetBlockCounters(state, timer, blocks, block_tokens);
}

BENCHMARK(BM_KeyHasherChain)
    ->ArgName("block_tokens")
    ->Arg(16)
    ->Arg(512)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_RawXxh3)
    ->ArgNames({"block_tokens", "chained"})
    ->ArgsProduct({{16, 512}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void Summarize(const SummaryReporter& r) {
  std::printf("key hashing summary (128k-token prompt; goal: well under 100 us per prompt)\n");
  for (int64_t bt : kBlockTokens) {
    const std::string arg = "/block_tokens:" + std::to_string(bt) + "/real_time";
    const std::string chain = "BM_KeyHasherChain" + arg;
    const std::string raw =
        "BM_RawXxh3/block_tokens:" + std::to_string(bt) + "/chained:0/real_time";
    const std::string serial =
        "BM_RawXxh3/block_tokens:" + std::to_string(bt) + "/chained:1/real_time";
    const double chain_s = r.Seconds(chain);
    const double raw_s = r.Seconds(raw);
    if (chain_s == 0) continue;
    // Same bytes per iteration, so throughput ratio = inverse time ratio.
    std::printf(
        "  %3lld tokens/block: chain %6.1f ns/block, raw XXH3 %6.1f ns/block, "
        "chain throughput = %.2fx raw XXH3 (raw chained in place %6.1f ns/block); "
        "prompt %7.1f us\n",
        static_cast<long long>(bt), r.Counter(chain, "ns_per_block"),
        r.Counter(raw, "ns_per_block"), Ratio(raw_s, chain_s), r.Counter(serial, "ns_per_block"),
        chain_s * 1e6);
  }
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  return kvtier::bench::RunAndSummarize(argc, argv, kvtier::bench::Summarize);
}

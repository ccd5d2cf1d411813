// Prefix lookup: LeadingRun of a 1,000-key chain in a PrefixIndex holding
// 1M and 10M blocks, and the index's bytes per block.
//
// The peer is the same lookup in the smaller index, measured in the same
// run: a hash index should not slow down with its size, apart from the cache
// misses a bigger table brings (both indexes are larger than the L3 cache).
// Each index is built once, as chains of 1,000 random 128-bit keys, all
// visible, and shared by the benchmarks (10M blocks take ~600 MB).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "prefix_index/prefix_index.h"

namespace kvtier::bench {
namespace {

using prefix_index::BlockKey;
using prefix_index::EntryId;
using prefix_index::kNoEntry;
using prefix_index::NamespaceId;
using prefix_index::PrefixIndex;

constexpr NamespaceId kNs = 1;
constexpr size_t kChainKeys = 1000;
// Chains each benchmark cycles through: 16 MB of query keys and ~100 MB of
// the index touched per pass, so lookups miss the cache as a busy daemon's do.
constexpr size_t kQueryChains = 1000;

struct IndexFixture {
  std::unique_ptr<PrefixIndex> index;
  std::vector<std::vector<BlockKey>> hits;    // chains fully present
  std::vector<std::vector<BlockKey>> misses;  // chains whose first key is absent
};

BlockKey RandomKey(Rng& rng) {
  const uint64_t hi = rng.Next();
  return BlockKey{hi, rng.Next()};
}

const IndexFixture& Index(size_t blocks) {
  static std::map<size_t, std::unique_ptr<IndexFixture>> built;
  std::unique_ptr<IndexFixture>& f = built[blocks];
  if (f != nullptr) return *f;
  f = std::make_unique<IndexFixture>();
  f->index = std::make_unique<PrefixIndex>(blocks);
  Rng rng(blocks);
  const size_t chains = blocks / kChainKeys;
  const size_t query_every = chains > kQueryChains ? chains / kQueryChains : 1;
  for (size_t c = 0; c < chains; ++c) {
    const bool query = c % query_every == 0 && f->hits.size() < kQueryChains;
    if (query) f->hits.emplace_back().reserve(kChainKeys);
    EntryId parent = kNoEntry;
    for (size_t i = 0; i < kChainKeys; ++i) {
      const BlockKey key = RandomKey(rng);
      parent = f->index->Insert(kNs, key, parent);
      f->index->SetVisible(parent, true);
      if (query) f->hits.back().push_back(key);
    }
  }
  f->misses.resize(f->hits.size());
  for (std::vector<BlockKey>& chain : f->misses) {
    for (size_t i = 0; i < kChainKeys; ++i) chain.push_back(RandomKey(rng));
  }
  return *f;
}

void Lookup(benchmark::State& state, bool hit, bool hot = false) {
  const IndexFixture& f = Index(static_cast<size_t>(state.range(0)));
  std::vector<std::vector<BlockKey>> hot_queries;
  if (hot) hot_queries.push_back(f.hits.front());
  const std::vector<std::vector<BlockKey>>& queries = hot ? hot_queries : hit ? f.hits : f.misses;
  const size_t want = hit ? kChainKeys : 0;
  size_t q = 0;
  for (auto _ : state) {
    const size_t run = f.index->LeadingRun(kNs, queries[q]);
    if (run != want) {
      state.SkipWithError("unexpected leading run");
      break;
    }
    benchmark::DoNotOptimize(run);
    q = q + 1 == queries.size() ? 0 : q + 1;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(hit ? kChainKeys : 1));
  state.counters["index_blocks"] = static_cast<double>(f.index->size());
  state.counters["bytes_per_block"] =
      static_cast<double>(f.index->MemoryBytes()) / static_cast<double>(f.index->size());
}

// A 1,000-key chain, every key present: 1,000 probes.
void BM_LeadingRunHit(benchmark::State& state) { Lookup(state, true); }
// The same chain every time, its entries in cache: the hash table's own cost,
// without the memory system's.
void BM_LeadingRunHitHot(benchmark::State& state) { Lookup(state, true, true); }
// A 1,000-key chain whose first key is absent: one probe, then stop.
void BM_LeadingRunMiss(benchmark::State& state) { Lookup(state, false); }

constexpr int64_t kSmall = 1'000'000;
constexpr int64_t kLarge = 10'000'000;

BENCHMARK(BM_LeadingRunHit)
    ->ArgName("blocks")
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_LeadingRunHitHot)
    ->ArgName("blocks")
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_LeadingRunMiss)
    ->ArgName("blocks")
    ->Arg(kSmall)
    ->Arg(kLarge)
    ->Unit(benchmark::kNanosecond)
    ->UseRealTime();

void Summarize(const SummaryReporter& r) {
  std::printf("prefix index summary (1,000-key chain; goal: flat with size, <= 128 B/block)\n");
  for (const char* name : {"BM_LeadingRunHit", "BM_LeadingRunHitHot", "BM_LeadingRunMiss"}) {
    const std::string small =
        std::string(name) + "/blocks:" + std::to_string(kSmall) + "/real_time";
    const std::string large =
        std::string(name) + "/blocks:" + std::to_string(kLarge) + "/real_time";
    const double small_s = r.Seconds(small);
    const double large_s = r.Seconds(large);
    std::printf("  %-19s 1M: %9.3f us  10M: %9.3f us  ratio 10M/1M = %.2f\n", name, small_s * 1e6,
                large_s * 1e6, Ratio(large_s, small_s));
  }
  for (int64_t blocks : {kSmall, kLarge}) {
    const std::string name = "BM_LeadingRunHit/blocks:" + std::to_string(blocks) + "/real_time";
    if (r.Find(name) == nullptr) continue;
    std::printf("  index of %8lld blocks: %.1f bytes/block\n", static_cast<long long>(blocks),
                r.Counter(name, "bytes_per_block"));
  }
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  return kvtier::bench::RunAndSummarize(argc, argv, kvtier::bench::Summarize);
}

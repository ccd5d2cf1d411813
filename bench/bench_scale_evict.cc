// Eviction's cost per block as the cache grows (bench/scale.sh), measured in
// the engine kvtierd runs, on its own thread, by that thread's CPU time.
//
//   bench_scale_evict [--blocks N[,N...]] [--runs R] [--policy P]
//
// For each N: a CacheEngine whose host tier (not reserved, nothing below it)
// holds exactly N blocks of 4 KiB, policy P (default adaptive, kvtierd's),
// filled with chains of 1,024 blocks; then E = min(N/10, 20,000) blocks
// written in 64-block chains (ALLOCATE + COMMIT, no bytes written) make it
// full. Then R runs of:
//   - room: the E blocks the run before wrote removed (REMOVE, untimed), and
//     E new ones written into the room (timed): a write that evicts nothing;
//   - evict: E more written (timed), each into the full tier, so every
//     block written drops one (the policy's victim, or blocks orphaned with
//     it).
// CPU time (CLOCK_THREAD_CPUTIME_ID), not wall-clock: a shared machine's
// preemption is not the engine's cost. Eviction per dropped block =
// (evict run's time - room run's time) / blocks dropped. The room runs
// reuse the index entries the removal freed, so neither pays for growth.
//
// Prints one line of name=value pairs per N (times in nanoseconds).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_flags.h"
#include "common/hash.h"
#include "engine/cache_engine.h"

namespace kvtier::bench {
namespace {

using engine::BlockKey;
using engine::CacheEngine;
using engine::NamespaceId;
using tiers::TierKind;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_scale_evict: %s\n", what.c_str());
  std::exit(1);
}

double ThreadCpuNs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

std::vector<BlockKey> Chain(uint64_t chain, uint64_t length) {
  std::vector<BlockKey> keys(length);
  for (uint64_t i = 0; i < length; ++i) {
    const uint64_t id = (chain << 24) | i;
    keys[i] = {Mix64(2 * id + 1), Mix64(2 * id + 2)};
  }
  return keys;
}

struct Fixture {
  std::unique_ptr<CacheEngine> engine;
  NamespaceId ns = 0;
  uint64_t next_chain = 0;

  // Writes `blocks` blocks as new chains of `length`; their first chain.
  uint64_t Write(uint64_t blocks, uint64_t length) {
    const uint64_t first = next_chain;
    for (uint64_t done = 0; done < blocks; done += length) {
      const std::vector<BlockKey> keys = Chain(next_chain++, std::min(length, blocks - done));
      auto a = engine->Allocate(ns, std::nullopt, keys, TierKind::kHost);
      if (!a) Die("Allocate: " + a.status().ToString());
      if (a->allocated() != keys.size()) Die("a chain was not allocated whole");
      if (Status s = a->Commit(); !s.ok()) Die("Commit: " + s.ToString());
    }
    return first;
  }
  void Remove(uint64_t first, uint64_t blocks, uint64_t length) {
    for (uint64_t c = first, done = 0; done < blocks; ++c, done += length) {
      const std::vector<BlockKey> keys = Chain(c, std::min(length, blocks - done));
      if (auto r = engine->Remove(ns, keys); !r) Die("Remove: " + r.status().ToString());
    }
  }
  double Dropped() const { return static_cast<double>(engine->Stats().dropped_blocks); }
};

struct Spread {
  double median = 0, worst = 0;
};
Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? Spread{} : Spread{v[v.size() / 2], v.back()};
}

void Point(uint64_t n, int runs, const std::string& policy) {
  constexpr uint64_t kFillChain = 1024, kChain = 64;
  const uint64_t e = std::max<uint64_t>(kChain, std::min<uint64_t>(n / 10, 20000));
  if (n < 2 * e) Die("--blocks too small");
  const Layout layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
  auto host = tiers::NewHostTier({n * layout.BlockBytes(), 64 * kMiB, /*reserve_memory=*/false});
  if (!host) Die(host.status().ToString());
  engine::EngineOptions options;
  options.host_policy = policy;
  auto created = CacheEngine::Create(options, nullptr, std::move(host).value());
  if (!created) Die(created.status().ToString());
  Fixture f;
  f.engine = std::move(created).value();
  auto ns = f.engine->AddNamespace({"bench-scale-evict", "", layout});
  if (!ns) Die(ns.status().ToString());
  f.ns = *ns;
  f.Write(n - e, kFillChain);
  uint64_t last = f.Write(e, kChain);
  if (f.engine->Stats().tiers[1].blocks != n) Die("the tier is not full");

  std::vector<double> room_ns, evict_ns, write_evict_ns, dropped_per_write;
  for (int r = 0; r < runs; ++r) {
    f.Remove(last, e, kChain);
    const double dropped0 = f.Dropped();
    const double t0 = ThreadCpuNs();
    f.Write(e, kChain);
    const double t1 = ThreadCpuNs();
    const double dropped1 = f.Dropped();
    if (dropped1 != dropped0) Die("blocks dropped while there was room");
    const double t1b = ThreadCpuNs();
    last = f.Write(e, kChain);
    const double t2 = ThreadCpuNs();
    const double dropped = f.Dropped() - dropped1;
    if (dropped <= 0) Die("a full tier dropped nothing");
    const auto blocks = static_cast<double>(e);
    room_ns.push_back((t1 - t0) / blocks);
    write_evict_ns.push_back((t2 - t1b) / blocks);
    evict_ns.push_back((t2 - t1b - (t1 - t0)) / dropped);
    dropped_per_write.push_back(dropped / blocks);
    std::fprintf(stderr, "  %lu blocks, run %d: write %.0f ns, write+evict %.0f ns per block\n",
                 static_cast<unsigned long>(n), r + 1, room_ns.back(), write_evict_ns.back());
  }
  const Spread room = SpreadOf(room_ns), ev = SpreadOf(evict_ns), we = SpreadOf(write_evict_ns);
  std::printf(
      "blocks=%lu policy=%s write_ns=%.1f write_ns_worst=%.1f write_evict_ns=%.1f "
      "write_evict_ns_worst=%.1f evict_ns=%.1f evict_ns_worst=%.1f dropped_per_write=%.2f\n",
      static_cast<unsigned long>(n), policy.c_str(), room.median, room.worst, we.median, we.worst,
      ev.median, ev.worst, SpreadOf(dropped_per_write).median);
  std::fflush(stdout);
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  std::vector<uint64_t> blocks = {10'000, 100'000, 1'000'000};
  int runs = 5;
  std::string policy = "adaptive";
  kvtier::bench::Flags flags;
  flags.options["--blocks"] = [&](const std::string& v) {
    blocks.clear();
    for (size_t at = 0; at < v.size();) {
      const size_t comma = std::min(v.find(',', at), v.size());
      blocks.push_back(std::stoull(v.substr(at, comma - at)));
      at = comma + 1;
    }
  };
  flags.options["--runs"] = [&](const std::string& v) { runs = std::stoi(v); };
  flags.options["--policy"] = [&](const std::string& v) { policy = v; };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags, "bench_scale_evict [--blocks N[,N...]] [--runs R] [--policy P]");
  if (done >= 0) return done;
  if (blocks.empty() || runs < 1) kvtier::bench::Die("bad arguments");
  for (uint64_t n : blocks) kvtier::bench::Point(n, runs, policy);
  return 0;
}

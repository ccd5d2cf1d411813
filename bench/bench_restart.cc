// Warm-restart time with N blocks in the SSD tier's index (default 1M):
// opening the data directory and re-indexing every block in the engine.
//
//   bench_restart [--blocks N[,N...]] [--runs R] [--dir DIR]
//
// For each N the directory is built once, then restarted R times (default
// 3): each run opens the ssd tier, makes an engine over it and Recover()s,
// timed to the engine ready to serve; the median and the worst are printed.
// The records are written straight into the index (with slots allocated
// but no payload written, over a sparse slot file), so building 1M blocks
// does not need 4 GiB of writes; a restart reads records and reserves
// slots, never payloads. The index was just written, so RocksDB reads it
// from the page cache: a restart after a reboot also reads its files from
// the disk (about 60 bytes per block).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/hash.h"
#include "engine/cache_engine.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const Status& s) {
  std::fprintf(stderr, "bench_restart: %s\n", s.ToString().c_str());
  std::exit(1);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

const Layout kLayout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
constexpr uint64_t kChain = 100;

// The slot file is cut into regions of at most 64 MiB and its capacity
// rounded down to them: leave that much over the blocks' bytes.
uint64_t Capacity(uint64_t blocks) { return blocks * kLayout.BlockBytes() + 64 * kMiB; }

// Block i's key. Real keys are hashes, so the index (ordered by key) holds
// a chain's blocks far apart, and a restart reads them in no order of
// chains; keys numbered along the chains would read each block next to its
// parent, which no restart meets.
prefix_index::BlockKey KeyOf(uint64_t i) { return {Mix64(2 * i + 1), Mix64(2 * i + 2)}; }

// Writes `blocks` records (chains of kChain) into a new directory; seconds.
double Build(uint64_t blocks, const std::string& dir) {
  std::filesystem::remove_all(dir);
  const auto start = Clock::now();
  tiers::internal::SsdOptions o;
  o.dir = dir;
  o.capacity_bytes = Capacity(blocks);
  o.preallocate = tiers::internal::SsdPreallocate::kSparse;
  auto store = tiers::internal::SsdStore::Open(o);
  if (!store) Die(store.status());
  auto ns = (*store)->RegisterNamespace("bench", "", kLayout);
  if (!ns) Die(ns.status());
  // One writer: two, sharing the allocator under a lock, were slower.
  for (uint64_t i = 0; i < blocks; ++i) {
    auto slot = (*store)->Allocate(kLayout.BlockBytes());
    if (!slot) Die(slot.status());
    tiers::internal::SsdRecord r;
    r.ns_id = *ns;
    r.key = KeyOf(i);
    r.has_parent = i % kChain != 0;
    if (r.has_parent) r.parent = KeyOf(i - 1);
    r.slot = *slot;
    r.block_bytes = kLayout.BlockBytes();
    r.priority = 35;
    if (Status s = (*store)->PutRecord(r); !s.ok()) Die(s);
  }
  if (Status s = (*store)->Sync(); !s.ok()) Die(s);
  return Seconds(start);
}

struct Restart {
  double total_s = 0;
  double open_s = 0;
  size_t restored = 0;
  double index_bytes = 0;
};

Restart RestartOnce(uint64_t blocks, const std::string& dir) {
  const auto start = Clock::now();
  tiers::SsdTierOptions ssd_options;
  ssd_options.dir = dir;
  ssd_options.capacity_bytes = Capacity(blocks);
  ssd_options.prepare = "sparse";
  auto ssd = tiers::NewSsdTier(ssd_options);
  if (!ssd) Die(ssd.status());
  Restart out;
  out.open_s = Seconds(start);
  auto host = tiers::NewHostTier({64 * kMiB, 4 * kMiB, false});
  auto io = engine::NewThreadPoolExecutor(1, 16, [](std::function<void()> f) { f(); });
  engine::EngineOptions options;
  options.io = io.get();
  auto engine = engine::CacheEngine::Create(options, nullptr, std::move(host).value(),
                                            std::move(ssd).value());
  if (!engine) Die(engine.status());
  auto restored = (*engine)->Recover();
  if (!restored) Die(restored.status());
  out.total_s = Seconds(start);
  out.restored = *restored;
  out.index_bytes = static_cast<double>((*engine)->Stats().index_bytes);
  engine->reset();
  io.reset();
  return out;
}

int Run(const std::vector<uint64_t>& points, int runs, const std::string& dir) {
  for (uint64_t blocks : points) {
    const double build_s = Build(blocks, dir);
    std::vector<Restart> done;
    for (int r = 0; r < runs; ++r) {
      done.push_back(RestartOnce(blocks, dir));
      if (done.back().restored != blocks) {
        Die(InternalError("restored " + std::to_string(done.back().restored) + " of " +
                          std::to_string(blocks) + " blocks"));
      }
    }
    std::sort(done.begin(), done.end(),
              [](const Restart& a, const Restart& b) { return a.total_s < b.total_s; });
    const Restart& median = done[done.size() / 2];
    std::printf(
        "restart with %lu blocks: %.3f s (worst %.3f s of %d; open %.3f s, re-index %.3f s), "
        "%lu restored, index %.1f B/block; building them took %.1f s\n",
        static_cast<unsigned long>(blocks), median.total_s, done.back().total_s, runs,
        median.open_s, median.total_s - median.open_s, static_cast<unsigned long>(median.restored),
        median.index_bytes / static_cast<double>(blocks), build_s);
    std::fflush(stdout);
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  std::vector<uint64_t> points = {1'000'000};
  int runs = 3;
  std::string dir = "/var/tmp/kvtier-bench-restart";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    const std::string value = argv[i + 1];
    if (arg == "--blocks") {
      points.clear();
      for (size_t at = 0; at < value.size();) {
        const size_t comma = std::min(value.find(',', at), value.size());
        points.push_back(std::stoull(value.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (arg == "--runs") {
      runs = std::max(1, std::stoi(value));
    } else if (arg == "--dir") {
      dir = value;
    } else {
      std::fprintf(stderr, "usage: bench_restart [--blocks N[,N...]] [--runs R] [--dir DIR]\n");
      return 2;
    }
  }
  return kvtier::bench::Run(points, runs, dir);
}

// Warm-restart time with N blocks in the SSD tier's index (default 1M):
// opening the data directory and re-indexing every block in the engine.
//
//   bench_restart [--blocks N] [--dir DIR]
//
// The records are written straight into the index (with slots allocated
// but no payload written, over a sparse slot file), so building 1M blocks
// does not need 4 GiB of writes; a restart reads records and reserves
// slots, never payloads.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

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

int Run(uint64_t blocks, const std::string& dir) {
  const Layout layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
  constexpr uint64_t kChain = 100;
  // The slot file is cut into regions of at most 64 MiB and its capacity
  // rounded down to them: leave that much over the blocks' bytes.
  const uint64_t capacity = blocks * layout.BlockBytes() + 64 * kMiB;
  std::filesystem::remove_all(dir);
  const auto build_start = Clock::now();
  {
    tiers::internal::SsdOptions o;
    o.dir = dir;
    o.capacity_bytes = capacity;
    o.preallocate = tiers::internal::SsdPreallocate::kSparse;
    auto store = tiers::internal::SsdStore::Open(o);
    if (!store) Die(store.status());
    auto ns = (*store)->RegisterNamespace("bench", "", layout);
    if (!ns) Die(ns.status());
    for (uint64_t i = 0; i < blocks; ++i) {
      auto slot = (*store)->Allocate(layout.BlockBytes());
      if (!slot) Die(slot.status());
      tiers::internal::SsdRecord r;
      r.ns_id = *ns;
      r.key = {i / kChain + 1, i % kChain + 1};
      r.has_parent = i % kChain != 0;
      if (r.has_parent) r.parent = {i / kChain + 1, i % kChain};
      r.slot = *slot;
      r.block_bytes = layout.BlockBytes();
      r.priority = 35;
      if (Status s = (*store)->PutRecord(r); !s.ok()) Die(s);
    }
    if (Status s = (*store)->Sync(); !s.ok()) Die(s);
  }
  const double build_s = Seconds(build_start);

  const auto start = Clock::now();
  tiers::SsdTierOptions ssd_options;
  ssd_options.dir = dir;
  ssd_options.capacity_bytes = capacity;
  ssd_options.prepare = "sparse";
  auto ssd = tiers::NewSsdTier(ssd_options);
  if (!ssd) Die(ssd.status());
  const double open_s = Seconds(start);
  auto host = tiers::NewHostTier({64 * kMiB, 4 * kMiB, false});
  auto io = engine::NewThreadPoolExecutor(1, 16, [](std::function<void()> f) { f(); });
  engine::EngineOptions options;
  options.io = io.get();
  auto engine = engine::CacheEngine::Create(options, nullptr, std::move(host).value(),
                                            std::move(ssd).value());
  if (!engine) Die(engine.status());
  auto restored = (*engine)->Recover();
  if (!restored) Die(restored.status());
  const double total_s = Seconds(start);
  const engine::EngineStats st = (*engine)->Stats();
  std::printf(
      "restart with %lu blocks: %.2f s (open %.2f s, re-index %.2f s), %lu restored, "
      "index %.1f B/block; building them took %.1f s\n",
      static_cast<unsigned long>(blocks), total_s, open_s, total_s - open_s,
      static_cast<unsigned long>(*restored),
      static_cast<double>(st.index_bytes) / static_cast<double>(blocks), build_s);
  engine->reset();
  io.reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  uint64_t blocks = 1'000'000;
  std::string dir = "/var/tmp/kvtier-bench-restart";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--blocks") {
      blocks = std::stoull(argv[i + 1]);
    } else if (arg == "--dir") {
      dir = argv[i + 1];
    }
  }
  return kvtier::bench::Run(blocks, dir);
}

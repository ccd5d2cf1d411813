// Engine: the CacheEngine's operations on one thread, with a host tier and an
// emulated device tier, for a small (4 KiB) and a realistic (2 MiB) block:
//   - Lookup of a 64-key chain, all present;
//   - Allocate+Commit of a new 64-key chain in steady state: the tiers are
//     full, so every block allocated evicts one (a device victim is demoted
//     to host by a copy, a host victim is dropped);
//   - Acquire+Release of a cached 64-key chain, already in the tier asked for.
// Reported as operations (chains) and blocks per second. The bytes of a block
// are never written: that is the worker's work, not the engine's.
//
// The peer for the device write path is memcpy of the same blocks between
// buffers as large as the two arenas, measured in the same run: a demotion
// is one such copy, so it bounds what Allocate+Commit can reach.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "engine/cache_engine.h"

namespace kvtier::bench {
namespace {

using engine::Allocation;
using engine::BlockKey;
using engine::CacheEngine;
using engine::NamespaceId;
using tiers::ArenaTierOptions;
using tiers::TierKind;

constexpr size_t kChainKeys = 64;

struct Config {
  const char* name;
  Layout layout;
  uint64_t device_bytes;
  uint64_t host_bytes;
  uint64_t slab_bytes;
};

// 0: 1 layer, 1 KV head, head_dim 64, fp16, 16 tokens = 4 KiB; 4 MiB device
//    + 16 MiB host (1,024 + 4,096 blocks).
// 1: Llama-3-8B (32 layers, 8 KV heads, head_dim 128, fp16), 16 tokens =
//    2 MiB; 256 MiB device + 768 MiB host (128 + 384 blocks).
const Config kConfigs[] = {
    {"4KiB", Layout{1, 1, 64, DType::kFloat16, 16}, 4 * kMiB, 16 * kMiB, 256 * kKiB},
    {"2MiB", Layout{32, 8, 128, DType::kFloat16, 16}, 256 * kMiB, 768 * kMiB, 64 * kMiB},
};

struct EngineFixture {
  std::unique_ptr<CacheEngine> engine;
  NamespaceId ns = 0;
  uint64_t next_stem = 1;
  std::vector<BlockKey> cached;  // a chain committed in the device tier

  std::vector<BlockKey> NewChain() {
    std::vector<BlockKey> keys;
    const uint64_t stem = next_stem++;
    for (size_t i = 0; i < kChainKeys; ++i) keys.push_back(BlockKey{stem, i + 1});
    return keys;
  }
};

Status Put(EngineFixture& f, const std::vector<BlockKey>& keys, TierKind tier) {
  auto a = f.engine->Allocate(f.ns, std::nullopt, keys, tier);
  if (!a.ok()) return a.status();
  if (a->allocated() != keys.size()) return InternalError("chain not fully allocated");
  return a->Commit();
}

// One engine per (benchmark, config, tier), built on first use and kept, so
// the iteration-count probes of the library reuse its steady state. `fill`:
// commit chains until both tiers are full.
Result<EngineFixture*> Engine(const std::string& bench, const Config& c, TierKind tier, bool fill) {
  static std::map<std::tuple<std::string, std::string, TierKind>, std::unique_ptr<EngineFixture>>
      built;
  std::unique_ptr<EngineFixture>& f = built[{bench, c.name, tier}];
  if (f != nullptr) return f.get();
  auto device = tiers::NewEmulatedDeviceTier(ArenaTierOptions{c.device_bytes, c.slab_bytes});
  if (!device.ok()) return device.status();
  auto host = tiers::NewHostTier(ArenaTierOptions{c.host_bytes, c.slab_bytes});
  if (!host.ok()) return host.status();
  auto engine = CacheEngine::Create({}, std::move(device).value(), std::move(host).value());
  if (!engine.ok()) return engine.status();
  auto fixture = std::make_unique<EngineFixture>();
  fixture->engine = std::move(engine).value();
  auto ns = fixture->engine->AddNamespace({"bench", c.name, c.layout});
  if (!ns.ok()) return ns.status();
  fixture->ns = *ns;
  if (fill) {
    const uint64_t blocks = (c.device_bytes + c.host_bytes) / c.layout.BlockBytes();
    for (uint64_t i = 0; i < blocks / kChainKeys + 2; ++i) {
      if (Status s = Put(*fixture, fixture->NewChain(), tier); !s.ok()) return s;
    }
  } else {
    fixture->cached = fixture->NewChain();
    if (Status s = Put(*fixture, fixture->cached, TierKind::kDevice); !s.ok()) return s;
  }
  f = std::move(fixture);
  return f.get();
}

// `bytes_moved`: the operation copies the blocks' bytes (bytes/s means something).
void SetRates(benchmark::State& state, const Config& c, bool bytes_moved) {
  using benchmark::Counter;
  state.counters["ops_per_s"] = Counter(1, Counter::kIsIterationInvariantRate);
  state.counters["blocks_per_s"] =
      Counter(static_cast<double>(kChainKeys), Counter::kIsIterationInvariantRate);
  if (bytes_moved) {
    state.SetBytesProcessed(state.iterations() *
                            static_cast<int64_t>(kChainKeys * c.layout.BlockBytes()));
  }
}

// The tier argument is a TierKind: 0 device, 1 host.
TierKind TierArg(int64_t arg) { return static_cast<TierKind>(arg); }

void BM_Lookup(benchmark::State& state) {
  const Config& c = kConfigs[state.range(0)];
  auto f = Engine("lookup", c, TierKind::kDevice, /*fill=*/false);
  if (!f.ok()) return state.SkipWithError(f.status().ToString().c_str());
  EngineFixture& fx = **f;
  for (auto _ : state) {
    auto r = fx.engine->Lookup(fx.ns, fx.cached);
    if (!r.ok() || r->hits != kChainKeys) return state.SkipWithError("lookup missed");
    benchmark::DoNotOptimize(r->tiers.data());
  }
  SetRates(state, c, /*bytes_moved=*/false);
}

void BM_AllocateCommit(benchmark::State& state) {
  const Config& c = kConfigs[state.range(0)];
  const TierKind tier = TierArg(state.range(1));
  auto f = Engine("allocate", c, tier, /*fill=*/true);
  if (!f.ok()) return state.SkipWithError(f.status().ToString().c_str());
  EngineFixture& fx = **f;
  const uint64_t evictions_before = fx.engine->Stats().tiers[static_cast<size_t>(tier)].evictions;
  for (auto _ : state) {
    state.PauseTiming();  // key generation is the client's work
    const std::vector<BlockKey> keys = fx.NewChain();
    state.ResumeTiming();
    if (Status s = Put(fx, keys, tier); !s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  SetRates(state, c, /*bytes_moved=*/tier == TierKind::kDevice);
  const uint64_t evictions =
      fx.engine->Stats().tiers[static_cast<size_t>(tier)].evictions - evictions_before;
  state.counters["evictions_per_block"] =
      static_cast<double>(evictions) /
      static_cast<double>(static_cast<uint64_t>(state.iterations()) * kChainKeys);
}

void BM_AcquireRelease(benchmark::State& state) {
  const Config& c = kConfigs[state.range(0)];
  auto f = Engine("acquire", c, TierKind::kDevice, /*fill=*/false);
  if (!f.ok()) return state.SkipWithError(f.status().ToString().c_str());
  EngineFixture& fx = **f;
  for (auto _ : state) {
    auto lease = fx.engine->Acquire(fx.ns, fx.cached, TierKind::kDevice);
    if (!lease.ok() || lease->size() != kChainKeys) return state.SkipWithError("acquire missed");
    lease->Release();
  }
  SetRates(state, c, /*bytes_moved=*/false);
}

// Page-aligned like the arenas' slots: memcpy's speed depends on the
// relative alignment of source and destination.
struct PageBuffer {
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{4096}); }
  };
  explicit PageBuffer(uint64_t bytes, std::byte fill)
      : data(new (std::align_val_t{4096}) std::byte[bytes]) {
    std::memset(data.get(), std::to_integer<int>(fill), bytes);  // fault the pages in
  }
  std::unique_ptr<std::byte[], Free> data;
};

// The peer: 64 blocks copied per iteration from a device-arena-sized buffer
// to a host-arena-sized one, walking both like the arenas' slots.
void BM_MemcpyBlocks(benchmark::State& state) {
  const Config& c = kConfigs[state.range(0)];
  const uint64_t block = c.layout.BlockBytes();
  const PageBuffer src(c.device_bytes, std::byte{1});
  const PageBuffer dst(c.host_bytes, std::byte{0});
  const uint64_t src_slots = c.device_bytes / block;
  const uint64_t dst_slots = c.host_bytes / block;
  uint64_t s = 0;
  uint64_t d = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < kChainKeys; ++i) {
      std::memcpy(dst.data.get() + d * block, src.data.get() + s * block, block);
      s = s + 1 == src_slots ? 0 : s + 1;
      d = d + 1 == dst_slots ? 0 : d + 1;
    }
    benchmark::ClobberMemory();
  }
  SetRates(state, c, /*bytes_moved=*/true);
}

BENCHMARK(BM_Lookup)
    ->ArgName("block")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AllocateCommit)
    ->ArgNames({"block", "tier"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AcquireRelease)
    ->ArgName("block")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_MemcpyBlocks)
    ->ArgName("block")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void Summarize(const SummaryReporter& r) {
  std::printf("engine summary (one thread, 64-key chains; block 0 = 4 KiB, 1 = 2 MiB)\n");
  for (int64_t b = 0; b < 2; ++b) {
    const std::string arg = "/block:" + std::to_string(b);
    const std::string memcpy_name = "BM_MemcpyBlocks" + arg + "/real_time";
    const std::string rows[][2] = {
        {"BM_Lookup" + arg + "/real_time", "lookup"},
        {"BM_AllocateCommit" + arg + "/tier:1/real_time", "allocate+commit, host"},
        {"BM_AllocateCommit" + arg + "/tier:0/real_time", "allocate+commit, device"},
        {"BM_AcquireRelease" + arg + "/real_time", "acquire+release"},
    };
    std::printf("  %s blocks:\n", kConfigs[b].name);
    for (const auto& [name, label] : rows) {
      if (r.Find(name) == nullptr) continue;
      std::printf("    %-24s %10.0f ops/s %12.0f blocks/s\n", label.c_str(),
                  r.Counter(name, "ops_per_s"), r.Counter(name, "blocks_per_s"));
    }
    const std::string device_write = rows[2][0];
    if (r.Find(device_write) != nullptr && r.Find(memcpy_name) != nullptr) {
      std::printf(
          "    allocate+commit, device (each block demotes one) = %.2fx memcpy of the "
          "same blocks (%.0f blocks/s)\n",
          Ratio(r.Seconds(memcpy_name), r.Seconds(device_write)),
          r.Counter(memcpy_name, "blocks_per_s"));
    }
  }
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  return kvtier::bench::RunAndSummarize(argc, argv, kvtier::bench::Summarize);
}

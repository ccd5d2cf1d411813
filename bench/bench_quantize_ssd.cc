// Quantize on demote (engine::NamespaceSpec::quantize_lower) on the SSD tier:
// blocks per second demoted (host -> ssd) and promoted (ssd -> host) with
// the namespace kept in fp8_e4m3 below memory, against the same with it off,
// in the same run (goal >= 1.6x on a disk-bound load).
//
// The real engine, host tier and SSD tier (slot file with O_DIRECT, RocksDB
// index, XXH3-64 checksums) on a real disk, with a pool of I/O threads as the
// daemon has (ssd.io_threads, default 4); completions come back to this
// thread, the engine's. Blocks of Llama-3-8B's layout (32 layers, 8 KV
// heads, head_dim 128, 16 tokens: 2 MiB in fp16, 1 MiB + 2 KiB of scales
// in fp8), values of a normal distribution.
//
// One round of one mode:
//   demote:  a host tier of 16 blocks; --blocks blocks are written in chains
//            of 16 (allocate, copy the values in, commit), each write
//            evicting an older block to the ssd; timed from the first write
//            until the last demotion has landed. The writer waits while the
//            I/O queue is nearly full, so no block is dropped.
//   promote: the engine is rebuilt over the same directory (warm restart,
//            untimed) with a host tier that holds every block, and every
//            chain is acquired into the host, --depth chains at a time;
//            timed until the last promotion has landed. Each promoted block
//            is checked against its original: exact when off, within the
//            e4m3 bound when on (relative error <= 2^-4 plus the scale's
//            subnormal step).
// Modes alternate within a round (off first in even rounds), so the disk's
// drift falls on both; reported: each round's blocks/s and the ratio
// on/off, and the median ratio. The disk bytes/s of each mode (stored
// bytes over time) say whether the load was disk-bound: then both modes
// move about the same bytes per second.
//
// Flags: --dir=PATH (parent of the data directories, default /var/tmp: a
// real disk), --blocks=N (default 512: 1 GiB of fp16), --rounds=N (default
// 5), --threads=N (I/O threads, default 4), --depth=N (chains acquired at
// once, default 4), --mode=both|off|on (one mode alone, for profiling;
// default both).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/fp8.h"
#include "common/half.h"
#include "engine/cache_engine.h"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;
using engine::CacheEngine;
using prefix_index::BlockKey;
using tiers::TierKind;

constexpr size_t kChain = 16;
constexpr size_t kDistinct = 8;  // distinct value blocks, reused round robin
constexpr size_t kQueue = 256;   // kvtierd's ssd.queue default

const Layout kLayout{32, 8, 128, DType::kFloat16, 16};

struct Flags {
  std::string dir = "/var/tmp";
  size_t blocks = 512;
  int rounds = 5;
  size_t threads = 4;
  size_t depth = 4;
  std::string mode = "both";  // or "off", "on": one mode alone, for profiling
};

// Completions of the I/O threads, run on this (the engine's) thread.
class Inbox {
 public:
  void Post(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(f));
    cv_.notify_one();
  }
  // Runs what has arrived; waits for at least one item first.
  void RunSome() {
    std::deque<std::function<void()>> ready;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      ready.swap(queue_);
    }
    for (auto& f : ready) f();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

std::vector<std::vector<std::byte>> MakeValues() {
  std::vector<std::vector<std::byte>> out;
  Rng rng(7);
  for (size_t b = 0; b < kDistinct; ++b) {
    std::vector<std::byte> block(kLayout.BlockBytes());
    for (size_t i = 0; i + 1 < block.size(); i += 2) {
      const double u1 = (static_cast<double>(rng.Next() >> 11) + 1) * 0x1p-53;
      const double u2 = static_cast<double>(rng.Next() >> 11) * 0x1p-53;
      const auto v =
          static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * 3.14159265358979 * u2));
      const uint16_t bits = FloatToHalf(v);
      std::memcpy(block.data() + i, &bits, 2);
    }
    out.push_back(std::move(block));
  }
  return out;
}

struct Node {
  Inbox inbox;
  std::unique_ptr<engine::IoExecutor> io;
  std::unique_ptr<CacheEngine> engine;
  engine::NamespaceId ns = 0;

  // Runs completions until `done` holds.
  void RunUntil(const std::function<bool()>& done) {
    while (!done()) inbox.RunSome();
  }
  ~Node() {
    if (engine) RunUntil([&] { return io->in_flight() == 0; });
    engine.reset();
  }
};

std::unique_ptr<Node> MakeNode(const Flags& f, const std::string& dir, uint64_t host_blocks,
                               Quantize q) {
  auto n = std::make_unique<Node>();
  Node* raw = n.get();
  n->io = engine::NewThreadPoolExecutor(f.threads, kQueue,
                                        [raw](std::function<void()> c) { raw->inbox.Post(c); });
  const uint64_t block = kLayout.BlockBytes();
  auto host = tiers::NewHostTier({host_blocks * block, 32 * block, true});
  tiers::SsdTierOptions so;
  so.dir = dir;
  so.capacity_bytes = (f.blocks + 64) * block;
  so.prepare = "foreground";  // written once before the timing, as a serving tier is
  so.note = [](const std::string&) {};
  auto ssd = tiers::NewSsdTier(so);
  if (!host.ok() || !ssd.ok()) {
    std::fprintf(stderr, "bench_quantize_ssd: %s\n",
                 (!host.ok() ? host.status() : ssd.status()).ToString().c_str());
    std::exit(1);
  }
  engine::EngineOptions o;
  o.io = n->io.get();
  auto e = CacheEngine::Create(o, nullptr, std::move(host).value(), std::move(ssd).value());
  if (!e.ok()) std::exit(1);
  n->engine = std::move(e).value();
  if (!n->engine->Recover().ok()) std::exit(1);
  n->ns = *n->engine->AddNamespace({"llama-3-8b", "", kLayout, q});
  return n;
}

std::vector<BlockKey> ChainKeys(size_t c) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < kChain; ++i) keys.push_back(BlockKey{c + 1, i + 1});
  return keys;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool Close(std::span<const std::byte> want, std::span<const std::byte> got, Quantize q) {
  if (q == Quantize::kOff) return std::memcmp(want.data(), got.data(), want.size()) == 0;
  for (size_t i = 0; i + 1 < want.size(); i += 2) {
    uint16_t a = 0, b = 0;
    std::memcpy(&a, want.data() + i, 2);
    std::memcpy(&b, got.data() + i, 2);
    const float x = HalfToFloat(a), y = HalfToFloat(b);
    // amax of a normal sample of 2,048 values stays below 6: the scale is
    // at most 6 / 448, its subnormal half step 2^-10 of that.
    if (std::fabs(x - y) > std::fabs(x) * (0x1p-4 + 0x1p-10) + 6.0 / 448 * 0x1p-10) return false;
  }
  return true;
}

// CPU seconds of the whole process (every thread) so far.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Rates {
  double demote = 0, promote = 0;          // blocks per second
  double demote_cpu = 0, promote_cpu = 0;  // CPU seconds per block, all threads
  uint64_t dropped = 0, wrong = 0, short_leases = 0;
};

Rates RunMode(const Flags& f, const std::string& parent, Quantize q,
              const std::vector<std::vector<std::byte>>& values) {
  const std::string dir = parent + "/" + std::string(QuantizeName(q));
  fs::remove_all(dir);
  const size_t chains = f.blocks / kChain;
  Rates r;
  {
    // Demote: a 16-block host, every write evicting an older block.
    auto n = MakeNode(f, dir, kChain, q);
    CacheEngine& e = *n->engine;
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = CpuSeconds();
    for (size_t c = 0; c <= chains; ++c) {  // the last chain pushes out the one before
      const auto keys = ChainKeys(c);
      for (size_t i = 0; i < kChain; ++i) {
        n->RunUntil([&] { return n->io->in_flight() + 2 < kQueue; });
        auto a = e.Allocate(n->ns, i == 0 ? std::nullopt : std::optional(keys[i - 1]),
                            std::span(keys).subspan(i, 1), TierKind::kHost);
        if (!a.ok() || a->state(0) != engine::WriteState::kAllocated) std::exit(2);
        std::memcpy(a->Bytes(0).data(), values[(c * kChain + i) % kDistinct].data(),
                    kLayout.BlockBytes());
        if (!a->Commit().ok()) std::exit(2);
      }
    }
    n->RunUntil([&] { return e.Stats().moves_in_flight == 0; });
    r.demote = static_cast<double>(chains * kChain) / Seconds(t0);
    r.demote_cpu = (CpuSeconds() - cpu0) / static_cast<double>(chains * kChain);
    r.dropped = e.Stats().demotions_dropped;
    if (!e.tier(TierKind::kSsd)->Sync().ok()) std::exit(2);
  }
  {
    // Promote: restarted over the same disk, a host that holds them all.
    auto n = MakeNode(f, dir, f.blocks + 2 * kChain, q);
    CacheEngine& e = *n->engine;
    size_t next = 0, outstanding = 0;
    std::vector<engine::Lease> leases(chains);  // checked after the timing
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = CpuSeconds();
    std::function<void()> start = [&] {
      const size_t c = next++;
      ++outstanding;
      const auto keys = ChainKeys(c);
      e.AcquireAsync(n->ns, keys, TierKind::kHost, [&, c](Result<engine::Lease> lease) {
        --outstanding;
        if (lease.ok()) leases[c] = std::move(lease).value();
      });
    };
    while (next < chains || outstanding > 0) {
      while (next < chains && outstanding < f.depth) start();
      if (outstanding > 0) n->inbox.RunSome();
    }
    r.promote = static_cast<double>(chains * kChain) / Seconds(t0);
    r.promote_cpu = (CpuSeconds() - cpu0) / static_cast<double>(chains * kChain);
    for (size_t c = 0; c < chains; ++c) {
      if (leases[c].size() != kChain) ++r.short_leases;
      for (size_t i = 0; i < leases[c].size(); ++i) {
        if (!Close(values[(c * kChain + i) % kDistinct], leases[c].Bytes(i), q)) ++r.wrong;
      }
      leases[c].Release();
    }
  }
  fs::remove_all(dir);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(const Flags& f) {
  const auto values = MakeValues();
  char tmpl[4096];
  std::snprintf(tmpl, sizeof tmpl, "%s/kvtier_bench_quantize.XXXXXX", f.dir.c_str());
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string parent = tmpl;
  const double full = static_cast<double>(kLayout.BlockBytes());
  const double stored = static_cast<double>(Fp8LayoutOf(kLayout, DType::kFp8E4M3).BlockBytes());
  std::printf("blocks: %s, %zu per round; %zu I/O threads; codecs: %s; data on %s\n",
              kLayout.ToString().c_str(), f.blocks, f.threads, Fp8CodecPath(), parent.c_str());
  std::printf("%-6s %14s %14s %8s %14s %14s %8s\n", "round", "demote off/s", "demote on/s", "ratio",
              "promote off/s", "promote on/s", "ratio");
  std::vector<double> demote_ratio, promote_ratio;
  Rates off_sum, on_sum;
  int failures = 0;
  for (int round = 0; round < f.rounds; ++round) {
    Rates off, on;
    if (f.mode != "both") {
      const Quantize q = f.mode == "on" ? Quantize::kFp8E4M3 : Quantize::kOff;
      const Rates x = RunMode(f, parent, q, values);
      std::printf("%-6d %s: demote %.0f/s (%.0f us CPU a block), promote %.0f/s (%.0f us)\n", round,
                  f.mode.c_str(), x.demote, x.demote_cpu * 1e6, x.promote, x.promote_cpu * 1e6);
      continue;
    }
    if (round % 2 == 0) {
      off = RunMode(f, parent, Quantize::kOff, values);
      on = RunMode(f, parent, Quantize::kFp8E4M3, values);
    } else {
      on = RunMode(f, parent, Quantize::kFp8E4M3, values);
      off = RunMode(f, parent, Quantize::kOff, values);
    }
    for (const Rates* x : {&off, &on}) {
      if (x->dropped + x->wrong + x->short_leases > 0) {
        std::printf("  %s: %llu dropped, %llu wrong, %llu short leases\n", x == &off ? "off" : "on",
                    static_cast<unsigned long long>(x->dropped),
                    static_cast<unsigned long long>(x->wrong),
                    static_cast<unsigned long long>(x->short_leases));
        ++failures;
      }
    }
    demote_ratio.push_back(on.demote / off.demote);
    promote_ratio.push_back(on.promote / off.promote);
    off_sum.demote_cpu += off.demote_cpu / f.rounds;
    off_sum.promote_cpu += off.promote_cpu / f.rounds;
    on_sum.demote_cpu += on.demote_cpu / f.rounds;
    on_sum.promote_cpu += on.promote_cpu / f.rounds;
    off_sum.demote += off.demote / f.rounds;
    off_sum.promote += off.promote / f.rounds;
    on_sum.demote += on.demote / f.rounds;
    on_sum.promote += on.promote / f.rounds;
    std::printf("%-6d %14.0f %14.0f %7.2fx %14.0f %14.0f %7.2fx\n", round, off.demote, on.demote,
                demote_ratio.back(), off.promote, on.promote, promote_ratio.back());
    std::fflush(stdout);
  }
  std::printf("median on/off: demote %.2fx, promote %.2fx (goal >= 1.6x)\n", Median(demote_ratio),
              Median(promote_ratio));
  std::printf(
      "disk bytes/s (mean of rounds): demote off %.2f GB/s, on %.2f GB/s; promote off "
      "%.2f GB/s, on %.2f GB/s\n",
      off_sum.demote * full / 1e9, on_sum.demote * stored / 1e9, off_sum.promote * full / 1e9,
      on_sum.promote * stored / 1e9);
  std::printf(
      "CPU a block, all threads (mean of rounds): demote off %.0f us, on %.0f us; "
      "promote off %.0f us, on %.0f us\n",
      off_sum.demote_cpu * 1e6, on_sum.demote_cpu * 1e6, off_sum.promote_cpu * 1e6,
      on_sum.promote_cpu * 1e6);
  fs::remove_all(parent);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("dir")) {
      f.dir = v;
    } else if (const char* v2 = value("blocks")) {
      f.blocks = std::max<size_t>(32, std::strtoull(v2, nullptr, 10));
    } else if (const char* v3 = value("rounds")) {
      f.rounds = std::max(1, std::atoi(v3));
    } else if (const char* v4 = value("threads")) {
      f.threads = std::max<size_t>(1, std::strtoull(v4, nullptr, 10));
    } else if (const char* v5 = value("depth")) {
      f.depth = std::max<size_t>(1, std::strtoull(v5, nullptr, 10));
    } else if (const char* v6 = value("mode")) {
      f.mode = v6;
    } else {
      std::fprintf(stderr,
                   "usage: bench_quantize_ssd [--dir=PATH] [--blocks=N] [--rounds=N] "
                   "[--threads=N] [--depth=N] [--mode=both|off|on]\n");
      return 2;
    }
  }
  return kvtier::bench::Run(f);
}

// Block seals on one core (tiers/block_seal.h): GB/s of sealing and of
// opening a block through each AES-256-GCM engine this build and CPU have
// (internal/aes_gcm.h), against memcpy of the same bytes in the same run,
// and the faster engine against OpenSSL's.
//
// Blocks of 256 KiB and 2 MiB, 16 of each (32 MiB of 2 MiB blocks: past the
// last-level cache, as blocks on their way to a disk or a socket are),
// sealed into another buffer in parts of 512 KiB (as the remote tier sends
// them) and opened in place in parts of 64 KiB (as the SSD tier reads them).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tiers/block_seal.h"
#include "tiers/internal/aes_gcm.h"

namespace kvtier::bench {
namespace {

using tiers::internal::GcmEngine;
constexpr size_t kBlocks = 16;

struct Data {
  std::vector<std::vector<std::byte>> plain, sealed;
};

tiers::SealIdentity Identity(size_t bytes, size_t b) {
  tiers::SealIdentity id;
  id.ns = tiers::NamespaceFingerprint("bench", "", "layout");
  id.key = {b + 1, 7};
  id.tier = tiers::kSealTierRemote;
  id.bytes = bytes;
  return id;
}

Data& DataFor(size_t bytes) {
  static std::vector<std::pair<size_t, Data>> all;
  for (auto& [n, d] : all) {
    if (n == bytes) return d;
  }
  Data d;
  Rng rng(bytes);
  for (size_t b = 0; b < kBlocks; ++b) {
    std::vector<std::byte> block(bytes);
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
      const uint64_t v = rng.Next();
      std::memcpy(block.data() + i, &v, 8);
    }
    d.plain.push_back(std::move(block));
    d.sealed.emplace_back(bytes);
  }
  all.emplace_back(bytes, std::move(d));
  return all.back().second;
}

tiers::BlockSealer& Sealer(GcmEngine engine) {
  static auto ring = *tiers::KeyRing::Parse("1:" + std::string(64, '7'));
  static tiers::BlockSealer openssl(ring, GcmEngine::kOpenSsl);
  static tiers::BlockSealer* fast =
      new tiers::BlockSealer(ring, tiers::internal::AvailableGcmEngines().front());
  return engine == GcmEngine::kOpenSsl ? openssl : *fast;
}

size_t Bytes(const benchmark::State& state) { return static_cast<size_t>(state.range(0)); }

void BM_Memcpy(benchmark::State& state) {
  Data& d = DataFor(Bytes(state));
  size_t b = 0;
  for (auto _ : state) {
    std::memcpy(d.sealed[b].data(), d.plain[b].data(), d.plain[b].size());
    benchmark::ClobberMemory();
    b = (b + 1) % kBlocks;
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void SealBench(benchmark::State& state, GcmEngine engine) {
  const size_t n = Bytes(state);
  Data& d = DataFor(n);
  tiers::BlockSealer& sealer = Sealer(engine);
  constexpr size_t kPart = 512 << 10;
  size_t b = 0;
  for (auto _ : state) {
    auto sealing = sealer.StartSeal(Identity(n, b));
    for (size_t at = 0; at < n; at += kPart) {
      const size_t len = std::min(kPart, n - at);
      if (!sealing
               ->Update(std::span(d.plain[b]).subspan(at, len),
                        std::span(d.sealed[b]).subspan(at, len))
               .ok()) {
        state.SkipWithError("seal failed");
        return;
      }
    }
    benchmark::DoNotOptimize(sealing->Finish());
    b = (b + 1) % kBlocks;
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void OpenBench(benchmark::State& state, GcmEngine engine) {
  const size_t n = Bytes(state);
  Data& d = DataFor(n);
  tiers::BlockSealer& sealer = Sealer(engine);
  // Each block sealed once; each iteration restores a sealed copy (not
  // timed: PauseTiming) and opens it in place.
  std::vector<tiers::Seal> seals;
  std::vector<std::vector<std::byte>> sealed;
  for (size_t b = 0; b < kBlocks; ++b) {
    sealed.emplace_back(n);
    seals.push_back(*sealer.SealBlock(Identity(n, b), d.plain[b], sealed.back()));
  }
  constexpr size_t kPart = 64 << 10;
  size_t b = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(d.sealed[b].data(), sealed[b].data(), n);
    state.ResumeTiming();
    auto opener = sealer.StartOpen(Identity(n, b), seals[b]);
    for (size_t at = 0; at < n; at += kPart) {
      if (!opener->Update(std::span(d.sealed[b]).subspan(at, std::min(kPart, n - at))).ok()) {
        state.SkipWithError("open failed");
        return;
      }
    }
    if (!opener->Finish().ok()) {
      state.SkipWithError("a block did not open");
      return;
    }
    b = (b + 1) % kBlocks;
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_SealOpenSsl(benchmark::State& state) { SealBench(state, GcmEngine::kOpenSsl); }
void BM_OpenOpenSsl(benchmark::State& state) { OpenBench(state, GcmEngine::kOpenSsl); }
void BM_SealFastest(benchmark::State& state) {
  SealBench(state, tiers::internal::AvailableGcmEngines().front());
}
void BM_OpenFastest(benchmark::State& state) {
  OpenBench(state, tiers::internal::AvailableGcmEngines().front());
}

#define KVTIER_SEAL_BENCH(fn)      \
  BENCHMARK(fn)                    \
      ->Arg(256 << 10)             \
      ->Arg(2 << 20)               \
      ->Repetitions(5)             \
      ->ReportAggregatesOnly(true) \
      ->MinTime(0.2)               \
      ->UseRealTime()
KVTIER_SEAL_BENCH(BM_Memcpy);
KVTIER_SEAL_BENCH(BM_SealOpenSsl);
KVTIER_SEAL_BENCH(BM_OpenOpenSsl);
KVTIER_SEAL_BENCH(BM_SealFastest);
KVTIER_SEAL_BENCH(BM_OpenFastest);

double GBps(const SummaryReporter& r, const std::string& name, size_t bytes) {
  const double s = r.Seconds(name);
  return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using namespace kvtier;
  using namespace kvtier::bench;
  return RunAndSummarize(argc, argv, [](const SummaryReporter& r) {
    const auto fastest = tiers::internal::AvailableGcmEngines().front();
    std::printf("block seals (AES-256-GCM) on one core: OpenSSL and %s, against memcpy\n",
                std::string(tiers::internal::GcmEngineName(fastest)).c_str());
    std::printf("%-6s %8s %20s %20s %20s %20s %10s %10s\n", "block", "memcpy", "seal OpenSSL",
                "open OpenSSL", "seal fastest", "open fastest", "seal gain", "open gain");
    for (size_t bytes : {size_t{256} << 10, size_t{2} << 20}) {
      char suffix[64];
      std::snprintf(suffix, sizeof(suffix), "/%zu/min_time:0.200/repeats:5/real_time", bytes);
      const std::string a = suffix;
      const double mem = GBps(r, "BM_Memcpy" + a, bytes);
      const double so = GBps(r, "BM_SealOpenSsl" + a, bytes);
      const double oo = GBps(r, "BM_OpenOpenSsl" + a, bytes);
      const double sf = GBps(r, "BM_SealFastest" + a, bytes);
      const double of = GBps(r, "BM_OpenFastest" + a, bytes);
      std::printf(
          "%-6s %8.2f %11.2f (%.2fx) %11.2f (%.2fx) %11.2f (%.2fx) %11.2f (%.2fx) %9.2fx %9.2fx\n",
          bytes == (256u << 10) ? "256k" : "2M", mem, so, Ratio(so, mem), oo, Ratio(oo, mem), sf,
          Ratio(sf, mem), of, Ratio(of, mem), Ratio(sf, so), Ratio(of, oo));
    }
  });
}

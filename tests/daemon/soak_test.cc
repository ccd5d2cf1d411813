// Soak (its own binary, CTest label `daemon_soak`): 64 clients for a bounded
// time (20 s; KVTIER_SOAK_SECONDS overrides) run a mixed workload — zero-copy
// and inline writes, leased and inline reads, lookups, removals — over
// random prompts sharing a few prefixes, while every tier is under eviction
// pressure: an emulated device tier of 2 MiB, a host tier of 8 MiB and an
// SSD tier of 64 MiB under a working set of ~200 MiB. It checks that no
// request fails except with RESOURCE_EXHAUSTED (a tier full of pinned
// blocks), that every byte read is the pattern written under its key, that
// the daemon's resident memory stays within its capacities plus a stated
// overhead, and that nothing is left pinned, leased or pending at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "client/client.h"
#include "common/units.h"
#include "support/daemon_client.h"

namespace kvtier::testing {
namespace {

using client::Client;
using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::WireTier;
using protocol::WireWriteState;

constexpr int kClients = 64;
constexpr uint64_t kBlockBytes = 16 * 1024;  // Layout{2, 2, 64, fp16, 16}
constexpr uint64_t kDeviceBytes = 2 * kMiB;
constexpr uint64_t kHostBytes = 8 * kMiB;
constexpr int kPrefixes = 8;     // shared "system prompts" of 4 blocks
constexpr int kSuffixes = 3000;  // x 1-8 blocks each: ~200 MiB of blocks
constexpr int kPrefixBlocks = 4;

// The daemon's memory beyond its tiers' arenas, measured here: 14 MiB at
// start (the binary, its libraries, RocksDB opened), then a peak of 63-67
// MiB over the 10 MiB of arenas in runs of 20-60 s, i.e. 53-57 MiB of
// overhead: 64 sessions' buffers (a frame or a reply of up to 12 blocks
// each, ~0.5 MiB a session), the SSD tier's copies in flight (at most 256
// x 16 KiB), RocksDB's memtable (4 MiB) and block cache, the index. The
// bound allows 96 MiB, for allocator and scheduling variance.
constexpr uint64_t kOverheadBytes = 96 * kMiB;

int SoakSeconds() {
  const char* s = std::getenv("KVTIER_SOAK_SECONDS");
  return s != nullptr && std::atoi(s) > 0 ? std::atoi(s) : 20;
}

struct Totals {
  std::atomic<uint64_t> ops{0}, blocks_written{0}, blocks_verified{0}, bytes_verified{0};
  std::atomic<uint64_t> exhausted{0}, errors{0}, wrong_bytes{0};
  std::mutex mutex;
  std::string first_error;  // guarded by mutex
  void Error(const std::string& what) {
    ++errors;
    std::lock_guard lock(mutex);
    if (first_error.empty()) first_error = what;
  }
  // OK, or RESOURCE_EXHAUSTED (counted): a full tier is an expected answer.
  bool Expected(const Status& s, const char* op) {
    if (s.ok()) return true;
    if (s.code() == StatusCode::kResourceExhausted) {
      ++exhausted;
      return false;
    }
    Error(std::string(op) + ": " + s.ToString());
    return false;
  }
};

void Verify(std::span<const std::byte> bytes, const BlockKey& key, Totals& totals) {
  if (!MatchesPattern(bytes, key)) ++totals.wrong_bytes;
  ++totals.blocks_verified;
  totals.bytes_verified += bytes.size();
}

void RunClient(Client& c, uint32_t seed, std::chrono::steady_clock::time_point until,
               Totals& totals) {
  std::mt19937 rng(seed);
  std::vector<std::vector<TokenId>> prefixes;
  for (int p = 0; p < kPrefixes; ++p)
    prefixes.push_back(RandomPrompt(static_cast<uint32_t>(p) + 1, kPrefixBlocks));
  while (std::chrono::steady_clock::now() < until && c.healthy()) {
    std::vector<TokenId> tokens = prefixes[rng() % kPrefixes];
    const auto suffix =
        RandomPrompt(1000 + static_cast<uint32_t>(rng() % kSuffixes), 1 + rng() % 8);
    tokens.insert(tokens.end(), suffix.begin(), suffix.end());
    const auto keys = c.Keys(tokens);
    const WireTier tier = rng() % 2 ? WireTier::kHost : WireTier::kDevice;
    const auto op = rng() % 100;
    ++totals.ops;
    if (op < 25) {
      auto w = c.Allocate(keys, std::nullopt, tier);
      if (!totals.Expected(w.status(), "ALLOCATE")) continue;
      for (size_t i = 0; i < w->size(); ++i) {
        if (w->state(i) == WireWriteState::kAllocated) FillPattern(w->Bytes(i), keys[i]);
      }
      if (rng() % 8 == 0) {
        totals.Expected(w->Abort(), "ABORT");
      } else {
        const size_t n = w->allocated();
        if (totals.Expected(w->Commit(), "COMMIT")) totals.blocks_written += n;
      }
    } else if (op < 35) {
      std::vector<std::byte> data(keys.size() * c.block_bytes());
      for (size_t i = 0; i < keys.size(); ++i) {
        FillPattern(std::span(data).subspan(i * c.block_bytes(), c.block_bytes()), keys[i]);
      }
      auto put = c.PutInline(keys, data);
      if (!totals.Expected(put.status(), "PUT")) continue;
      for (WireWriteState s : put->states) totals.blocks_written += s == WireWriteState::kAllocated;
    } else if (op < 60) {
      auto lease = c.Acquire(keys, tier);
      if (!totals.Expected(lease.status(), "ACQUIRE")) continue;
      for (size_t i = 0; i < lease->size(); ++i) Verify(lease->Bytes(i), keys[i], totals);
      totals.Expected(lease->Release(), "RELEASE");
    } else if (op < 75) {
      auto got = c.GetInline(keys);
      if (!totals.Expected(got.status(), "GET")) continue;
      for (size_t i = 0; i < got->hits; ++i) {
        Verify(std::span(got->data).subspan(i * c.block_bytes(), c.block_bytes()), keys[i], totals);
      }
    } else if (op < 95) {
      totals.Expected(c.Lookup(keys).status(), "LOOKUP");
    } else {
      // The suffix only: removing a shared prefix would drop everyone's.
      totals.Expected(c.Remove(std::span(keys).subspan(kPrefixBlocks)).status(), "REMOVE");
    }
  }
  if (!c.healthy()) totals.Error("client broken: the daemon closed or timed out");
}

TEST(SoakTest, SixtyFourClientsUnderEvictionPressureInEveryTier) {
  const TempDir data_dir("/var/tmp/kvtier-soak");
  auto d = Daemon::Start({"--device", "emulated", "--device-capacity", "2MiB", "--host-capacity",
                          "8MiB", "--host-slab", "1MiB", "--ssd-dir", data_dir / "ssd",
                          "--ssd-capacity", "64MiB", "--ssd-prepare", "foreground"});
  ASSERT_NE(d, nullptr);
  client::ClientOptions o = TestClientOptions(d->socket(), "soak", "soak");
  o.io_timeout_ms = 30'000;
  ASSERT_EQ(o.layout.BlockBytes(), kBlockBytes);

  const uint64_t start_rss = ResidentBytes(d->pid());
  const int seconds = SoakSeconds();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  Totals totals;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak_rss{0};
  std::thread sampler([&] {
    while (!done) {
      peak_rss = std::max<uint64_t>(peak_rss, ResidentBytes(d->pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      auto c = Client::Connect(o);
      if (!c.ok()) {
        totals.Error("connect: " + c.status().ToString());
        return;
      }
      RunClient(**c, static_cast<uint32_t>(t) * 7919 + 1, until, totals);
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  sampler.join();

  auto observer = Client::Connect(o);
  ASSERT_TRUE(observer.ok()) << observer.status().ToString();
  std::map<std::string, std::string> s;
  for (int i = 0; i < 500; ++i) {  // the last sessions' ends, the disk's moves
    s.clear();
    if (auto st = (*observer)->Stats(); st.ok()) s.insert(st->begin(), st->end());
    if (s["sessions"] == "1" && s["moves_in_flight"] == "0") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const uint64_t arenas = kHostBytes + kDeviceBytes;
  std::cout << "soak: " << seconds << " s, " << kClients << " clients, " << totals.ops << " ops, "
            << totals.blocks_written << " blocks written, " << totals.blocks_verified << " blocks ("
            << totals.bytes_verified / kMiB << " MiB) read and verified, " << totals.exhausted
            << " RESOURCE_EXHAUSTED; evictions device " << s["tier.device.evictions"] << " host "
            << s["tier.host.evictions"] << " ssd " << s["tier.ssd.evictions"] << "; RSS "
            << start_rss / kMiB << " MiB at start, peak " << peak_rss / kMiB << " MiB over "
            << arenas / kMiB << " MiB of arenas\n";

  EXPECT_EQ(totals.errors.load(), 0u) << totals.first_error;
  EXPECT_EQ(totals.wrong_bytes.load(), 0u);
  EXPECT_GT(totals.blocks_verified.load(), 1000u);
  // Every tier evicted: the pressure was real.
  for (const char* tier : {"device", "host", "ssd"}) {
    const std::string key = std::string("tier.") + tier + ".evictions";
    EXPECT_GT(std::stoull(s[key].empty() ? "0" : s[key]), 0u) << key;
  }
  EXPECT_EQ(s["sessions"], "1");
  EXPECT_EQ(s["open_leases"], "0");
  EXPECT_EQ(s["open_allocations"], "0");
  EXPECT_EQ(s["pending_blocks"], "0");
  EXPECT_EQ(s["tier.device.pinned_blocks"], "0");
  EXPECT_EQ(s["tier.host.pinned_blocks"], "0");
  EXPECT_EQ(s["checksum_failures"], "0");
  EXPECT_EQ(s["io_errors"], "0");
  if (!kSanitized) {
    EXPECT_LE(peak_rss.load(), arenas + kOverheadBytes)
        << "peak RSS " << peak_rss << " bytes; capacities " << arenas << " + overhead "
        << kOverheadBytes;
  }
  EXPECT_TRUE(d->Alive());
  observer->reset();
  d.reset();
}

}  // namespace
}  // namespace kvtier::testing

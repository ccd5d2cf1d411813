// How kvtierd's costs grow with the blocks it holds (bench/scale.sh): the
// points of the table, each a running kvtierd whose host tier holds exactly
// its number of 4 KiB blocks (and nothing below it).
//
//   bench_scale_blocks --point N,SOCKET,PID [--point ...] [--fill-chain L]
//     [--threads T] [--ops K] [--runs R] [--window W]
//
// 1. Fill, one point after the other: N blocks as chains of L keys,
//    ALLOCATE + COMMIT from T connections, the bytes never written, so only
//    the daemon's index and metadata become resident, not the arena. Memory
//    per block: the growth of the daemon's RssAnon (/proc/PID/status) from
//    before the fill (after a warm-up write that was aborted, so the
//    sessions' buffers and the namespace exist) to the full tier, over N;
//    and the marginal cost: what the second half of the fill added, over
//    its blocks (free of fixed costs that a small N cannot amortize).
// 2. Latency: R rounds; in each, every point gets a run of K LOOKUPs and a
//    run of K ACQUIREs (each followed by its RELEASE, untimed) of W-key
//    windows of random filled chains at random offsets, so the keys are
//    spread over the whole index, past the caches. One connection, one
//    request in flight. The points' order rotates every round, so whatever
//    else the machine runs falls on every point alike. Each run's p50 and
//    p99; the median over runs and the worst.
//
// Prints one line of name=value pairs per point (times in microseconds).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "common/hash.h"
#include "scale_util.h"

namespace kvtier::bench {
namespace {

using client::BlockKey;
using client::Client;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) { DieScale("bench_scale_blocks", what); }

struct Args {
  uint64_t fill_chain = 1024;
  int threads = 2;
  int ops = 20000;
  int runs = 3;
  uint64_t window = 64;
};

// The warm-up's chain, apart from the fill's (0, 1, ...).
constexpr uint64_t kWarmUpChain = uint64_t{1} << 36;

// Keys of chain `chain` at positions [first, first + n): distinct for every
// (chain, position), spread like the keyed hashes real keys are.
std::vector<BlockKey> Keys(uint64_t chain, uint64_t first, uint64_t n) {
  std::vector<BlockKey> keys(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t id = (chain << 24) | (first + i);
    keys[i] = {Mix64(2 * id + 1), Mix64(2 * id + 2)};
  }
  return keys;
}

std::unique_ptr<Client> Connect(const std::string& socket) {
  client::ClientOptions o;
  o.socket_path = socket;
  o.model = "bench-scale-blocks";
  o.layout = Layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
  o.client_name = "bench_scale_blocks";
  auto c = Client::Connect(o);
  if (!c) Die("connect: " + c.status().ToString());
  return std::move(c).value();
}

// Allocates and commits `keys` without writing a byte of them.
void Write(Client& c, std::span<const BlockKey> keys) {
  auto w = c.Allocate(keys);
  if (!w) Die("ALLOCATE: " + w.status().ToString());
  if (w->allocated() != keys.size()) {
    Die("ALLOCATE placed " + std::to_string(w->allocated()) + " of " + std::to_string(keys.size()) +
        " blocks");
  }
  if (Status s = w->Commit(); !s.ok()) Die("COMMIT: " + s.ToString());
}

// Chains [first, first + count) of `length` keys written from `threads`
// connections, chain i by connection i % threads.
void WriteChains(std::vector<std::unique_ptr<Client>>& conns, uint64_t first, uint64_t count,
                 uint64_t length) {
  std::vector<std::thread> workers;
  for (size_t t = 0; t < conns.size(); ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t i = t; i < count; i += conns.size()) {
        const std::vector<BlockKey> keys = Keys(first + i, 0, length);
        Write(*conns[t], keys);
      }
    });
  }
  for (std::thread& w : workers) w.join();
}

struct Latency {
  double p50 = 0;
  double p99 = 0;
};

// One run of `ops` calls of `op` on random windows of the full chains; `op`
// returns the microseconds of what it times.
template <typename Op>
Latency TimeWindows(const Args& a, uint64_t chains, std::mt19937_64& rng, Op op) {
  std::vector<double> us;
  us.reserve(static_cast<size_t>(a.ops));
  std::uniform_int_distribution<uint64_t> chain(0, chains - 1);
  std::uniform_int_distribution<uint64_t> offset(0, a.fill_chain - a.window);
  for (int i = 0; i < a.ops; ++i) {
    const std::vector<BlockKey> keys = Keys(chain(rng), offset(rng), a.window);
    us.push_back(op(std::span<const BlockKey>(keys)));
  }
  return {Quantile(us, 0.50), Quantile(us, 0.99)};
}

// One daemon of the table: its size, and the connections that drive it.
struct Point {
  uint64_t blocks = 0;
  std::string socket;
  pid_t pid = 0;
  std::vector<std::unique_ptr<Client>> conns;
  uint64_t full_chains = 0;
  double fill_s = 0;
  uint64_t anon_growth = 0, rss = 0, shmem = 0;
  double index_bytes = 0;
  double marginal_bytes = 0;  // per block, of the second half of the fill
  std::vector<double> lookup_p50, lookup_p99, acquire_p50, acquire_p99;
};

// Fills `p` to its capacity; the memory figures are read once it is full.
void Fill(const Args& a, Point& p) {
  const uint64_t full_chains = p.blocks / a.fill_chain;
  if (full_chains == 0) Die("--blocks below one --fill-chain");
  p.full_chains = full_chains;
  for (int t = 0; t < a.threads; ++t) p.conns.push_back(Connect(p.socket));
  Client& one = *p.conns[0];
  // Warm-up: each session's buffers and the namespace exist before the
  // baseline; the blocks are aborted, so the fill starts from an empty tier.
  for (auto& c : p.conns) {
    auto w = c->Allocate(Keys(kWarmUpChain, 0, a.window));
    if (!w) Die("warm-up ALLOCATE: " + w.status().ToString());
    if (Status s = w->Abort(); !s.ok()) Die("warm-up ABORT: " + s.ToString());
  }
  const uint64_t anon_before = ProcStatusBytes(p.pid, "RssAnon");
  const auto start = Clock::now();
  // Half, then the rest: what the second half adds, per block, is the
  // marginal cost, free of what any index or session costs to start.
  const uint64_t half_chains = full_chains / 2;
  WriteChains(p.conns, 0, half_chains, a.fill_chain);
  const uint64_t anon_half = ProcStatusBytes(p.pid, "RssAnon");
  WriteChains(p.conns, half_chains, full_chains - half_chains, a.fill_chain);
  if (const uint64_t rest = p.blocks % a.fill_chain; rest > 0) {
    Write(one, Keys(full_chains, 0, rest));
  }
  p.fill_s = std::chrono::duration<double>(Clock::now() - start).count();
  const DaemonStats full(one);
  if (full.Number("tier.host.blocks") != static_cast<double>(p.blocks)) {
    Die("the host tier holds " + std::to_string(full.Number("tier.host.blocks")) + " blocks, not " +
        std::to_string(p.blocks));
  }
  const uint64_t anon_full = ProcStatusBytes(p.pid, "RssAnon");
  p.anon_growth = anon_full - anon_before;
  p.marginal_bytes = static_cast<double>(anon_full - anon_half) /
                     static_cast<double>(p.blocks - half_chains * a.fill_chain);
  p.rss = ProcStatusBytes(p.pid, "VmRSS");
  p.shmem = ProcStatusBytes(p.pid, "RssShmem");
  p.index_bytes = full.Number("index_bytes");
  std::fprintf(stderr, "  %lu blocks filled in %.1f s\n", static_cast<unsigned long>(p.blocks),
               p.fill_s);
}

void LookupRun(const Args& a, Point& p, std::mt19937_64& rng) {
  Client& one = *p.conns[0];
  const Latency l = TimeWindows(a, p.full_chains, rng, [&](std::span<const BlockKey> keys) {
    const auto start = Clock::now();
    auto found = one.Lookup(keys);
    const auto end = Clock::now();
    if (!found || found->tiers.size() != keys.size()) Die("LOOKUP missed a filled window");
    return std::chrono::duration<double, std::micro>(end - start).count();
  });
  p.lookup_p50.push_back(l.p50);
  p.lookup_p99.push_back(l.p99);
}

void AcquireRun(const Args& a, Point& p, std::mt19937_64& rng) {
  Client& one = *p.conns[0];
  const Latency q = TimeWindows(a, p.full_chains, rng, [&](std::span<const BlockKey> keys) {
    const auto start = Clock::now();
    auto lease = one.Acquire(keys);
    const auto end = Clock::now();
    if (!lease || lease->size() != keys.size()) Die("ACQUIRE missed a filled window");
    // Untimed, and waited for: the next ACQUIRE carries no RELEASE reply.
    if (Status s = lease->Release(); !s.ok()) Die("RELEASE: " + s.ToString());
    return std::chrono::duration<double, std::micro>(end - start).count();
  });
  p.acquire_p50.push_back(q.p50);
  p.acquire_p99.push_back(q.p99);
}

int Run(const Args& a, std::vector<Point>& points) {
  if (a.fill_chain < a.window) Die("--fill-chain below --window");
  for (Point& p : points) Fill(a, p);
  // The points' runs interleave, in an order that rotates every round, so
  // what else the machine runs meanwhile falls on every point alike.
  std::mt19937_64 rng(1);
  for (int r = 0; r < a.runs; ++r) {
    for (size_t i = 0; i < points.size(); ++i) {
      Point& p = points[(i + static_cast<size_t>(r)) % points.size()];
      LookupRun(a, p, rng);
      AcquireRun(a, p, rng);
    }
    std::fprintf(stderr, "  latency round %d of %d done\n", r + 1, a.runs);
  }
  for (const Point& p : points) {
    const Spread l50 = SpreadOf(p.lookup_p50), l99 = SpreadOf(p.lookup_p99);
    const Spread a50 = SpreadOf(p.acquire_p50), a99 = SpreadOf(p.acquire_p99);
    const double n = static_cast<double>(p.blocks);
    std::printf(
        "blocks=%lu fill_s=%.2f rss_mib=%.1f anon_bytes_per_block=%.1f "
        "marginal_bytes_per_block=%.1f shmem_mib=%.1f "
        "index_bytes_per_block=%.1f lookup_p50=%.1f lookup_p50_worst=%.1f lookup_p99=%.1f "
        "lookup_p99_worst=%.1f acquire_p50=%.1f acquire_p50_worst=%.1f acquire_p99=%.1f "
        "acquire_p99_worst=%.1f\n",
        static_cast<unsigned long>(p.blocks), p.fill_s, static_cast<double>(p.rss) / kMiB,
        static_cast<double>(p.anon_growth) / n, p.marginal_bytes,
        static_cast<double>(p.shmem) / kMiB, p.index_bytes / n, l50.median, l50.worst, l99.median,
        l99.worst, a50.median, a50.worst, a99.median, a99.worst);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Args a;
  std::vector<kvtier::bench::Point> points;
  kvtier::bench::Flags flags;
  flags.options["--point"] = [&](const std::string& v) {
    kvtier::bench::Point p;
    const size_t c1 = v.find(','), c2 = v.rfind(',');
    if (c1 == std::string::npos || c2 == c1) kvtier::bench::Die("--point N,SOCKET,PID");
    p.blocks = std::stoull(v.substr(0, c1));
    p.socket = v.substr(c1 + 1, c2 - c1 - 1);
    p.pid = std::stoi(v.substr(c2 + 1));
    points.push_back(std::move(p));
  };
  flags.options["--fill-chain"] = [&](const std::string& v) { a.fill_chain = std::stoull(v); };
  flags.options["--threads"] = [&](const std::string& v) { a.threads = std::stoi(v); };
  flags.options["--ops"] = [&](const std::string& v) { a.ops = std::stoi(v); };
  flags.options["--runs"] = [&](const std::string& v) { a.runs = std::stoi(v); };
  flags.options["--window"] = [&](const std::string& v) { a.window = std::stoull(v); };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags,
      "bench_scale_blocks --point N,SOCKET,PID [--point ...] [--fill-chain L] [--threads T] "
      "[--ops K] [--runs R] [--window W]");
  if (done >= 0) return done;
  if (points.empty() || a.threads < 1 || a.ops < 1 || a.runs < 1 || a.window < 1) {
    kvtier::bench::Die("bad arguments (at least one --point is required)");
  }
  return kvtier::bench::Run(a, points);
}

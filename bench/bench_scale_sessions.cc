// How kvtierd's costs grow with the sessions it serves (bench/scale.sh):
// one point of the table, against a running kvtierd.
//
//   bench_scale_sessions --socket S --pid PID --clients C [--seconds T]
//     [--runs R] [--keys K] [--client-busy-poll-us B]
//
// C threads, each with a connection of its own through the C++ client
// (HELLO, then LOOKUPs of one cached K-key chain, one request in flight,
// as fast as the daemon answers), for R runs of T seconds each. Per run:
// the p50 and p99 of every LOOKUP of every client, and fairness: the
// fewest LOOKUPs one client completed over the median client's. Midway
// through each run the daemon's VmRSS, open file descriptors
// (/proc/PID/fd) and threads are read. A client whose connect or call
// fails is counted (connect_failures, errors) and completes nothing after.
//
// The clients do not busy-poll by default (--client-busy-poll-us 0):
// 1,000 spinning threads on a machine of a few cores would take the
// daemon's CPU and measure the scheduler, not the daemon.
//
// Prints one line of name=value pairs (times in microseconds).
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.h"
#include "scale_util.h"

namespace kvtier::bench {
namespace {

using client::BlockKey;
using client::Client;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) { DieScale("bench_scale_sessions", what); }

struct Args {
  std::string socket;
  pid_t pid = 0;
  int clients = 1;
  double seconds = 2;
  int runs = 3;
  size_t keys = 16;
  uint32_t client_busy_poll_us = 0;
};

client::ClientOptions Options(const Args& a) {
  client::ClientOptions o;
  o.socket_path = a.socket;
  o.model = "bench-scale-sessions";
  o.layout = Layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
  o.client_name = "bench_scale_sessions";
  o.map_arenas = false;  // LOOKUPs only
  o.busy_poll_us = a.client_busy_poll_us;
  return o;
}

// One client's share of a run.
struct ClientRun {
  std::vector<float> latency_us;
  uint64_t ops = 0;
};

struct Sample {
  uint64_t rss = 0;
  uint64_t fds = 0;
  uint64_t threads = 0;
};

Sample SampleDaemon(pid_t pid) {
  return {ProcStatusBytes(pid, "VmRSS"), ProcCount(pid, "fd"), ProcCount(pid, "task")};
}

int Run(const Args& a) {
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < a.keys; ++i) keys.push_back({0x5e55'1045, i + 1});
  auto ctl = Client::Connect(Options(a));
  if (!ctl) Die("connect: " + ctl.status().ToString());
  {
    std::vector<std::byte> data(keys.size() * (*ctl)->block_bytes(), std::byte{1});
    auto put = (*ctl)->PutInline(keys, data);
    if (!put) Die("PUT: " + put.status().ToString());
  }
  const Sample base = SampleDaemon(a.pid);

  const auto clients = static_cast<size_t>(a.clients);
  std::vector<std::vector<ClientRun>> results(clients,
                                              std::vector<ClientRun>(static_cast<size_t>(a.runs)));
  std::atomic<uint64_t> errors{0}, connect_failures{0};
  // Each run's window, set by the main thread before the barrier opens it.
  std::atomic<int64_t> start_ns{0}, end_ns{0};
  std::barrier sync(static_cast<ptrdiff_t>(clients + 1));
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto conn = Client::Connect(Options(a));
      if (!conn) ++connect_failures;
      sync.arrive_and_wait();  // all connected
      bool broken = !conn;
      for (int r = 0; r < a.runs; ++r) {
        sync.arrive_and_wait();  // the run's window is set
        const Clock::time_point start{Clock::duration(start_ns.load())};
        const Clock::time_point end{Clock::duration(end_ns.load())};
        ClientRun& out = results[c][static_cast<size_t>(r)];
        while (!broken) {
          const auto sent = Clock::now();
          if (sent >= end) break;
          auto found = (*conn)->Lookup(keys);
          const auto got = Clock::now();
          if (!found || found->tiers.size() != keys.size()) {
            ++errors;
            broken = true;
            break;
          }
          if (sent >= start) {
            out.latency_us.push_back(
                static_cast<float>(std::chrono::duration<double, std::micro>(got - sent).count()));
            ++out.ops;
          }
        }
        sync.arrive_and_wait();  // the run is over
      }
    });
  }
  sync.arrive_and_wait();
  std::fprintf(stderr, "  %d clients connected (%lu failed)\n", a.clients,
               static_cast<unsigned long>(connect_failures.load()));

  std::vector<double> p50s, p99s, fairness, ops_per_s;
  Sample peak;
  // A moment's warm-up in each run: 1,000 threads take a while to wake.
  const auto warm = std::chrono::milliseconds(200);
  const auto span =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  for (int r = 0; r < a.runs; ++r) {
    const auto start = Clock::now() + warm;
    start_ns = start.time_since_epoch().count();
    end_ns = (start + span).time_since_epoch().count();
    sync.arrive_and_wait();
    std::this_thread::sleep_until(start + span / 2);
    const Sample s = SampleDaemon(a.pid);
    peak = {std::max(peak.rss, s.rss), std::max(peak.fds, s.fds),
            std::max(peak.threads, s.threads)};
    sync.arrive_and_wait();
    std::vector<double> all, per_client;
    uint64_t total = 0;
    for (size_t c = 0; c < clients; ++c) {
      const ClientRun& cr = results[c][static_cast<size_t>(r)];
      all.insert(all.end(), cr.latency_us.begin(), cr.latency_us.end());
      per_client.push_back(static_cast<double>(cr.ops));
      total += cr.ops;
    }
    p50s.push_back(Quantile(all, 0.50));
    p99s.push_back(Quantile(all, 0.99));
    const double median = Quantile(per_client, 0.50);
    const double least = *std::min_element(per_client.begin(), per_client.end());
    fairness.push_back(median > 0 ? least / median : 0);
    ops_per_s.push_back(static_cast<double>(total) / a.seconds);
    std::fprintf(stderr, "  run %d: %.0f LOOKUP/s, p99 %.1f us, min/median %.2f\n", r + 1,
                 ops_per_s.back(), p99s.back(), fairness.back());
  }
  for (std::thread& t : threads) t.join();

  const Spread p50 = SpreadOf(p50s), p99 = SpreadOf(p99s);
  const Spread fair = SpreadOf(fairness, false), ops = SpreadOf(ops_per_s, false);
  std::printf(
      "clients=%d rss_mib=%.1f rss_base_mib=%.1f fds=%lu fds_base=%lu threads=%lu "
      "ops_per_s=%.0f ops_per_s_worst=%.0f p50=%.1f p50_worst=%.1f p99=%.1f p99_worst=%.1f "
      "fairness=%.3f fairness_worst=%.3f errors=%lu connect_failures=%lu\n",
      a.clients, static_cast<double>(peak.rss) / kMiB, static_cast<double>(base.rss) / kMiB,
      static_cast<unsigned long>(peak.fds), static_cast<unsigned long>(base.fds),
      static_cast<unsigned long>(peak.threads), ops.median, ops.worst, p50.median, p50.worst,
      p99.median, p99.worst, fair.median, fair.worst, static_cast<unsigned long>(errors.load()),
      static_cast<unsigned long>(connect_failures.load()));
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Args a;
  kvtier::bench::Flags flags;
  flags.options["--socket"] = [&](const std::string& v) { a.socket = v; };
  flags.options["--pid"] = [&](const std::string& v) { a.pid = std::stoi(v); };
  flags.options["--clients"] = [&](const std::string& v) { a.clients = std::stoi(v); };
  flags.options["--seconds"] = [&](const std::string& v) { a.seconds = std::stod(v); };
  flags.options["--runs"] = [&](const std::string& v) { a.runs = std::stoi(v); };
  flags.options["--keys"] = [&](const std::string& v) { a.keys = std::stoul(v); };
  flags.options["--client-busy-poll-us"] = [&](const std::string& v) {
    a.client_busy_poll_us = static_cast<uint32_t>(std::stoul(v));
  };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags,
      "bench_scale_sessions --socket PATH --pid PID --clients C [--seconds T] [--runs R] "
      "[--keys K] [--client-busy-poll-us B]");
  if (done >= 0) return done;
  if (a.socket.empty() || a.pid <= 0 || a.clients < 1 || a.seconds <= 0 || a.runs < 1 ||
      a.keys < 1) {
    kvtier::bench::Die("bad arguments (--socket and --pid are required)");
  }
  return kvtier::bench::Run(a);
}

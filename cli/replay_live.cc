// kvtier replay --live: a trace against a running kvtierd through the real
// client with real bytes. Each request looks its prompt up, reads the cached
// prefix in place (ACQUIRE, copy out, RELEASE: checked against the bytes
// written under each key), and writes the rest (ALLOCATE, fill, COMMIT), as
// fast as possible or at the trace's own pace.
#include "cli/replay_live.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "cli/cli_common.h"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct OpTimes {
  std::vector<double> us;
  double Percentile(double p) {
    if (us.empty()) return 0;
    const size_t i =
        std::min(us.size() - 1, static_cast<size_t>(p * static_cast<double>(us.size())));
    std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(i), us.end());
    return us[i];
  }
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

}  // namespace

int RunLive(const replay::Trace& trace, const LiveOptions& o) {
  ConnectFlags flags = o.conn;
  // A layout of about the requested block size at the trace's block tokens.
  flags.block_tokens = trace.block_tokens;
  flags.layers = 1;
  flags.kv_heads = 1;
  flags.dtype = "fp16";
  flags.kind = "kv";
  flags.head_dim = static_cast<uint32_t>(
      std::max<uint64_t>(1, o.block_bytes / (4 * static_cast<uint64_t>(trace.block_tokens))));
  auto c = Connect(flags, /*map_arenas=*/true);
  if (!c) return Fail(c.status());
  client::Client& cl = **c;
  const uint64_t bb = cl.block_bytes();
  std::fprintf(stderr, "live replay of %zu requests against %s, %llu-byte blocks%s\n",
               trace.requests.size(), cl.options().socket_path.c_str(),
               static_cast<unsigned long long>(bb), o.trace_speed ? ", at trace speed" : "");

  OpTimes lookup, read, write;
  uint64_t refs = 0, hits = 0, wrong = 0, errors = 0;
  std::vector<client::BlockKey> keys;
  std::vector<std::byte> buffer(bb);
  const auto start = Clock::now();
  const uint64_t every = std::max<uint64_t>(1, trace.requests.size() / 100);
  for (size_t n = 0; n < trace.requests.size(); ++n) {
    const replay::TraceRequest& r = trace.requests[n];
    if (o.trace_speed) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(r.time_s)));
    }
    keys.clear();
    for (uint32_t b : r.blocks) {
      keys.push_back(client::BlockKey{uint64_t{trace.blocks[b].file} + 1, trace.blocks[b].id});
    }
    refs += keys.size();
    // The daemon caps keys per request; long prompts are looked up in part.
    const auto span = std::span(keys).first(std::min<size_t>(keys.size(), cl.session().max_keys));
    auto t = Clock::now();
    auto found = cl.Lookup(span);
    lookup.us.push_back(Since(t));
    if (!found) {
      ++errors;
      continue;
    }
    const size_t h = found->tiers.size();
    hits += h;
    if (h > 0) {
      t = Clock::now();
      auto lease = cl.Acquire(span.first(h));
      if (lease) {
        for (size_t i = 0; i < lease->size(); ++i) {
          std::memcpy(buffer.data(), lease->Bytes(i).data(), bb);
          if (!MatchesPattern(span[i], buffer)) ++wrong;
        }
        lease->Release().IgnoreError();  // a socket error shows in the next call
      } else {
        ++errors;
      }
      read.us.push_back(Since(t));
    }
    if (h < span.size()) {
      t = Clock::now();
      std::optional<client::BlockKey> parent;
      if (h > 0) parent = span[h - 1];
      auto w = cl.Allocate(span.subspan(h), parent);
      if (w) {
        for (size_t i = 0; i < w->size(); ++i) {
          if (w->state(i) == client::WireWriteState::kAllocated)
            FillPattern(span[h + i], w->Bytes(i));
        }
        if (!w->Commit().ok()) ++errors;
      } else if (w.status().code() != StatusCode::kResourceExhausted &&
                 w.status().code() != StatusCode::kNotFound) {
        ++errors;
      }
      write.us.push_back(Since(t));
    }
    if (!o.quiet && (n + 1) % every == 0) {
      std::fprintf(stderr, "\r%5.1f%% of requests",
                   100.0 * static_cast<double>(n + 1) / static_cast<double>(trace.requests.size()));
    }
  }
  if (!o.quiet) std::fprintf(stderr, "\n");
  const double seconds = Since(start) / 1e6;
  std::printf(
      "requests %zu in %.2f s: %.0f requests/s, block hit rate %.4f, %llu wrong bytes, "
      "%llu errors\n",
      trace.requests.size(), seconds, static_cast<double>(trace.requests.size()) / seconds,
      refs == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(refs),
      static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(errors));
  std::printf("%-26s %10s %10s %10s\n", "operation", "ops/s", "p50 us", "p99 us");
  for (auto& [name, times] : {std::pair<const char*, OpTimes*>{"lookup", &lookup},
                              {"acquire+copy+release", &read},
                              {"allocate+fill+commit", &write}}) {
    const double ops = static_cast<double>(times->us.size()) / seconds;
    std::printf("%-26s %10.0f %10.1f %10.1f\n", name, ops, times->Percentile(0.5),
                times->Percentile(0.99));
  }
  return wrong == 0 && errors == 0 ? 0 : 2;
}

}  // namespace kvtier::cli

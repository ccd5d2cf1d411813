// What kvtierd reports about itself: per-operation request statistics, a
// snapshot of every figure at one instant, that snapshot as STATS entries,
// and the Prometheus endpoint that serves it (docs/metrics.md lists every
// metric; DESIGN.md §7).
//
// One source for both views: STATS (`kvtier stats`) and /metrics are built
// from the same DaemonSnapshot, taken on the engine's thread, so the two
// never disagree and the hot path takes no lock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "engine/cache_engine.h"
#include "protocol/wire.h"

namespace kvtier::daemon {

// Upper bounds of the request latency buckets, in nanoseconds: 5 us to 1 s,
// 1-2.5-5 steps (a LOOKUP takes microseconds, an inline GET of a large
// block or a promotion from the SSD milliseconds). Above 1 s: +Inf.
inline constexpr std::array<uint64_t, 17> kLatencyBoundsNs = {
    5'000,      10'000,      25'000,      50'000,      100'000,      250'000,
    500'000,    1'000'000,   2'500'000,   5'000'000,   10'000'000,   25'000'000,
    50'000'000, 100'000'000, 250'000'000, 500'000'000, 1'000'000'000};

// Opcodes are 1..kNumOpcodes (protocol/wire.h).
inline constexpr size_t kNumOpcodes = 14;
static_assert(static_cast<size_t>(protocol::Opcode::kTouch) == kNumOpcodes,
              "a new opcode needs its place in RequestStats");

// One operation's requests: count, errors, and a latency histogram.
struct OpStats {
  uint64_t requests = 0;
  uint64_t errors = 0;  // answered with an error status
  uint64_t latency_sum_ns = 0;
  // buckets[i]: requests with latency <= kLatencyBoundsNs[i] and above the
  // bound before (not cumulative); the last counts those above 1 s.
  std::array<uint64_t, kLatencyBoundsNs.size() + 1> buckets{};
};

// Per-operation request statistics. Thread-compatible: written by the
// engine's thread only; readers get a copy inside a DaemonSnapshot.
class RequestStats {
 public:
  // Counts one request of `op`, from its decoded frame to its encoded reply.
  void Record(protocol::Opcode op, std::chrono::nanoseconds latency, bool ok);
  // REQUIRES: op is a known opcode.
  const OpStats& of(protocol::Opcode op) const { return ops_[Index(op)]; }

 private:
  static size_t Index(protocol::Opcode op) { return static_cast<size_t>(op) - 1; }
  std::array<OpStats, kNumOpcodes> ops_{};
};

// Why kvtierd turned a worker away or cut it off. Each is also logged (a
// line per kind per 10 s at most); these count every one.
enum class Refusal : size_t {
  kPermissionDenied,  // not on server.allow_uids / allow_gids
  kMaxSessions,       // server.max_sessions open already
  kMaxLeases,         // an ACQUIRE past server.max_leases_per_session
  kMaxAllocations,    // an ALLOCATE past server.max_allocations_per_session
  kMaxNamespaces,     // a HELLO naming a new namespace past server.max_namespaces
  kHelloTimeout,      // no HELLO within server.hello_timeout_ms
  kFrameTimeout,      // a request frame slower than server.frame_timeout_ms
  kReplyTimeout,      // a reply unread for server.reply_timeout_ms
  kMaxHinted,         // a HINT past server.max_hinted_blocks_per_session
};
inline constexpr size_t kNumRefusals = 9;
// The metrics label and STATS name of a refusal: "permission_denied",
// "max_sessions", ..., "reply_timeout".
std::string RefusalLabel(Refusal why);

// Every figure kvtierd reports, at one instant. Taken on the engine's thread.
struct DaemonSnapshot {
  engine::EngineStats engine;
  uint64_t sessions = 0;         // connections open now
  uint64_t sessions_opened = 0;  // since start
  uint64_t requests = 0;
  uint64_t request_errors = 0;
  uint64_t protocol_errors = 0;                   // malformed frames (their connection was closed)
  std::array<uint64_t, kNumRefusals> refusals{};  // by Refusal
  RequestStats ops;
  // The KV-event publisher ([events]); absent when events are off.
  struct Events {
    uint64_t batches_published = 0;
    uint64_t events_published = 0;
    uint64_t batches_dropped = 0;
    uint64_t replay_requests = 0;
  };
  std::optional<Events> events;
};

// The lower-case name of an opcode, as metrics label it: "lookup", "set_retention".
std::string OpLabel(protocol::Opcode op);

// The snapshot as STATS entries: name -> value, both text. Names are
// stable (scripts read them); docs/metrics.md maps each metric to its entry.
std::vector<std::pair<std::string, std::string>> StatsEntries(const DaemonSnapshot& snapshot);

// The HTTP endpoint Prometheus scrapes: GET /metrics on `address`, in the
// text exposition format. Each scrape takes a fresh snapshot on the
// engine's thread (through `post`) and waits for it at most a few seconds;
// if the engine's thread does not answer in time the scrape gets the last
// snapshot taken.
//
// Thread-safety: scrapes run on the server's own threads; the snapshot is
// taken only by the function `post` hands to the engine's thread.
class MetricsServer {
 public:
  // Runs `task` on the engine's thread, some time later. Thread-safe.
  using Post = std::function<void(std::function<void()> task)>;
  // Takes the snapshot; called on the engine's thread only.
  using Snapshot = std::function<DaemonSnapshot()>;

  // Starts serving. Unavailable when `address` cannot be bound.
  // `post` and `snapshot` must stay callable until the server is destroyed.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& address, Post post,
                                                      Snapshot snapshot);
  // Stops serving; waits for scrapes in flight (about 2 s: the HTTP
  // server's threads poll for the stop).
  ~MetricsServer();

  // The address being served, with the port actually bound ("127.0.0.1:9464").
  const std::string& address() const { return address_; }

 private:
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl, std::string address);
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

// The text exposition of `snapshot` (what /metrics serves, minus the HTTP
// server's own exposer_* metrics). For tests and tools.
std::string ExpositionText(const DaemonSnapshot& snapshot);

}  // namespace kvtier::daemon

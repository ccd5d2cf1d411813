#include "daemon/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <type_traits>

#include "daemon/config.h"

namespace kvtier::daemon {
namespace {

using engine::TierStats;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using protocol::Opcode;

// How long a scrape waits for the engine's thread to take a snapshot.
constexpr auto kSnapshotWait = std::chrono::seconds(3);

Opcode OpAt(size_t i) { return static_cast<Opcode>(i + 1); }

template <typename T>
std::string Text(T value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Appends `item` to a comma-separated list. (Not `"," + Text(...)`: for a
// literal plus a temporary string g++ 12 at -O3 reports a false -Wrestrict
// inside char_traits.h, GCC bug 105651.)
void AppendListItem(std::string* list, const std::string& item) {
  if (!list->empty()) *list += ',';
  *list += item;
}

// Builds metric families in the order added: one per name, with its samples.
class Families {
 public:
  explicit Families(const DaemonSnapshot& s) : s_(s) {}

  void Scalar(const char* name, MetricType type, const char* help, double value) {
    MetricFamily& f = Add(name, type, help);
    f.metric.push_back(Sample(type, value, {}));
  }

  // One sample per present tier, labelled tier="device|host|ssd".
  template <typename F>
  void PerTier(const char* name, MetricType type, const char* help, F value) {
    MetricFamily& f = Add(name, type, help);
    for (const TierStats& t : s_.engine.tiers) {
      if (!t.present) continue;
      f.metric.push_back(Sample(type, static_cast<double>(value(t)),
                                {{"tier", std::string(tiers::TierKindName(t.kind))}}));
    }
  }

  // One sample per candidate of each tier's adaptive policy, labelled
  // tier= and candidate=.
  template <typename F>
  void PerCandidate(const char* name, MetricType type, const char* help, F value) {
    MetricFamily& f = Add(name, type, help);
    for (const TierStats& t : s_.engine.tiers) {
      if (!t.present || !t.adaptive) continue;
      for (const eviction::CandidateReport& c : t.adaptive->candidates) {
        f.metric.push_back(
            Sample(type, value(c),
                   {{"tier", std::string(tiers::TierKindName(t.kind))}, {"candidate", c.name}}));
      }
    }
  }

  // One sample of 1 per present tier, labelled tier= and policy=.
  void PolicyInfo(const char* name, const char* help) {
    MetricFamily& f = Add(name, MetricType::Gauge, help);
    for (const TierStats& t : s_.engine.tiers) {
      if (!t.present) continue;
      f.metric.push_back(
          Sample(MetricType::Gauge, 1,
                 {{"tier", std::string(tiers::TierKindName(t.kind))}, {"policy", t.policy}}));
    }
  }

  // One sample per operation, labelled op="lookup" etc.
  template <typename F>
  void PerOp(const char* name, MetricType type, const char* help, F value) {
    MetricFamily& f = Add(name, type, help);
    for (size_t i = 0; i < kNumOpcodes; ++i) {
      f.metric.push_back(
          Sample(type, static_cast<double>(value(s_.ops.of(OpAt(i)))), {{"op", OpLabel(OpAt(i))}}));
    }
  }

  // One counter per Refusal, labelled reason="max_sessions" etc.
  void PerRefusal(const char* name, const char* help) {
    MetricFamily& f = Add(name, MetricType::Counter, help);
    for (size_t i = 0; i < kNumRefusals; ++i) {
      f.metric.push_back(Sample(MetricType::Counter, static_cast<double>(s_.refusals[i]),
                                {{"reason", RefusalLabel(static_cast<Refusal>(i))}}));
    }
  }

  // One counter per way a hint's protection ended, labelled outcome=.
  void HintOutcomes(const char* name, const char* help) {
    MetricFamily& f = Add(name, MetricType::Counter, help);
    const engine::EngineStats& e = s_.engine;
    for (const auto& [outcome, n] :
         {std::pair{"used", e.hints_used}, std::pair{"expired", e.hints_expired},
          std::pair{"yielded", e.hints_yielded}, std::pair{"withdrawn", e.hints_withdrawn}}) {
      f.metric.push_back(
          Sample(MetricType::Counter, static_cast<double>(n), {{"outcome", outcome}}));
    }
  }

  // One sample per (label value, count) pair.
  void Labelled(const char* name, MetricType type, const char* help, const char* label,
                std::initializer_list<std::pair<const char*, uint64_t>> values) {
    MetricFamily& f = Add(name, type, help);
    for (const auto& [value, n] : values) {
      f.metric.push_back(Sample(type, static_cast<double>(n), {{label, value}}));
    }
  }

  // One sample per namespace and label value, labelled namespace= (its id),
  // model= and `label`; `values(use)` gives the (label value, tokens) pairs.
  template <typename F>
  void PerNamespace(const char* name, const char* help, const char* label, F values) {
    MetricFamily& f = Add(name, MetricType::Counter, help);
    const auto& uses = s_.engine.namespace_use;
    for (size_t ns = 0; ns < uses.size(); ++ns) {
      for (const auto& [value, tokens] : values(uses[ns])) {
        f.metric.push_back(
            Sample(MetricType::Counter, static_cast<double>(tokens),
                   {{"namespace", std::to_string(ns)}, {"model", uses[ns].model}, {label, value}}));
      }
    }
  }

  void LatencyHistogram(const char* name, const char* help) {
    MetricFamily& f = Add(name, MetricType::Histogram, help);
    for (size_t i = 0; i < kNumOpcodes; ++i) {
      const OpStats& op = s_.ops.of(OpAt(i));
      ClientMetric m;
      m.label = {{"op", OpLabel(OpAt(i))}};
      m.histogram.sample_count = op.requests;
      m.histogram.sample_sum = static_cast<double>(op.latency_sum_ns) / 1e9;
      uint64_t cumulative = 0;
      for (size_t b = 0; b < kLatencyBoundsNs.size(); ++b) {
        cumulative += op.buckets[b];
        m.histogram.bucket.push_back({cumulative, static_cast<double>(kLatencyBoundsNs[b]) / 1e9});
      }
      m.histogram.bucket.push_back({op.requests, std::numeric_limits<double>::infinity()});
      f.metric.push_back(std::move(m));
    }
  }

  // One sample per (label value, number) pair, given as a map.
  template <typename Key>
  void ByLabel(const char* name, MetricType type, const char* help, const char* label,
               const std::map<Key, uint64_t>& values) {
    MetricFamily& f = Add(name, type, help);
    for (const auto& [value, n] : values) {
      std::string text;
      if constexpr (std::is_same_v<Key, std::string>) {
        text = value;
      } else {
        text = std::to_string(value);
      }
      f.metric.push_back(Sample(type, static_cast<double>(n), {{label, text}}));
    }
  }

  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  MetricFamily& Add(const char* name, MetricType type, const char* help) {
    families_.push_back(MetricFamily{name, help, type, {}});
    return families_.back();
  }
  static ClientMetric Sample(MetricType type, double value,
                             std::vector<ClientMetric::Label> labels) {
    ClientMetric m;
    m.label = std::move(labels);
    if (type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    return m;
  }

  const DaemonSnapshot& s_;
  std::vector<MetricFamily> families_;
};

std::vector<MetricFamily> BuildFamilies(const DaemonSnapshot& s) {
  constexpr MetricType kCounter = MetricType::Counter;
  constexpr MetricType kGauge = MetricType::Gauge;
  const engine::EngineStats& e = s.engine;
  Families f(s);
  // First: BuildFamilies labels it with the version below.
  f.Scalar("kvtier_build_info", kGauge, "Always 1; the version label says which kvtierd runs", 1);
  // Requests.
  f.LatencyHistogram("kvtier_request_duration_seconds",
                     "Time from a decoded request to its encoded reply, per operation");
  f.PerOp("kvtier_request_errors_total", kCounter, "Requests answered with an error, per operation",
          [](const OpStats& o) { return o.errors; });
  f.Scalar("kvtier_protocol_errors_total", kCounter, "Malformed frames; each closed its connection",
           static_cast<double>(s.protocol_errors));
  f.PerRefusal("kvtier_refusals_total",
               "Workers turned away or cut off by a limit, a deadline or the allow lists, "
               "per reason (server.* key)");
  // Sessions, leases, open writes.
  f.Scalar("kvtier_sessions", kGauge, "Worker connections open now",
           static_cast<double>(s.sessions));
  f.Scalar("kvtier_sessions_opened_total", kCounter, "Worker connections accepted since start",
           static_cast<double>(s.sessions_opened));
  f.Scalar("kvtier_leases", kGauge, "Read leases held now (pinned blocks being read)",
           static_cast<double>(e.open_leases));
  f.Scalar("kvtier_allocations", kGauge, "Writes allocated and not yet committed or aborted",
           static_cast<double>(e.open_allocations));
  f.Scalar("kvtier_pending_blocks", kGauge, "Blocks allocated and not yet committed",
           static_cast<double>(e.pending_blocks));
  f.Scalar("kvtier_namespaces", kGauge, "Namespaces registered", static_cast<double>(e.namespaces));
  f.Scalar("kvtier_index_entries", kGauge, "Blocks in the prefix index, all tiers",
           static_cast<double>(e.index_entries));
  f.Scalar("kvtier_index_bytes", kGauge, "Memory of the prefix index",
           static_cast<double>(e.index_bytes));
  // Lookups and hits.
  f.Scalar("kvtier_lookups_total", kCounter, "LOOKUP requests served",
           static_cast<double>(e.lookups));
  f.Scalar("kvtier_lookup_blocks_total", kCounter, "Blocks (keys) asked for by lookups",
           static_cast<double>(e.lookup_keys));
  f.PerTier("kvtier_lookup_hit_blocks_total", kCounter,
            "Blocks of a looked-up prefix found, by the tier they were in",
            [](const TierStats& t) { return t.lookup_hits; });
  {
    // Misses at each level of the hierarchy: looked-up blocks found neither
    // in this tier nor in a faster one (the last tier's: found nowhere).
    uint64_t found = 0;
    std::array<uint64_t, tiers::kNumTierKinds> missed{};
    for (const TierStats& t : e.tiers) {
      found += t.lookup_hits;
      missed[static_cast<size_t>(t.kind)] = e.lookup_keys - std::min(found, e.lookup_keys);
    }
    f.PerTier("kvtier_lookup_missed_blocks_total", kCounter,
              "Looked-up blocks found neither in this tier nor in a faster one",
              [&](const TierStats& t) { return missed[static_cast<size_t>(t.kind)]; });
  }
  f.PerTier("kvtier_acquire_hit_blocks_total", kCounter,
            "Blocks found by ACQUIRE and GET, by the tier they were in before any promotion",
            [](const TierStats& t) { return t.hits; });
  f.Scalar("kvtier_acquired_blocks_total", kCounter, "Blocks handed to workers in read leases",
           static_cast<double>(e.acquired_blocks));
  f.Scalar("kvtier_prefix_tokens_saved_total", kCounter,
           "Prompt tokens whose KV was read from the cache instead of recomputed",
           static_cast<double>(e.acquired_tokens));
  // Per namespace, in tokens: where its hits came from, why its misses missed.
  f.PerNamespace("kvtier_namespace_hit_tokens_total",
                 "Tokens of blocks acquires found, by namespace and the tier they were in", "tier",
                 [&e](const engine::NamespaceUse& u) {
                   std::vector<std::pair<std::string, uint64_t>> out;
                   for (const TierStats& t : e.tiers) {
                     if (!t.present) continue;
                     out.emplace_back(std::string(tiers::TierKindName(t.kind)),
                                      u.hit_blocks[static_cast<size_t>(t.kind)] * u.block_tokens);
                   }
                   if (e.remote_present) {
                     out.emplace_back("remote",
                                      u.hit_blocks[static_cast<size_t>(tiers::TierKind::kRemote)] *
                                          u.block_tokens);
                   }
                   return out;
                 });
  f.PerNamespace("kvtier_namespace_missed_tokens_total",
                 "Tokens of looked-up blocks not cached, or found and not loaded, by namespace "
                 "and reason",
                 "reason", [](const engine::NamespaceUse& u) {
                   return std::vector<std::pair<std::string, uint64_t>>{
                       {"never_stored", u.missed_never_stored * u.block_tokens},
                       {"evicted", u.missed_evicted * u.block_tokens},
                       {"failed_load", u.failed_loads * u.block_tokens}};
                 });
  // Writes.
  f.Scalar("kvtier_committed_blocks_total", kCounter, "Blocks written and published",
           static_cast<double>(e.committed_blocks));
  f.Scalar("kvtier_aborted_blocks_total", kCounter, "Blocks allocated, then aborted",
           static_cast<double>(e.aborted_blocks));
  f.Scalar("kvtier_removed_blocks_total", kCounter, "Blocks removed by REMOVE",
           static_cast<double>(e.removed_blocks));
  // Tiers.
  f.PerTier("kvtier_tier_capacity_bytes", kGauge, "Configured capacity of the tier",
            [](const TierStats& t) { return t.capacity_bytes; });
  f.PerTier("kvtier_tier_used_bytes", kGauge, "Slot bytes reserved by the tier's blocks",
            [](const TierStats& t) { return t.used_bytes; });
  f.PerTier("kvtier_tier_blocks", kGauge, "Blocks in the tier, committed and being written",
            [](const TierStats& t) { return t.blocks; });
  f.PerTier("kvtier_tier_pinned_blocks", kGauge, "Blocks in the tier pinned by leases or writes",
            [](const TierStats& t) { return t.pinned_blocks; });
  // Movement.
  f.PerTier("kvtier_evictions_total", kCounter,
            "Blocks evicted from the tier to make room (demoted or dropped)",
            [](const TierStats& t) { return t.evictions; });
  f.PerTier("kvtier_admission_refused_blocks_total", kCounter,
            "Blocks the tier's admission filter kept out of it (their writes skipped them)",
            [](const TierStats& t) { return t.admission_refused; });
  f.PerTier("kvtier_demotions_total", kCounter, "Blocks that arrived in the tier from a faster one",
            [](const TierStats& t) { return t.demotions_in; });
  f.PerTier("kvtier_promotions_total", kCounter,
            "Blocks that arrived in the tier from a slower one",
            [](const TierStats& t) { return t.promotions_in; });
  f.PerTier("kvtier_moved_bytes_total", kCounter,
            "Bytes copied into the tier by demotions and promotions",
            [](const TierStats& t) { return t.bytes_in; });
  // Eviction policies.
  f.PolicyInfo("kvtier_eviction_policy_info", "The tier's eviction policy (always 1)");
  f.PerCandidate("kvtier_eviction_candidate_followed", kGauge,
                 "1 for the candidate the tier's adaptive policy follows, 0 for the others",
                 [](const eviction::CandidateReport& c) { return c.followed ? 1.0 : 0.0; });
  f.PerCandidate("kvtier_eviction_candidate_sampled_hit_ratio", kGauge,
                 "Recent block hit rate of the candidate's miniature cache on the sampled keys",
                 [](const eviction::CandidateReport& c) { return c.sampled_hit_rate; });
  f.PerTier("kvtier_eviction_policy_switches_total", kCounter,
            "Times the tier's adaptive policy changed the candidate it follows (0: fixed policy)",
            [](const TierStats& t) { return t.adaptive ? t.adaptive->switches : 0; });
  f.Scalar("kvtier_dropped_blocks_total", kCounter,
           "Blocks that left the last tier (evicted, or orphaned by a dropped parent)",
           static_cast<double>(e.dropped_blocks));
  f.Scalar("kvtier_orphan_dropped_blocks_total", kCounter,
           "Dropped blocks that went because an ancestor went (they could never hit again)",
           static_cast<double>(e.orphan_drops));
  f.Scalar("kvtier_demotions_dropped_total", kCounter,
           "Evicted blocks dropped instead of demoted (no room, I/O queue full, SSD paused)",
           static_cast<double>(e.demotions_dropped));
  f.Scalar("kvtier_moves_in_flight", kGauge, "Asynchronous moves to or from the SSD under way",
           static_cast<double>(e.moves_in_flight));
  // Errors and the SSD tier.
  f.Scalar("kvtier_checksum_failures_total", kCounter,
           "Blocks read back from the SSD that failed their check (checksum or seal): dropped, "
           "never served",
           static_cast<double>(e.checksum_failures));
  f.ByLabel("kvtier_ssd_rejected_blocks_total", kCounter,
            "Blocks read back from the SSD and refused (the checksum failures), by cause: record "
            "(with block keys: not the record written, i.e. replaced or replayed, missing, or in "
            "the clear), seal (does not open: changed bytes, another block's, a wrong key), "
            "checksum (without block keys: the bytes changed)",
            "cause", e.ssd_rejected_by_cause);
  f.ByLabel("kvtier_ssd_sealed_blocks", kGauge,
            "Blocks on the SSD by the block key that sealed them (with block keys): after a "
            "rotation, those under the old key drain as they are evicted or rewritten; remove the "
            "old key once it has none",
            "key", e.ssd_sealed_by_key);
  f.Scalar("kvtier_io_errors_total", kCounter, "Failed reads and writes of the SSD tier",
           static_cast<double>(e.io_errors));
  f.Scalar("kvtier_ssd_paused", kGauge, "1 while demotions to the SSD are paused after an error",
           e.ssd_paused ? 1 : 0);
  f.Scalar("kvtier_ssd_stale_records_total", kCounter,
           "SSD index records left behind because the I/O queue was full (harmless)",
           static_cast<double>(e.stale_records));
  f.Scalar("kvtier_quantized_blocks_total", kCounter,
           "Blocks encoded to fp8 on their way to the SSD or the remote tier (quantize_lower)",
           static_cast<double>(e.quantized_blocks));
  f.Scalar("kvtier_dequantized_blocks_total", kCounter,
           "Blocks restored from fp8 on their way up from the SSD or the remote tier",
           static_cast<double>(e.dequantized_blocks));
  f.Scalar("kvtier_quantize_refused_total", kCounter,
           "Blocks holding NaN or infinity, not kept below memory (quantize_lower)",
           static_cast<double>(e.quantize_refused));
  f.Scalar("kvtier_ssd_shadow_blocks", kGauge,
           "Write-through copies on the SSD of blocks that live in memory",
           static_cast<double>(e.shadow_blocks));
  f.Scalar("kvtier_ssd_write_budget_refused_blocks_total", kCounter,
           "Blocks not written to the SSD because its write budget per day was spent",
           static_cast<double>(e.ssd_budget_refused));
  f.Scalar("kvtier_ssd_write_through_skipped_total", kCounter,
           "Committed blocks not written through (SSD full or paused)",
           static_cast<double>(e.write_through_skipped));
  // Hints.
  f.Scalar("kvtier_hinted_blocks_total", kCounter,
           "Cached blocks a worker's HINT began to protect (requests it will run soon)",
           static_cast<double>(e.hinted_blocks));
  f.Scalar("kvtier_hinted_blocks", kGauge, "Blocks protected by hints now",
           static_cast<double>(e.hinted_now));
  f.HintOutcomes("kvtier_hint_outcomes_total",
                 "How the protection of hinted blocks ended: used (acquired while protected), "
                 "expired, yielded (a write needed the room), withdrawn (by the worker, its "
                 "session's end, or the block removed)");
  f.Scalar(
      "kvtier_prefetched_blocks_total", kCounter,
      "Hinted blocks read from the SSD or the remote tier into the host ahead of their request",
      static_cast<double>(e.prefetched_blocks));
  f.Scalar("kvtier_prefetched_used_blocks_total", kCounter,
           "Prefetched blocks acquired afterwards (the prefetch saved the request a disk read)",
           static_cast<double>(e.prefetched_used));
  // The remote tier (only with one).
  if (e.remote_present) {
    const tiers::RemoteStats& r = e.remote;
    f.Scalar("kvtier_remote_paused", kGauge,
             "1 while the remote tier is paused after a failure (lookups miss, writes drop)",
             r.paused ? 1 : 0);
    f.Scalar("kvtier_remote_pauses_total", kCounter, "Times the remote tier paused",
             static_cast<double>(r.pauses));
    f.Scalar("kvtier_remote_errors_total", kCounter,
             "Remote calls the cluster failed (unreachable, timeouts, CLUSTERDOWN)",
             static_cast<double>(r.errors));
    f.Scalar("kvtier_remote_lookup_hit_blocks_total", kCounter,
             "Looked-up blocks found only in the remote tier",
             static_cast<double>(e.remote_lookup_hits));
    f.Labelled("kvtier_remote_read_blocks_total", kCounter,
               "Blocks read from the remote tier, by outcome: hit (verified and served), miss "
               "(absent), corrupt (not exactly the block: a miss)",
               "outcome", {{"hit", r.read_hits}, {"miss", r.read_misses}, {"corrupt", r.corrupt}});
    f.Labelled("kvtier_remote_rejected_blocks_total", kCounter,
               "Values the remote tier read back and refused (each a miss), by cause: sealing "
               "(in the clear where this node seals, sealed where it does not, or under a key "
               "it does not hold), stale (older than remote.max_age_s), other (another block's "
               "value, changed bytes, garbage)",
               "cause",
               {{"sealing", r.corrupt_sealing},
                {"stale", r.corrupt_stale},
                {"other", r.corrupt - r.corrupt_sealing - r.corrupt_stale}});
    f.Scalar("kvtier_remote_written_blocks_total", kCounter,
             "Blocks this node wrote to the remote tier", static_cast<double>(r.writes));
    f.Scalar("kvtier_remote_write_dropped_blocks_total", kCounter,
             "Blocks not written to the remote tier: its queue full, paused, full or failing",
             static_cast<double>(e.remote_write_dropped));
    f.Labelled("kvtier_remote_bytes_total", kCounter,
               "Block payload bytes moved to and from the remote tier", "direction",
               {{"read", r.bytes_read}, {"written", r.bytes_written}});
    f.Scalar("kvtier_remote_in_flight", kGauge, "Remote calls queued or running now",
             static_cast<double>(e.remote_in_flight));
  }
  // KV events (only when on).
  if (s.events) {
    f.Labelled(
        "kvtier_events_batches_total", kCounter,
        "KV-event batches, by outcome: published (numbered and sent) or dropped (the "
        "publisher's queue full)",
        "outcome",
        {{"published", s.events->batches_published}, {"dropped", s.events->batches_dropped}});
    f.Scalar("kvtier_events_total", kCounter, "Events in the published batches",
             static_cast<double>(s.events->events_published));
    f.Scalar("kvtier_events_replay_requests_total", kCounter, "Replay requests answered",
             static_cast<double>(s.events->replay_requests));
  }
  std::vector<MetricFamily> out = f.Take();
  out.front().metric.front().label = {{"version", Version()}};
  return out;
}

// Collected at each scrape, on the HTTP server's thread.
class Collector : public prometheus::Collectable {
 public:
  Collector(MetricsServer::Post post, MetricsServer::Snapshot snapshot)
      : post_(std::move(post)), snapshot_(std::move(snapshot)) {}

  std::vector<MetricFamily> Collect() const override {
    auto promise = std::make_shared<std::promise<DaemonSnapshot>>();
    std::future<DaemonSnapshot> future = promise->get_future();
    // The task may run after this scrape gave up; it owns what it touches.
    post_([promise, snapshot = snapshot_] { promise->set_value(snapshot()); });
    std::lock_guard lock(mutex_);
    if (future.wait_for(kSnapshotWait) == std::future_status::ready) last_ = future.get();
    if (!last_) return {};
    return BuildFamilies(*last_);
  }

 private:
  MetricsServer::Post post_;
  MetricsServer::Snapshot snapshot_;
  mutable std::mutex mutex_;
  mutable std::optional<DaemonSnapshot> last_;  // guarded by mutex_
};

void Add(std::vector<std::pair<std::string, std::string>>* out, std::string name,
         const std::string& value) {
  out->emplace_back(std::move(name), value);
}

}  // namespace

void RequestStats::Record(Opcode op, std::chrono::nanoseconds latency, bool ok) {
  const size_t i = Index(op);
  if (i >= ops_.size()) return;
  OpStats& s = ops_[i];
  ++s.requests;
  if (!ok) ++s.errors;
  const auto ns = static_cast<uint64_t>(std::max<int64_t>(0, latency.count()));
  s.latency_sum_ns += ns;
  const auto* b = std::lower_bound(kLatencyBoundsNs.begin(), kLatencyBoundsNs.end(), ns);
  ++s.buckets[static_cast<size_t>(b - kLatencyBoundsNs.begin())];
}

std::string RefusalLabel(Refusal why) {
  switch (why) {
    case Refusal::kPermissionDenied:
      return "permission_denied";
    case Refusal::kMaxSessions:
      return "max_sessions";
    case Refusal::kMaxLeases:
      return "max_leases_per_session";
    case Refusal::kMaxAllocations:
      return "max_allocations_per_session";
    case Refusal::kMaxNamespaces:
      return "max_namespaces";
    case Refusal::kHelloTimeout:
      return "hello_timeout";
    case Refusal::kFrameTimeout:
      return "frame_timeout";
    case Refusal::kReplyTimeout:
      return "reply_timeout";
    case Refusal::kMaxHinted:
      return "max_hinted_blocks_per_session";
  }
  return "unknown";
}

std::string OpLabel(Opcode op) {
  std::string name(protocol::OpcodeName(op));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::vector<std::pair<std::string, std::string>> StatsEntries(const DaemonSnapshot& s) {
  const engine::EngineStats& st = s.engine;
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string name, auto value) { Add(&out, std::move(name), Text(value)); };
  add("version", Version());
  add("pid", static_cast<uint64_t>(::getpid()));
  add("sessions", s.sessions);
  add("sessions_opened", s.sessions_opened);
  add("requests", s.requests);
  add("request_errors", s.request_errors);
  add("protocol_errors", s.protocol_errors);
  for (size_t i = 0; i < kNumRefusals; ++i) {
    add("refused." + RefusalLabel(static_cast<Refusal>(i)), s.refusals[i]);
  }
  add("namespaces", st.namespaces);
  add("index_entries", st.index_entries);
  add("index_bytes", st.index_bytes);
  add("pending_blocks", st.pending_blocks);
  add("open_allocations", st.open_allocations);
  add("open_leases", st.open_leases);
  add("lookups", st.lookups);
  add("lookup_keys", st.lookup_keys);
  add("lookup_hits", st.lookup_hits);
  add("acquired_blocks", st.acquired_blocks);
  add("prefix_tokens_saved", st.acquired_tokens);
  for (size_t ns = 0; ns < st.namespace_use.size(); ++ns) {
    const engine::NamespaceUse& u = st.namespace_use[ns];
    const std::string p = "namespace." + std::to_string(ns) + ".";
    for (const TierStats& t : st.tiers) {
      if (!t.present) continue;
      add(p + "hit_tokens." + std::string(tiers::TierKindName(t.kind)),
          u.hit_blocks[static_cast<size_t>(t.kind)] * u.block_tokens);
    }
    if (st.remote_present) {
      add(p + "hit_tokens.remote",
          u.hit_blocks[static_cast<size_t>(tiers::TierKind::kRemote)] * u.block_tokens);
    }
    add(p + "missed_tokens.never_stored", u.missed_never_stored * u.block_tokens);
    add(p + "missed_tokens.evicted", u.missed_evicted * u.block_tokens);
    add(p + "missed_tokens.failed_load", u.failed_loads * u.block_tokens);
  }
  add("committed_blocks", st.committed_blocks);
  add("aborted_blocks", st.aborted_blocks);
  add("dropped_blocks", st.dropped_blocks);
  add("orphan_drops", st.orphan_drops);
  add("removed_blocks", st.removed_blocks);
  add("checksum_failures", st.checksum_failures);
  for (const auto& [cause, n] : st.ssd_rejected_by_cause) add("tier.ssd.rejected." + cause, n);
  for (const auto& [key_id, n] : st.ssd_sealed_by_key) {
    add("tier.ssd.sealed_blocks.key_" + std::to_string(key_id), n);
  }
  add("io_errors", st.io_errors);
  add("stale_records", st.stale_records);
  add("quantized_blocks", st.quantized_blocks);
  add("dequantized_blocks", st.dequantized_blocks);
  add("quantize_refused", st.quantize_refused);
  add("demotions_dropped", st.demotions_dropped);
  add("moves_in_flight", st.moves_in_flight);
  add("ssd_paused", st.ssd_paused ? 1 : 0);
  add("shadow_blocks", st.shadow_blocks);
  add("write_through_skipped", st.write_through_skipped);
  add("ssd_budget_refused", st.ssd_budget_refused);
  add("hinted_blocks", st.hinted_blocks);
  add("hinted_now", st.hinted_now);
  add("hints_used", st.hints_used);
  add("hints_expired", st.hints_expired);
  add("hints_yielded", st.hints_yielded);
  add("hints_withdrawn", st.hints_withdrawn);
  add("prefetched_blocks", st.prefetched_blocks);
  add("prefetched_used", st.prefetched_used);
  for (const TierStats& t : st.tiers) {
    const std::string p = "tier." + std::string(tiers::TierKindName(t.kind)) + ".";
    add(p + "present", t.present ? 1 : 0);
    if (!t.present) continue;
    add(p + "emulated", t.emulated ? 1 : 0);
    add(p + "description", t.description);
    add(p + "capacity_bytes", t.capacity_bytes);
    add(p + "used_bytes", t.used_bytes);
    add(p + "blocks", t.blocks);
    add(p + "pinned_blocks", t.pinned_blocks);
    add(p + "lookup_hits", t.lookup_hits);
    add(p + "hits", t.hits);
    add(p + "evictions", t.evictions);
    add(p + "admission_refused", t.admission_refused);
    add(p + "demotions_in", t.demotions_in);
    add(p + "promotions_in", t.promotions_in);
    add(p + "bytes_in", t.bytes_in);
    add(p + "policy", t.policy);
    add(p + "admission", t.admission);
    if (!t.adaptive) continue;
    for (const eviction::CandidateReport& c : t.adaptive->candidates) {
      if (c.followed) add(p + "policy_follows", c.name);
      add(p + "candidate." + c.name + ".sampled_hit_rate", c.sampled_hit_rate);
    }
    add(p + "policy_switches", t.adaptive->switches);
    add(p + "policy_sampled_refs", t.adaptive->sampled_refs);
    add(p + "policy_sample_stride", t.adaptive->sample_stride);
  }
  add("tier.remote.present", st.remote_present ? 1 : 0);
  if (st.remote_present) {
    const tiers::RemoteStats& r = st.remote;
    add("tier.remote.description", st.remote_description);
    add("tier.remote.paused", r.paused ? 1 : 0);
    add("tier.remote.pauses", r.pauses);
    add("tier.remote.errors", r.errors);
    add("tier.remote.last_error", r.last_error);
    add("tier.remote.lookups", r.lookups);
    add("tier.remote.lookup_hits", st.remote_lookup_hits);
    add("tier.remote.negative_hits", r.negative_hits);
    add("tier.remote.hits", r.read_hits);
    add("tier.remote.read_misses", r.read_misses);
    add("tier.remote.corrupt", r.corrupt);
    add("tier.remote.corrupt_sealing", r.corrupt_sealing);
    add("tier.remote.corrupt_stale", r.corrupt_stale);
    add("tier.remote.written_blocks", r.writes);
    add("tier.remote.write_dropped", st.remote_write_dropped);
    add("tier.remote.bytes_read", r.bytes_read);
    add("tier.remote.bytes_written", r.bytes_written);
    add("tier.remote.in_flight", st.remote_in_flight);
  }
  add("events.enabled", s.events ? 1 : 0);
  if (s.events) {
    add("events.batches_published", s.events->batches_published);
    add("events.batches_dropped", s.events->batches_dropped);
    add("events.events_published", s.events->events_published);
    add("events.replay_requests", s.events->replay_requests);
  }
  // Latency histograms: the bucket bounds once, then per operation its
  // counts per bucket (not cumulative; the last is above the last bound),
  // so a reader can compute quantiles over any interval from two samples.
  std::string bounds;
  for (uint64_t b : kLatencyBoundsNs) AppendListItem(&bounds, Text(b / 1000));
  add("latency_bounds_us", bounds);
  for (size_t i = 0; i < kNumOpcodes; ++i) {
    const OpStats& o = s.ops.of(OpAt(i));
    const std::string p = "op." + OpLabel(OpAt(i)) + ".";
    add(p + "requests", o.requests);
    add(p + "errors", o.errors);
    add(p + "latency_sum_us", o.latency_sum_ns / 1000);
    std::string buckets;
    for (uint64_t c : o.buckets) AppendListItem(&buckets, Text(c));
    add(p + "latency_buckets", buckets);
  }
  return out;
}

struct MetricsServer::Impl {
  // The collector outlives the exposer, which holds it weakly.
  std::shared_ptr<Collector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address, Post post,
                                                            Snapshot snapshot) {
  KVTIER_RETURN_IF_ERROR(ValidateMetricsAddress(address));
  if (address.empty()) return InvalidArgumentError("metrics are off (empty address)");
  auto impl = std::make_unique<Impl>();
  impl->collector = std::make_shared<Collector>(std::move(post), std::move(snapshot));
  try {
    impl->exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return UnavailableError("cannot serve metrics on " + address + ": " + e.what() +
                            " (is the port taken? [metrics] address = \"\" turns metrics off)");
  }
  impl->exposer->RegisterCollectable(impl->collector);
  std::string bound = address;
  const std::vector<int> ports = impl->exposer->GetListeningPorts();
  if (!ports.empty()) bound = address.substr(0, address.rfind(':') + 1) + Text(ports.front());
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), std::move(bound)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, std::string address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

MetricsServer::~MetricsServer() {
  if (impl_) impl_->exposer.reset();  // first: no scrape may run past here
}

std::string ExpositionText(const DaemonSnapshot& snapshot) {
  return prometheus::TextSerializer().Serialize(BuildFamilies(snapshot));
}

}  // namespace kvtier::daemon

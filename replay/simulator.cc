#include "replay/simulator.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include "engine/cache_engine.h"
#include "eviction/admission.h"

namespace kvtier::replay {
namespace {

using prefix_index::BlockKey;
using tiers::TierKind;

// Every simulated block takes one 4 KiB slot, so capacity in blocks is
// capacity in slots. (A 1-layer, 1-head, 1-dim fp16 block of up to 1024
// tokens fits one page.)
constexpr uint64_t kSlot = tiers::kSlotPageBytes;

// The key of block number `b`: its file and id as the trace named them, so
// that a replay's keys (and what the policies sample of them) do not depend
// on the order blocks were numbered in.
BlockKey KeyOf(const Trace& trace, uint32_t b) {
  const TraceBlock& tb = trace.blocks[b];
  return BlockKey{uint64_t{tb.file} + 1, tb.id};
}

// "Never used again" in a next-use position.
constexpr uint32_t kNever = UINT32_MAX;

// SimConfig::admission "oracle": admits a block only if the trace uses it
// again within `horizon` block references of the request that writes it.
// Told each request's blocks' next uses before its lookup, it pairs them
// with the fingerprints the lookup hands every filter (Referenced: the
// chain's keys, in order), so it needs to know nothing of the engine's
// fingerprints.
class OracleAdmission final : public eviction::AdmissionFilter {
 public:
  explicit OracleAdmission(uint64_t horizon) : horizon_(horizon) {}

  std::string_view name() const override { return "oracle"; }

  // `next_uses`: of the request's blocks, in order; `position`: of its first.
  void Expect(std::span<const uint32_t> next_uses, uint64_t position) {
    next_ = next_uses;
    position_ = position;
  }

  void Referenced(std::span<const uint64_t> chain) override {
    due_.clear();
    for (size_t j = 0; j < chain.size() && j < next_.size(); ++j) due_[chain[j]] = next_[j];
  }

  void SetCapacity(size_t /*blocks*/, size_t /*one_in*/) override {}

  bool Admit(uint64_t candidate, uint64_t /*victim*/) override {
    const auto it = due_.find(candidate);
    return it != due_.end() && it->second != kNever && it->second - position_ <= horizon_;
  }

 private:
  uint64_t horizon_;
  std::span<const uint32_t> next_;
  uint64_t position_ = 0;
  std::unordered_map<uint64_t, uint32_t> due_;  // the request's fingerprints' next uses
};

// The simulating thread's CPU time: what a run costs, without the time the
// machine gave to others (on a shared machine a third of the wall time can
// be stolen, differently from one run to the next).
double Now() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void Account(const TraceRequest& r, uint64_t hits, uint32_t block_tokens, SimResult* out) {
  ++out->requests;
  out->block_refs += r.blocks.size();
  out->block_hits += hits;
  out->input_tokens += r.input_tokens;
  out->hit_tokens += std::min(hits * block_tokens, r.input_tokens);
}

// The positions of each reference's next use (kNever: never), positions
// counting block references across the trace: 4 bytes a reference, and 4 a
// distinct block while it runs. (Simulate refuses traces of 2^32 - 1
// references or more.)
std::vector<uint32_t> NextUses(const Trace& trace) {
  std::vector<uint32_t> next_use(trace.block_refs);
  std::vector<uint32_t> later(trace.blocks.size(), kNever);
  auto pos = static_cast<uint32_t>(trace.block_refs);
  for (auto r = trace.requests.rbegin(); r != trace.requests.rend(); ++r) {
    for (auto b = r->blocks.rbegin(); b != r->blocks.rend(); ++b) {
      --pos;
      next_use[pos] = later[*b];
      later[*b] = pos;
    }
  }
  return next_use;
}

Result<SimResult> SimulateEngine(const Trace& trace, const SimConfig& c,
                                 const ProgressFn& progress) {
  // The engine runs on the trace's clock, set to each request's time before
  // it: what decays or refills with time (LFU's aging, the ssd's write
  // budget) does so as in the recorded traffic, and a run is the same on
  // any machine.
  ManualClock clock;
  engine::EngineOptions options;
  options.clock = &clock;
  options.ssd_admission = c.ssd_admission;
  options.device_policy = options.host_policy = options.ssd_policy = c.policy;
  std::optional<OracleAdmission> oracle;
  std::vector<uint32_t> next_use;  // the oracle's
  if (c.admission == "oracle") {
    next_use = NextUses(trace);
    oracle.emplace(kOracleHorizon * (c.device_blocks + c.host_blocks + c.ssd_blocks));
    options.host_admission_filter = &*oracle;
  } else {
    options.device_admission = options.host_admission = c.admission;
  }
  // Plain runs count slots of one page; with quantize_lower, real bytes: an
  // fp16 block of block_bytes (one layer and head, as wide as it takes),
  // whose fp8 form the ssd keeps.
  Layout layout{1, 1, 1, DType::kFloat16, trace.block_tokens};
  uint64_t slot = kSlot;
  if (c.quantize_lower != Quantize::kOff) {
    const uint64_t per_dim = 4ULL * trace.block_tokens;  // K and V, 2 bytes each, per token
    if (c.block_bytes % per_dim != 0 || c.block_bytes / per_dim > UINT32_MAX) {
      return InvalidArgumentError("with quantize_lower, the block bytes (" +
                                  std::to_string(c.block_bytes) + ") must be a multiple of " +
                                  std::to_string(per_dim) + " (an fp16 block of " +
                                  std::to_string(trace.block_tokens) + " tokens)");
    }
    layout.head_dim = static_cast<uint32_t>(c.block_bytes / per_dim);
    slot = AlignUp(c.block_bytes, tiers::kSlotPageBytes);
  }
  // The budget is of --block-bytes blocks; the engine's plain blocks are
  // smaller (one page holds one), so it spends the budget scaled alike.
  options.ssd_write_budget_per_day = static_cast<uint64_t>(
      static_cast<double>(c.ssd_write_budget_per_day) * static_cast<double>(layout.BlockBytes()) /
      static_cast<double>(c.block_bytes));
  auto engine = engine::CacheEngine::Create(
      options,
      c.device_blocks ? tiers::NewMetadataTier(TierKind::kDevice, c.device_blocks * slot) : nullptr,
      tiers::NewMetadataTier(TierKind::kHost, c.host_blocks * slot),
      c.ssd_blocks ? tiers::NewMetadataTier(TierKind::kSsd, c.ssd_blocks * slot) : nullptr);
  if (!engine) return engine.status();
  engine::CacheEngine& e = **engine;
  KVTIER_ASSIGN_OR_RETURN(const prefix_index::NamespaceId ns,
                          e.AddNamespace({"replay", "", layout, c.quantize_lower}));

  SimResult out;
  std::vector<BlockKey> keys;
  std::vector<BlockKey> queued;  // a chain entering the lookahead window
  const bool lookahead = c.lookahead_requests > 0 || c.lookahead_seconds > 0;
  size_t hinted = 0;  // requests [0, hinted) have entered the window
  // The waiting queue's one owner; hints never expire, they end when used
  // or withdrawn (or yield to a write, the furthest back first).
  constexpr uint64_t kQueue = 1;
  const double start = Now();
  const size_t n = trace.requests.size();
  const uint64_t every = std::max<uint64_t>(1, n / 100);
  uint64_t position = 0;  // of the request's first block reference
  for (size_t i = 0; i < n; ++i) {
    const TraceRequest& r = trace.requests[i];
    const auto at = static_cast<TimeNs>(r.time_s * static_cast<double>(kNsPerSec));
    if (at > clock.Now()) clock.Advance(at - clock.Now());  // (never back: files combined)
    if (lookahead) {
      // Requests i..i+N, or those due within S seconds of this one, are
      // queued: each is hinted once, as it enters.
      const auto enters = [&](size_t j) {
        if (c.lookahead_requests > 0) return j - i <= c.lookahead_requests;
        return trace.requests[j].time_s - c.lookahead_seconds <= r.time_s;
      };
      for (; hinted < n && enters(hinted); ++hinted) {
        const TraceRequest& q = trace.requests[hinted];
        queued.clear();
        for (uint32_t b : q.blocks) queued.push_back(KeyOf(trace, b));
        // Never expiring (far past any clock), ordered by queue position:
        // when hints must yield, the requests furthest back yield first.
        const TimeNs due = eviction::kNoExpiry / 2 + static_cast<TimeNs>(hinted);
        KVTIER_RETURN_IF_ERROR(e.Hint(kQueue, ns, queued, due).status());
      }
    }
    keys.clear();
    for (uint32_t b : r.blocks) keys.push_back(KeyOf(trace, b));
    if (oracle) oracle->Expect(std::span(next_use).subspan(position, keys.size()), position);
    position += keys.size();
    KVTIER_ASSIGN_OR_RETURN(const engine::LookupResult found, e.Lookup(ns, keys));
    for (TierKind t : found.tiers) ++out.hits_per_tier[static_cast<size_t>(t)];
    // A hit is read (promoted into the host, as a worker's ACQUIRE would);
    // the rest of the prompt is computed and written.
    if (found.hits > 0) {
      KVTIER_ASSIGN_OR_RETURN(engine::Lease lease,
                              e.Acquire(ns, std::span(keys).first(found.hits), TierKind::kHost));
      lease.Release();
    }
    if (found.hits < keys.size()) {
      std::optional<BlockKey> parent;
      if (found.hits > 0) parent = keys[found.hits - 1];
      auto write = e.Allocate(ns, parent, std::span(keys).subspan(found.hits), TierKind::kHost);
      if (write.ok()) {
        KVTIER_RETURN_IF_ERROR(write->Commit());
      } else if (write.status().code() != StatusCode::kResourceExhausted &&
                 write.status().code() != StatusCode::kNotFound) {
        return write.status();
      }
    }
    // The request left the queue: what its acquire did not use is no
    // longer wanted for it. The acquire used the hints on the run it pinned,
    // the run the lookup found, so what is left lies beyond the hits (a
    // withdrawal there could only take a hint of a request still queued).
    if (lookahead && found.hits < keys.size()) {
      KVTIER_RETURN_IF_ERROR(e.Unhint(kQueue, ns, std::span(keys).subspan(found.hits)).status());
    }
    Account(r, found.hits, trace.block_tokens, &out);
    if (progress && out.requests % every == 0) progress(out.requests, n);
  }
  out.seconds = Now() - start;
  const engine::EngineStats st = e.Stats();
  out.hinted_blocks = st.hinted_blocks;
  out.hints_used = st.hints_used;
  out.hints_yielded = st.hints_yielded;
  out.ssd_budget_refused = st.ssd_budget_refused;
  for (const engine::TierStats& t : st.tiers) {
    out.admission_refused += t.admission_refused;
    out.demotions += t.demotions_in;
    out.promotions += t.promotions_in;
    out.bytes_moved += t.bytes_in;
  }
  out.blocks_moved = out.demotions + out.promotions;
  out.adaptive = st.tiers[static_cast<size_t>(TierKind::kHost)].adaptive;
  return out;
}

// One pool of blocks ordered by next use, for Belady's rules (OPT and MIN):
// by block number, each one's next use while cached or kAbsent (4 bytes a
// distinct block); the cached ones by next use, furthest last (bounded by
// the pool). Ties are blocks never used again: which of them goes changes
// no hit.
class BeladyPool {
 public:
  BeladyPool(size_t blocks, uint64_t capacity) : next_(blocks, kAbsent), capacity_(capacity) {}

  // Whether `b` is cached; if so its next use becomes `next`.
  bool Hit(uint32_t b, uint32_t next) {
    if (next_[b] == kAbsent) return false;
    by_next_.erase({next_[b], b});
    next_[b] = next;
    by_next_.insert({next, b});
    return true;
  }

  // Caches the missed `b`, evicting the block needed furthest ahead when
  // full; with `bypass`, only if `b` is needed sooner than that block (OPT),
  // else always (MIN).
  void Miss(uint32_t b, uint32_t next, bool bypass) {
    if (capacity_ == 0) return;
    if (held_ == capacity_) {
      auto furthest = std::prev(by_next_.end());
      if (bypass && furthest->first <= next) return;
      next_[furthest->second] = kAbsent;
      by_next_.erase(furthest);
      --held_;
    }
    next_[b] = next;
    by_next_.insert({next, b});
    ++held_;
  }

 private:
  static constexpr uint32_t kAbsent = kNever - 1;  // (a position is below it: refs < 2^32 - 1)
  std::vector<uint32_t> next_;
  std::set<std::pair<uint32_t, uint32_t>> by_next_;
  uint64_t capacity_;
  uint64_t held_ = 0;
};

// Belady's OPT over one pool of `capacity` blocks: on a miss the block is
// cached, and when full, the cached block whose next use lies furthest
// ahead (never: furthest of all) goes. Hits are the leading run, as for
// the engine.
Result<SimResult> SimulateOpt(const Trace& trace, const SimConfig& c, const ProgressFn& progress) {
  const double start = Now();  // refs/s counts the next-use pass too
  const std::vector<uint32_t> next_use = NextUses(trace);
  // One pool as large as all the tiers together: the bound for any split.
  BeladyPool pool(trace.blocks.size(), c.device_blocks + c.host_blocks + c.ssd_blocks);
  SimResult out;
  const uint64_t every = std::max<uint64_t>(1, trace.requests.size() / 100);
  uint64_t pos = 0;
  for (const TraceRequest& r : trace.requests) {
    uint64_t hits = 0;
    bool leading = true;
    for (uint32_t b : r.blocks) {
      const uint32_t next = next_use[pos++];
      if (pool.Hit(b, next)) {
        if (leading) ++hits;
        continue;
      }
      leading = false;
      pool.Miss(b, next, /*bypass=*/true);  // kept only if needed sooner than the furthest
    }
    Account(r, hits, trace.block_tokens, &out);
    if (progress && out.requests % every == 0) progress(out.requests, trace.requests.size());
  }
  out.seconds = Now() - start;
  out.hits_per_tier[static_cast<size_t>(TierKind::kHost)] = out.block_hits;
  return out;
}

// Textbook per-block counts (SimResult::per_block_hits) on one pool of
// `pool` blocks: Belady's MIN for "opt" (the block needed furthest ahead
// goes, the missed one always stays), else the named policy itself on
// lone blocks (no pins, no children, no priorities).
Result<uint64_t> PerBlockHits(const Trace& trace, const std::string& policy, uint64_t pool) {
  if (pool == 0) return uint64_t{0};
  uint64_t hits = 0;
  if (policy == "opt") {
    const std::vector<uint32_t> next_use = NextUses(trace);
    BeladyPool min(trace.blocks.size(), pool);
    uint64_t pos = 0;
    for (const TraceRequest& r : trace.requests) {
      for (uint32_t b : r.blocks) {
        const uint32_t next = next_use[pos++];
        if (min.Hit(b, next)) {
          ++hits;
        } else {
          min.Miss(b, next, /*bypass=*/false);
        }
      }
    }
    return hits;
  }
  const ManualClock clock;  // LFU's and priority's time stands still: order by access alone
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<eviction::EvictionPolicy> p,
                          eviction::NewPolicy(policy, clock));
  std::unordered_map<BlockKey, eviction::BlockId, prefix_index::BlockKeyHash> ids;
  std::vector<BlockKey> keys;  // by id
  std::vector<eviction::BlockId> free;
  eviction::BlockMeta meta;
  for (const TraceRequest& r : trace.requests) {
    for (uint32_t b : r.blocks) {
      const BlockKey k = KeyOf(trace, b);
      meta.fingerprint = prefix_index::BlockKeyHash{}(k);
      auto it = ids.find(k);
      if (it != ids.end()) {
        ++hits;
        p->Touch(it->second, meta);
        continue;
      }
      if (ids.size() == pool) {
        const std::optional<eviction::BlockId> v = p->Victim();
        if (!v) return InternalError("per-block " + policy + ": no victim in a full pool");
        p->Erase(*v);
        ids.erase(keys[*v]);
        free.push_back(*v);
      }
      eviction::BlockId slot;
      if (free.empty()) {
        slot = static_cast<eviction::BlockId>(keys.size());
        keys.push_back(k);
      } else {
        slot = free.back();
        free.pop_back();
        keys[slot] = k;
      }
      ids.emplace(k, slot);
      p->Insert(slot, meta);
    }
  }
  return hits;
}

}  // namespace

std::string SimResult::label() const {
  const std::string name = admits_all() ? policy : policy + "/" + admission;
  if (lookahead_requests > 0) return name + "+" + std::to_string(lookahead_requests) + "req";
  if (lookahead_seconds > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "+%gs", lookahead_seconds);
    return name + buf;
  }
  return name;
}

Result<SimResult> Simulate(const Trace& trace, const SimConfig& config,
                           const ProgressFn& progress) {
  if (config.host_blocks == 0) return InvalidArgumentError("the host tier needs a capacity");
  if (trace.block_tokens == 0 || trace.block_tokens > 1024) {
    return InvalidArgumentError("block size of " + std::to_string(trace.block_tokens) +
                                " tokens is not simulated (1-1024)");
  }
  if (trace.block_refs >= kNever - 1) {
    return InvalidArgumentError("a trace of " + std::to_string(trace.block_refs) +
                                " block references: at most 2^32 - 3 are replayed");
  }
  if (!std::isfinite(config.lookahead_seconds) || config.lookahead_seconds < 0) {
    return InvalidArgumentError("lookahead of " + std::to_string(config.lookahead_seconds) +
                                " seconds: a finite number of seconds, 0 or more");
  }
  const bool lookahead = config.lookahead_requests > 0 || config.lookahead_seconds > 0;
  if (config.lookahead_requests > 0 && config.lookahead_seconds > 0) {
    return InvalidArgumentError("a lookahead in requests or in seconds, not both");
  }
  if (lookahead && config.policy == "opt") {
    return InvalidArgumentError("opt takes no lookahead: it knows the whole trace already");
  }
  if (config.admission != "off" && config.policy == "opt") {
    return InvalidArgumentError("opt takes no admission filter: it admits as it sees fit");
  }
  if (config.admission == "oracle" && lookahead) {
    return InvalidArgumentError("the oracle admission takes no lookahead: it knows the future");
  }
  if (config.admission != "oracle") {
    KVTIER_RETURN_IF_ERROR(eviction::NewAdmissionFilter(config.admission).status());
  }
  if (config.quantize_lower != Quantize::kOff && config.policy == "opt") {
    return InvalidArgumentError("opt takes no quantize_lower: it has one pool, not tiers");
  }
  Result<SimResult> r = config.policy == "opt" ? SimulateOpt(trace, config, progress)
                                               : SimulateEngine(trace, config, progress);
  if (!r) return r;
  if (config.per_block) {
    KVTIER_ASSIGN_OR_RETURN(
        r->per_block_hits,
        PerBlockHits(trace, config.policy,
                     config.device_blocks + config.host_blocks + config.ssd_blocks));
    r->per_block = true;
  }
  r->policy = config.policy;
  r->lookahead_requests = config.lookahead_requests;
  r->lookahead_seconds = config.lookahead_seconds;
  r->admission = config.admission;
  r->device_blocks = config.device_blocks;
  r->host_blocks = config.host_blocks;
  r->ssd_blocks = config.ssd_blocks;
  r->capacity_blocks = r->device_blocks + r->host_blocks + r->ssd_blocks;
  r->quantize_lower = config.quantize_lower;
  // Plain runs: every move copies a whole block. Quantized ones counted
  // what each move copied (an ssd block in its fp8 form).
  if (config.quantize_lower == Quantize::kOff)
    r->bytes_moved = r->blocks_moved * config.block_bytes;
  return r;
}

}  // namespace kvtier::replay

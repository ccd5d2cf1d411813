// Simulate mode: replays a trace through the real CacheEngine and the real
// eviction policies, with metadata-only tiers of the given capacities, one
// request at a time in trace order; and Belady's OPT, the offline bound.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "common/result.h"
#include "eviction/eviction_policy.h"
#include "replay/trace.h"

namespace kvtier::replay {

struct SimConfig {
  // An eviction policy name (eviction::PolicyNames()), used for every tier,
  // or "opt" (Belady, offline; one pool the size of all tiers together).
  std::string policy = "lru";
  // Capacities in blocks; 0 = no such tier. The host tier is required.
  uint64_t device_blocks = 0;
  uint64_t host_blocks = 0;
  uint64_t ssd_blocks = 0;
  // Bytes per block, for the bytes-moved figures only (the simulation holds
  // no bytes). Default 2 MiB: a 16-token block of an 8B GQA model.
  uint64_t block_bytes = 2 << 20;
  // Quantize on demote (engine::NamespaceSpec::quantize_lower): the ssd
  // keeps blocks in that fp8 form. The run then accounts real bytes: every
  // tier holds its capacity in blocks x block_bytes (4 KiB-rounded slots),
  // and a block on the ssd takes its fp8 size (half, plus its scales,
  // rounded to 4 KiB), so the ssd holds nearly twice the blocks; the bytes
  // moved are those each move copies. REQUIRES with it: block_bytes a
  // multiple of 4 x the trace's block_tokens (an fp16 block). Engine
  // policies only ("opt" has one pool and no tiers).
  Quantize quantize_lower = Quantize::kOff;
  // Also count the textbook per-block hits (SimResult::per_block_hits).
  // That count is of the policy alone, without hints: lookahead leaves it
  // unchanged.
  bool per_block = false;
  // Lookahead: an inference engine's waiting queue, which names the chains
  // of the requests it will run soon (CacheEngine::Hint, one owner, no
  // expiry). A request's chain is hinted when it enters the window and its
  // leftover hint withdrawn (Unhint) after it ran. At most one is non-zero;
  // 0 and 0 is the plain run. Engine policies only: "opt" already knows the
  // future, and Simulate refuses it lookahead (InvalidArgument).
  //   lookahead_requests = N: request j is hinted before request j - N runs
  //     (requests i+1..i+N are hinted while i runs).
  //   lookahead_seconds = S: request j is hinted once the running request's
  //     time_s >= time_s of j - S.
  uint64_t lookahead_requests = 0;
  double lookahead_seconds = 0;
  // Admission filter of every tier (engine::EngineOptions): a name of
  // eviction::AdmissionNames(), or "oracle": the host tier admits a block
  // into its full self only if the trace uses it again within
  // kOracleHorizon x the capacity in block references (it knows the future,
  // as OPT does): what admission alone could add to the policy. Engine
  // policies only, and "oracle" without lookahead.
  std::string admission = "off";
  // The ssd's endurance budget, bytes a day (engine::EngineOptions::
  // ssd_write_budget_per_day; 0: none), spent by block_bytes a demotion and
  // refilled on the trace's clock.
  uint64_t ssd_write_budget_per_day = 0;
  // The ssd's admission filter (engine::EngineOptions::ssd_admission): of
  // eviction::AdmissionNames().
  std::string ssd_admission = "off";
};

// The oracle's horizon, in capacities' worth of block references: the best
// of 1, 2, 4 and 8 on the traces the project carries.
inline constexpr uint64_t kOracleHorizon = 4;

struct SimResult {
  std::string policy;
  uint64_t capacity_blocks = 0;  // all tiers together
  uint64_t device_blocks = 0, host_blocks = 0, ssd_blocks = 0;
  uint64_t requests = 0;
  uint64_t block_refs = 0;
  uint64_t block_hits = 0;  // leading hits
  uint64_t input_tokens = 0;
  uint64_t hit_tokens = 0;                // Σ min(block_tokens × leading hits, input_tokens)
  uint64_t hits_per_tier[3] = {0, 0, 0};  // device, host, ssd
  uint64_t demotions = 0;
  uint64_t promotions = 0;
  uint64_t blocks_moved = 0;
  // Bytes the moves copied: blocks_moved x SimConfig::block_bytes, or with
  // quantize_lower each block in the form it moved in.
  uint64_t bytes_moved = 0;
  Quantize quantize_lower = Quantize::kOff;  // SimConfig's
  // CPU seconds of the simulating thread (time the machine gave to other
  // work left out, so that runs compare on a shared machine).
  double seconds = 0;
  // SimConfig's lookahead, and what the hints did (engine::EngineStats).
  uint64_t lookahead_requests = 0;
  double lookahead_seconds = 0;
  uint64_t hinted_blocks = 0;  // protections begun
  uint64_t hints_used = 0;     // hinted blocks acquired while protected
  uint64_t hints_yielded = 0;  // protections given up so that a write found room
  // SimConfig's admission, and the blocks it kept out of the tiers.
  std::string admission = "off";
  uint64_t admission_refused = 0;
  // Blocks leaving the host that the ssd's write budget dropped instead
  // (engine::EngineStats::ssd_budget_refused).
  uint64_t ssd_budget_refused = 0;
  // With SimConfig::per_block: the hits of the textbook per-block cache of
  // the same policy and total capacity, where every block reference counts
  // on its own (a hit need not be leading) and every missed block is
  // admitted (nothing skipped, no bypass, no orphans dropped). "opt" is
  // then Belady's MIN. What other cache simulators report.
  bool per_block = false;
  uint64_t per_block_hits = 0;
  // The host tier's adaptive policy at the end of the run (policy
  // "adaptive"): what it followed, each candidate's sampled hit rate.
  std::optional<eviction::AdaptiveReport> adaptive;

  double block_hit_rate() const {
    return block_refs == 0 ? 0 : static_cast<double>(block_hits) / static_cast<double>(block_refs);
  }
  double token_hit_rate() const {
    return input_tokens == 0 ? 0
                             : static_cast<double>(hit_tokens) / static_cast<double>(input_tokens);
  }
  double per_block_hit_rate() const {
    return block_refs == 0 ? 0
                           : static_cast<double>(per_block_hits) / static_cast<double>(block_refs);
  }
  bool lookahead() const { return lookahead_requests != 0 || lookahead_seconds != 0; }
  bool admits_all() const { return admission == "off"; }
  // The policy with its admission filter and lookahead, as reports name a
  // run: "lru", "lru+10req", "lru+60s", "lru/seen", "lru/oracle+10req".
  std::string label() const;
  double refs_per_second() const {
    return seconds == 0 ? 0 : static_cast<double>(block_refs) / seconds;
  }
};

// Called every `progress_every` requests with (requests done, total).
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

Result<SimResult> Simulate(const Trace& trace, const SimConfig& config,
                           const ProgressFn& progress = {});

}  // namespace kvtier::replay

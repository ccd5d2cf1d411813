// kvtier replay: drives recorded traffic through the real engine and the
// real eviction policies with metadata-only tiers (simulate mode), sweeping
// policies x capacities, with Belady's OPT as the bound; prints a table and
// writes CSV, JSON and an SVG plot on request. With --live, replays against
// a running kvtierd instead (replay_live.cc).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/replay_live.h"
#include "common/units.h"
#include "eviction/admission.h"
#include "eviction/eviction_policy.h"
#include "replay/report.h"
#include "replay/simulator.h"

namespace kvtier::cli {
namespace {

struct ReplayOptions {
  std::vector<std::string> traces;
  std::string policies = "lru,opt";
  std::string capacity_blocks = "2000,20000";
  std::string combine = "interleave";
  std::string lookahead_requests = "0";
  std::string lookahead_seconds = "0";
  std::string admission = "off";
  uint64_t device_blocks = 0;
  uint64_t ssd_blocks = 0;
  uint64_t block_bytes = 2 << 20;
  std::string quantize_lower = "off";
  std::string ssd_max_write_per_day = "0";
  std::string ssd_admission = "off";
  std::string json, csv, plot;
  bool quiet = false;
  bool per_block = false;
  bool live = false;
  bool block_bytes_given = false;
  LiveOptions live_options;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "trace.jsonl", or "a.json and 7 more": file names, not paths.
std::string Title(const std::vector<std::string>& traces) {
  std::string name = traces.front().substr(traces.front().find_last_of('/') + 1);
  if (traces.size() > 1) name += " and " + std::to_string(traces.size() - 1) + " more";
  return name;
}

// One lookahead setting of the sweep: requests or seconds, 0 and 0 = none.
struct Lookahead {
  uint64_t requests = 0;
  double seconds = 0;
};

// The sweep's policies, capacities and lookaheads, checked before a trace
// is read.
struct Sweep {
  std::vector<std::string> policies;
  std::vector<uint64_t> capacities;
  std::vector<Lookahead> lookaheads;    // never empty; {0, 0} is the plain run
  std::vector<std::string> admissions;  // never empty; "off" admits every block
};

// --lookahead-requests and --lookahead-seconds: lists of values 0 or more;
// non-zero values in one of them at most.
Result<std::vector<Lookahead>> ParseLookaheads(const ReplayOptions& o) {
  std::vector<Lookahead> requests, seconds;
  for (const std::string& item : Split(o.lookahead_requests)) {
    uint64_t n = 0;
    const char* end = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(item.data(), end, n);
    if (ec != std::errc() || ptr != end) {
      return InvalidArgumentError("--lookahead-requests: \"" + item +
                                  "\" is not a whole number of requests, 0 or more");
    }
    requests.push_back({n, 0});
  }
  for (const std::string& item : Split(o.lookahead_seconds)) {
    double s = 0;
    const char* end = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(item.data(), end, s);
    if (ec != std::errc() || ptr != end || !std::isfinite(s) || s < 0) {
      return InvalidArgumentError("--lookahead-seconds: \"" + item +
                                  "\" is not a number of seconds, 0 or more");
    }
    seconds.push_back({0, s});
  }
  if (requests.empty()) return InvalidArgumentError("--lookahead-requests: no value given");
  if (seconds.empty()) return InvalidArgumentError("--lookahead-seconds: no value given");
  const auto any = [](const std::vector<Lookahead>& l) {
    return std::any_of(l.begin(), l.end(),
                       [](const Lookahead& a) { return a.requests != 0 || a.seconds != 0; });
  };
  if (any(requests) && any(seconds)) {
    return InvalidArgumentError(
        "--lookahead-requests and --lookahead-seconds: a queue is measured in requests or in "
        "seconds; give non-zero values to one of them, and run again for the other");
  }
  return any(seconds) ? seconds : requests;
}

Result<Sweep> ParseSweep(const ReplayOptions& o) {
  Sweep sweep;
  sweep.policies = Split(o.policies);
  if (sweep.policies.empty()) return InvalidArgumentError("--policies: no policy given");
  const auto names = eviction::PolicyNames();
  for (const std::string& p : sweep.policies) {
    if (p == "opt" || std::find(names.begin(), names.end(), p) != names.end()) continue;
    if (p.starts_with("adaptive:")) {
      if (Status s = eviction::CheckPolicyName(p); !s.ok()) {
        return InvalidArgumentError("--policies: " + std::string(s.message()));
      }
      continue;
    }
    std::string known = "opt";
    for (std::string_view n : names) known += ", " + std::string(n);
    return InvalidArgumentError("--policies: unknown policy \"" + p + "\" (known: " + known +
                                ", adaptive:<candidates joined by +>)");
  }
  for (const std::string& item : Split(o.capacity_blocks)) {
    uint64_t blocks = 0;
    const char* end = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(item.data(), end, blocks);
    if (ec != std::errc() || ptr != end || blocks == 0) {
      return InvalidArgumentError("--capacity-blocks: \"" + item +
                                  "\" is not a whole number of blocks above 0");
    }
    sweep.capacities.push_back(blocks);
  }
  if (sweep.capacities.empty()) return InvalidArgumentError("--capacity-blocks: no capacity given");
  KVTIER_ASSIGN_OR_RETURN(sweep.lookaheads, ParseLookaheads(o));
  sweep.admissions = Split(o.admission);
  if (sweep.admissions.empty()) return InvalidArgumentError("--admission: no filter given");
  const auto filters = eviction::AdmissionNames();
  for (const std::string& a : sweep.admissions) {
    if (a != "oracle" && std::find(filters.begin(), filters.end(), a) == filters.end()) {
      std::string known;
      for (std::string_view n : filters) known += std::string(n) + ", ";
      return InvalidArgumentError("--admission: unknown filter \"" + a + "\" (known: " + known +
                                  "oracle)");
    }
    if (a == "oracle" && sweep.lookaheads.size() > 1) {
      return InvalidArgumentError(
          "--admission oracle takes no lookahead (it knows the future already)");
    }
  }
  return sweep;
}

int Run(const ReplayOptions& o) {
  auto sweep = ParseSweep(o);
  if (!o.live && !sweep) {
    std::fprintf(stderr, "kvtier replay: %s\n", std::string(sweep.status().message()).c_str());
    return 2;
  }
  if (o.combine != "interleave" && o.combine != "concat") {
    std::fprintf(stderr, "kvtier replay: --combine: \"%s\" is neither interleave nor concat\n",
                 o.combine.c_str());
    return 2;
  }
  const Result<uint64_t> budget = ParseBytes(o.ssd_max_write_per_day);
  if (!budget) {
    std::fprintf(stderr, "kvtier replay: --ssd-max-write-per-day: %s\n",
                 std::string(budget.status().message()).c_str());
    return 2;
  }
  if (*budget != 0 && (o.live || o.ssd_blocks == 0)) {
    std::fprintf(stderr, "kvtier replay: --ssd-max-write-per-day: %s\n",
                 o.live ? "with --live the budget is kvtierd's own setting"
                        : "there is no ssd to budget: give --ssd-blocks too");
    return 2;
  }
  const uint64_t ssd_budget = *budget;
  if (o.ssd_admission != "off") {
    if (o.ssd_blocks == 0 || o.live) {
      std::fprintf(stderr, "kvtier replay: --ssd-admission: %s\n",
                   o.live ? "with --live the filter is kvtierd's own setting"
                          : "there is no ssd to filter: give --ssd-blocks too");
      return 2;
    }
    if (auto f = eviction::NewAdmissionFilter(o.ssd_admission); !f) {
      std::fprintf(stderr, "kvtier replay: --ssd-admission: %s\n",
                   std::string(f.status().message()).c_str());
      return 2;
    }
  }
  const bool concat = o.combine == "concat";
  auto trace = replay::ReadTraces(o.traces,
                                  concat ? replay::Combine::kConcat : replay::Combine::kInterleave);
  if (!trace) {
    std::fprintf(stderr, "kvtier replay: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  Quantize quantize = Quantize::kOff;
  if (!ParseQuantize(o.quantize_lower, &quantize)) {
    std::fprintf(stderr,
                 "kvtier replay: --quantize-lower: \"%s\" is not off, fp8_e4m3 or "
                 "fp8_e5m2\n",
                 o.quantize_lower.c_str());
    return 2;
  }
  if (o.live && quantize != Quantize::kOff) {
    std::fprintf(stderr,
                 "kvtier replay: --live checks every byte it reads back, and "
                 "--quantize-lower is lossy: simulate it instead (without --live)\n");
    return 2;
  }
  if (o.live) {
    LiveOptions live = o.live_options;
    live.quiet = o.quiet;
    live.block_bytes = o.block_bytes_given ? o.block_bytes : live.block_bytes;
    return RunLive(*trace, live);
  }
  // An output that cannot be written fails now, not after the replay.
  for (const std::string* path : {&o.json, &o.csv, &o.plot}) {
    if (path->empty()) continue;
    if (Status s = replay::CheckWritable(*path); !s.ok()) {
      std::fprintf(stderr, "kvtier replay: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::string files;
  if (o.traces.size() > 1) {
    files = "; " + std::to_string(o.traces.size()) + " files " +
            (concat ? "one after another (--combine concat)" : "interleaved by time");
  }
  if (quantize != Quantize::kOff) {
    files += "; ssd blocks kept in " + std::string(QuantizeName(quantize)) + " (opt without it)";
  }
  std::fprintf(stderr,
               "replaying %zu requests, %llu block references, %zu distinct blocks (%u "
               "tokens/block%s; the trace holds %s)\n",
               trace->requests.size(), static_cast<unsigned long long>(trace->block_refs),
               trace->blocks.size(), trace->block_tokens, files.c_str(),
               FormatBytes(trace->MemoryBytes()).c_str());
  std::vector<replay::SimResult> results;
  int failed = 0;
  for (const std::string& policy : sweep->policies) {
    // OPT knows the whole trace: a lookahead adds nothing to it, so it runs
    // once per capacity.
    const std::vector<Lookahead> lookaheads =
        policy == "opt" ? std::vector{Lookahead{}} : sweep->lookaheads;
    const std::vector<std::string> admissions =
        policy == "opt" ? std::vector<std::string>{"off"} : sweep->admissions;
    for (const uint64_t blocks : sweep->capacities) {
      for (const std::string& admission : admissions) {
        for (const Lookahead& ahead : lookaheads) {
          const std::string cap = std::to_string(blocks);
          replay::SimConfig c;
          c.policy = policy;
          c.host_blocks = blocks;
          c.device_blocks = o.device_blocks;
          c.ssd_blocks = o.ssd_blocks;
          c.block_bytes = o.block_bytes;
          if (policy != "opt") c.quantize_lower = quantize;
          c.lookahead_requests = ahead.requests;
          c.lookahead_seconds = ahead.seconds;
          c.admission = admission;
          c.ssd_write_budget_per_day = ssd_budget;
          c.ssd_admission = o.ssd_admission;
          // The textbook count has no hints: the plain run's says it all.
          c.per_block = o.per_block && ahead.requests == 0 && ahead.seconds == 0;
          replay::SimResult named;
          named.policy = policy;
          named.lookahead_requests = ahead.requests;
          named.lookahead_seconds = ahead.seconds;
          named.admission = admission;
          const std::string label = named.label();
          auto r = replay::Simulate(*trace, c, [&](uint64_t done, uint64_t total) {
            if (!o.quiet && total > 10'000) {
              std::fprintf(stderr, "\r%-16s %10s blocks: %3.0f%%", label.c_str(), cap.c_str(),
                           100.0 * static_cast<double>(done) / static_cast<double>(total));
            }
          });
          if (!o.quiet && trace->requests.size() > 10'000) std::fprintf(stderr, "\n");
          if (!r) {  // reported, and the other runs go on
            std::fprintf(stderr, "kvtier replay: %s at %s blocks: %s\n", label.c_str(), cap.c_str(),
                         std::string(r.status().message()).c_str());
            ++failed;
            continue;
          }
          results.push_back(*r);
        }
      }
    }
  }
  if (results.empty()) return 1;
  std::fputs(replay::FormatTable(results).c_str(), stdout);
  for (const auto& [path, text] :
       {std::pair{o.json, replay::FormatJson(results)},
        std::pair{o.csv, replay::FormatCsv(results)},
        std::pair{o.plot, replay::FormatSvg(results, "kvtier replay: " + Title(o.traces))}}) {
    if (path.empty()) continue;
    if (Status s = replay::WriteFile(path, text); !s.ok()) {
      std::fprintf(stderr, "kvtier replay: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

void AddReplayCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<ReplayOptions>();
  o->live_options.conn.model = "kvtier-replay";
  CLI::App* cmd = app->add_subcommand(
      "replay",
      "replay recorded traffic through the engine (simulate mode): hit rates per eviction "
      "policy and capacity, with Belady's OPT as the bound");
  cmd->add_option("--trace", o->traces, "trace file(s): Mooncake JSONL or kv-cache-tester JSON")
      ->required();
  cmd->add_option("--policies", o->policies,
                  "comma-separated policies, opt included; adaptive:a+b+c names adaptive's "
                  "candidates [lru,opt]");
  cmd->add_option("--combine", o->combine,
                  "several files: interleave (by their own times, all from t = 0) or concat "
                  "(one after another) [interleave]");
  cmd->add_option("--capacity-blocks", o->capacity_blocks,
                  "comma-separated host-tier capacities in blocks [2000,20000]");
  cmd->add_option(
      "--lookahead-requests", o->lookahead_requests,
      "comma-separated waiting-queue depths in requests: each request's chain is hinted to the "
      "engine (protected from eviction) N requests before it runs, the rest withdrawn after it "
      "ran; 0 = no hints. Each value is one run of every policy and capacity; opt runs once (it "
      "knows the future already); --per-block counts the runs without lookahead only. Non-zero "
      "values here or in --lookahead-seconds, not both [0]");
  cmd->add_option("--lookahead-seconds", o->lookahead_seconds,
                  "comma-separated waiting-queue depths in seconds of the trace's time: a "
                  "request's chain is hinted once the running request is within S seconds of "
                  "it; otherwise as --lookahead-requests [0]");
  cmd->add_option(
      "--admission", o->admission,
      "comma-separated admission filters, each one run of every policy and capacity: off (every "
      "block admitted), seen (a block enters a full tier only if looked up before the request "
      "that writes it), tinylfu (only if looked up more often lately than the victim), oracle "
      "(only if the trace uses it again within 4 x the capacity in block references: it knows "
      "the future; no lookahead with it). opt runs once [off]");
  cmd->add_option("--device-blocks", o->device_blocks, "device tier above the host [0 = none]");
  cmd->add_option("--ssd-blocks", o->ssd_blocks, "ssd tier below the host [0 = none]");
  cmd->add_option("--block-bytes", o->block_bytes,
                  "bytes per block, for the bytes-moved figures (with --live: the bytes "
                  "written) [2 MiB; --live: 16 KiB]");
  cmd->add_option("--quantize-lower", o->quantize_lower,
                  "keep ssd blocks in fp8: off | fp8_e4m3 | fp8_e5m2. Simulated: the ssd holds "
                  "--ssd-blocks x --block-bytes of fp8 blocks (nearly twice the blocks) and the "
                  "bytes moved count each block as it moves (opt runs without it); --live: the "
                  "namespace's setting [off]")
      ->capture_default_str();
  cmd->add_option("--ssd-max-write-per-day", o->ssd_max_write_per_day,
                  "the ssd's endurance budget, as kvtierd's setting of that name: bytes a day "
                  "(100G, 1T), each demotion spending --block-bytes, refilled on the trace's "
                  "clock; a block leaving the host past it is dropped [0 = none]");
  cmd->add_option("--ssd-admission", o->ssd_admission,
                  "which blocks leaving the host are written to the ssd, as kvtierd's setting "
                  "of that name: off | seen | tinylfu [off]");
  cmd->add_option("--json", o->json, "write one record per policy and capacity");
  cmd->add_option("--csv", o->csv, "write the table as CSV");
  cmd->add_option("--plot", o->plot, "write an SVG plot: token hit rate against capacity");
  cmd->add_flag("--per-block", o->per_block,
                "also the textbook per-block hit rate of each policy on one pool (opt: Belady's "
                "MIN), as other cache simulators count it");
  cmd->add_flag("--quiet", o->quiet, "no progress line");
  cmd->add_flag("--live", o->live,
                "replay against a running kvtierd through the client, with real bytes");
  cmd->add_option("--socket", o->live_options.conn.socket,
                  "--live: kvtierd's socket [$KVTIER_SOCKET or /run/kvtier/kvtierd.sock]");
  cmd->add_option("--model", o->live_options.conn.model, "--live: the namespace's model id");
  cmd->add_flag("--trace-speed", o->live_options.trace_speed,
                "--live: keep the trace's timing instead of going as fast as possible");
  cmd->callback([o, cmd, exit_code] {
    o->block_bytes_given = cmd->count("--block-bytes") > 0;
    *exit_code = Run(*o);
  });
}

}  // namespace kvtier::cli

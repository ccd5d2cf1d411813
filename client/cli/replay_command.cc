// kvtier replay: drives recorded traffic through the real engine and the
// real eviction policies with metadata-only tiers (simulate mode), sweeping
// policies x capacities, with Belady's OPT as the bound; prints a table and
// writes CSV, JSON and an SVG plot on request. With --live, replays against
// a running kvtierd instead (replay_live.cc).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/replay_live.h"
#include "replay/report.h"
#include "replay/simulator.h"

namespace kvtier::cli {
namespace {

struct ReplayOptions {
  std::vector<std::string> traces;
  std::string policies = "lru,opt";
  std::string capacity_blocks = "2000,20000";
  uint64_t device_blocks = 0;
  uint64_t ssd_blocks = 0;
  uint64_t block_bytes = 2 << 20;
  std::string json, csv, plot;
  bool quiet = false;
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

int Run(const ReplayOptions& o) {
  auto trace = replay::ReadTraces(o.traces);
  if (!trace) {
    std::fprintf(stderr, "kvtier replay: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  if (o.live) {
    LiveOptions live = o.live_options;
    live.quiet = o.quiet;
    live.block_bytes = o.block_bytes_given ? o.block_bytes : live.block_bytes;
    return RunLive(*trace, live);
  }
  std::fprintf(stderr, "replaying %zu requests, %llu block references (%u tokens/block)\n",
               trace->requests.size(), static_cast<unsigned long long>(trace->block_refs),
               trace->block_tokens);
  std::vector<replay::SimResult> results;
  for (const std::string& policy : Split(o.policies)) {
    for (const std::string& cap : Split(o.capacity_blocks)) {
      replay::SimConfig c;
      c.policy = policy;
      c.host_blocks = std::stoull(cap);
      c.device_blocks = o.device_blocks;
      c.ssd_blocks = o.ssd_blocks;
      c.block_bytes = o.block_bytes;
      auto r = replay::Simulate(*trace, c, [&](uint64_t done, uint64_t total) {
        if (!o.quiet && total > 10'000) {
          std::fprintf(stderr, "\r%-10s %10s blocks: %3.0f%%", policy.c_str(), cap.c_str(),
                       100.0 * static_cast<double>(done) / static_cast<double>(total));
        }
      });
      if (!o.quiet && trace->requests.size() > 10'000) std::fprintf(stderr, "\n");
      if (!r) {
        std::fprintf(stderr, "kvtier replay: %s: %s\n", policy.c_str(),
                     std::string(r.status().message()).c_str());
        return 1;
      }
      results.push_back(*r);
    }
  }
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
  return 0;
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
  cmd->add_option("--policies", o->policies, "comma-separated policies, opt included [lru,opt]");
  cmd->add_option("--capacity-blocks", o->capacity_blocks,
                  "comma-separated host-tier capacities in blocks [2000,20000]");
  cmd->add_option("--device-blocks", o->device_blocks, "device tier above the host [0 = none]");
  cmd->add_option("--ssd-blocks", o->ssd_blocks, "ssd tier below the host [0 = none]");
  cmd->add_option("--block-bytes", o->block_bytes,
                  "bytes per block, for the bytes-moved figures (with --live: the bytes "
                  "written) [2 MiB; --live: 16 KiB]");
  cmd->add_option("--json", o->json, "write one record per policy and capacity");
  cmd->add_option("--csv", o->csv, "write the table as CSV");
  cmd->add_option("--plot", o->plot, "write an SVG plot: token hit rate against capacity");
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

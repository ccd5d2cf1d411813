// kvtier stats: the daemon's STATS as an aligned table grouped by name
// prefix ("tier.host.blocks" goes under "tier.host"), or as JSON.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>

#include "client/cli/cli_common.h"
#include "client/cli/commands.h"
#include "client/internal/json.h"

namespace kvtier::cli {
namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;

struct StatsOptions {
  ConnectFlags conn;
  bool json = false;
};

// Groups in order of first appearance; names without a dot go under "daemon".
std::vector<std::pair<std::string, Entries>> Group(const Entries& entries) {
  std::vector<std::pair<std::string, Entries>> groups;
  for (const auto& [name, value] : entries) {
    const size_t dot = name.rfind('.');
    const std::string group = dot == std::string::npos ? "daemon" : name.substr(0, dot);
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == group; });
    if (it == groups.end()) it = groups.insert(groups.end(), {group, {}});
    it->second.emplace_back(leaf, value);
  }
  return groups;
}

// "67108864 (64.0 MiB)" for byte counts, the value as is otherwise.
std::string Pretty(const std::string& name, const std::string& value) {
  const bool bytes = name.size() > 6 && name.ends_with("_bytes");
  uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (!bytes || ec != std::errc() || ptr != value.data() + value.size() || n < 1024) return value;
  return value + " (" + FormatBytes(n) + ")";
}

void PrintTable(const Entries& entries) {
  size_t width = 0;
  for (const auto& [group, rows] : Group(entries)) {
    for (const auto& row : rows) width = std::max(width, row.first.size());
  }
  for (const auto& [group, rows] : Group(entries)) {
    std::printf("%s\n", group.c_str());
    for (const auto& [name, value] : rows) {
      std::printf("  %-*s  %s\n", static_cast<int>(width), name.c_str(),
                  Pretty(name, value).c_str());
    }
  }
}

int RunStats(const StatsOptions& o) {
  auto c = Connect(o.conn, /*map_arenas=*/false);
  if (!c.ok()) return Fail(c.status());
  auto stats = (*c)->Stats();
  if (!stats.ok()) return Fail(stats.status());
  if (o.json) {
    std::printf("%s\n", client::internal::StatsJson(*stats, /*pretty=*/true).c_str());
  } else {
    PrintTable(*stats);
  }
  return 0;
}

}  // namespace

void AddStatsCommand(CLI::App* app, int* exit_code) {
  auto* sub = app->add_subcommand("stats", "the daemon's counters and settings");
  auto o = std::make_shared<StatsOptions>();
  AddConnectFlags(sub, &o->conn);
  sub->add_flag("--json", o->json, "print a JSON object");
  sub->callback([o, exit_code] { *exit_code = RunStats(*o); });
}

}  // namespace kvtier::cli

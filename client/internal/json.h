// Just enough JSON writing for STATS and the CLI's --json output; no parser.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::client::internal {

// `s` as a quoted JSON string, escaped.
std::string JsonString(std::string_view s);
// A STATS value: as written when it is a JSON number, else a JSON string.
std::string JsonValue(std::string_view s);
// {"name": value, ...} in the order given; one entry per line when `pretty`.
std::string StatsJson(const std::vector<std::pair<std::string, std::string>>& entries, bool pretty);

}  // namespace kvtier::client::internal

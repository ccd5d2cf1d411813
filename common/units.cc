#include "common/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace kvtier {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  const int decimals = unit == 0 ? 0 : value < 10.0 ? 2 : value < 100.0 ? 1 : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, value, kUnits[unit]);
  return buf;
}

Result<uint64_t> ParseBytes(std::string_view text) {
  const std::string s(text);
  auto bad = [&] {
    return InvalidArgumentError("'" + s + "' is not a byte count (e.g. 4096, 64MiB, 1.5GiB)");
  };
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return bad();
  const std::string number = s.substr(0, i);
  std::string unit = s.substr(i);
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  struct Unit {
    const char* name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},         {"B", 1},      {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30},
      {"TiB", 0x1p40}, {"KB", 1e3},   {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12},
      {"K", 0x1p10},   {"M", 0x1p20}, {"G", 0x1p30},   {"T", 0x1p40}};
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !std::isfinite(value)) return bad();
    const double bytes = std::round(value * u.factor);
    if (bytes < 0 || bytes > 0x1p63) return bad();
    return static_cast<uint64_t>(bytes);
  }
  return bad();
}

}  // namespace kvtier

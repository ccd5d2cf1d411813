// Helpers of the scale benchmarks (bench/scale.sh): what /proc says about
// the daemon under test, the daemon's own STATS as numbers, and the median
// and worst of repeated runs.
#pragma once

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/units.h"

namespace kvtier::bench {

[[noreturn]] inline void DieScale(const char* program, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program, what.c_str());
  std::exit(1);
}

// A "Name:   123 kB" field of /proc/PID/status, in bytes; 0 when absent.
inline uint64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
  }
  return 0;
}

// utime + stime of every thread of `pid`, in seconds (/proc/PID/stat).
inline double ProcCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name is in parentheses and may hold spaces: count fields
  // after its closing one. utime and stime are fields 14 and 15.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields;
  size_t at = close + 2;
  while (at < text.size()) {
    const size_t end = text.find(' ', at);
    fields.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  if (fields.size() < 13) return 0;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

// Entries of /proc/PID/<dir> (fd: open file descriptors, task: threads).
inline uint64_t ProcCount(pid_t pid, const char* dir) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/" + dir).c_str());
  if (d == nullptr) return 0;
  uint64_t n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n;
}

// The daemon's STATS, by name; Number() of an absent or non-numeric one is 0.
class DaemonStats {
 public:
  explicit DaemonStats(client::Client& c) {
    auto stats = c.Stats();
    if (!stats) DieScale("scale", "STATS: " + stats.status().ToString());
    for (auto& [name, value] : *stats) values_[name] = value;
  }
  double Number(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? 0 : std::strtod(it->second.c_str(), nullptr);
  }

 private:
  std::map<std::string, std::string> values_;
};

// The p-quantile (0..1) of `v` (reordered).
inline double Quantile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(i), v.end());
  return v[i];
}

// The median and the worst of one figure over repeated runs; `worse_is_high`
// says which end is the worst (latency: high; throughput, fairness: low).
struct Spread {
  double median = 0;
  double worst = 0;
};
inline Spread SpreadOf(std::vector<double> runs, bool worse_is_high = true) {
  if (runs.empty()) return {};
  std::sort(runs.begin(), runs.end());
  return {runs[runs.size() / 2], worse_is_high ? runs.back() : runs.front()};
}

}  // namespace kvtier::bench

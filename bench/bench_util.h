// Helpers shared by the benchmark programs: a console reporter that keeps
// every result so main() can print ratios between a subject and its peer
// measured in the same run (STYLE.md 19), and a small deterministic RNG.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/hash.h"

namespace kvtier::bench {

// Prints like the default console reporter and remembers each result by
// benchmark name (the median, when repetitions produce aggregates).
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  // Colors only on a terminal: a display reporter passed in by main() does
  // not see --benchmark_color.
  SummaryReporter() : ConsoleReporter(isatty(STDOUT_FILENO) != 0 ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.run_type == Run::RT_Iteration || median) runs_[run.run_name.str()] = run;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // nullptr when `name` did not run (filtered out, or failed).
  const Run* Find(const std::string& name) const {
    auto it = runs_.find(name);
    return it == runs_.end() ? nullptr : &it->second;
  }

  // Real time of one iteration, in seconds; 0 when `name` did not run.
  double Seconds(const std::string& name) const {
    const Run* run = Find(name);
    if (run == nullptr) return 0;
    return run->GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run->time_unit);
  }

  // A user counter of `name`; 0 when absent.
  double Counter(const std::string& name, const std::string& counter) const {
    const Run* run = Find(name);
    if (run == nullptr) return 0;
    auto it = run->counters.find(counter);
    return it == run->counters.end() ? 0 : it->second.value;
  }

 private:
  std::map<std::string, Run> runs_;
};

// Runs the registered benchmarks through a SummaryReporter, then hands it
// to `summarize` to print the ratios. Returns main()'s exit code.
template <typename Summarize>
int RunAndSummarize(int argc, char** argv, Summarize summarize) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\n");
  summarize(reporter);
  std::fflush(stdout);
  benchmark::Shutdown();
  return 0;
}

// The ratio a / b, or 0 when b is (peer did not run).
inline double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

// splitmix64: fast, deterministic, uniform 64-bit values.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64(&state_); }

 private:
  uint64_t state_;
};

}  // namespace kvtier::bench

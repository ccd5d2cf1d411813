// Flag parsing shared by the daemon benchmarks (standalone programs, not
// Google Benchmark): `--name value` options and `--name` switches.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

namespace kvtier::bench {

struct Flags {
  std::map<std::string, std::function<void(const std::string&)>> options;  // take a value
  std::map<std::string, std::function<void()>> switches;                   // take none
};

// Applies argv to `flags`. Returns -1 to go on, or the exit code to return
// (0 after --help, 2 after an unknown flag or a missing value), having
// printed `usage`.
inline int ParseFlags(int argc, char** argv, const Flags& flags, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (auto s = flags.switches.find(arg); s != flags.switches.end()) {
      s->second();
      continue;
    }
    auto o = flags.options.find(arg);
    if (o == flags.options.end() || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s\n", usage);
      return arg == "--help" ? 0 : 2;
    }
    o->second(argv[++i]);
  }
  return -1;
}

}  // namespace kvtier::bench

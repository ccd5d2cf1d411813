// Logging to stderr, one line per event worth an operator's attention:
// "2026-11-29T11:00:00.123Z kvtierd INFO listening on /run/kvtier/kvtierd.sock".
// Thread-safe (one write(2) per line).
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace kvtier::daemon {

enum class LogLevel { kInfo, kWarn, kError };

void Log(LogLevel level, std::string_view message);

// Str("a", 1, "b") == "a1b": builds a log line from pieces.
template <typename... Args>
std::string Str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace kvtier::daemon

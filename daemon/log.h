// Logging to stderr, one line per event worth an operator's attention:
// "2026-11-29T11:00:00.123Z kvtierd INFO listening on /run/kvtier/kvtierd.sock".
// Thread-safe (one write(2) per line).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
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

// One kind of event (a malformed frame, a failed request): at most one line
// per `interval`; the lines held back are counted, and the next line that
// goes out says how many it stands for. Thread-safe.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::chrono::steady_clock::duration interval = std::chrono::seconds(10))
      : interval_(interval) {}

  void Log(LogLevel level, std::string_view message);

 private:
  const std::chrono::steady_clock::duration interval_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point last_;  // guarded by mutex_
  bool logged_ = false;                         // guarded by mutex_
  uint64_t held_ = 0;                           // guarded by mutex_
};

}  // namespace kvtier::daemon

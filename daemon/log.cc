#include "daemon/log.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

namespace kvtier::daemon {

void Log(LogLevel level, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[96];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  const char* name = level == LogLevel::kInfo   ? "INFO"
                     : level == LogLevel::kWarn ? "WARN"
                                                : "ERROR";
  std::string line = std::string(stamp) + " kvtierd " + name + " ";
  line.append(message);
  line += '\n';
  // One write per line, so lines from several threads never interleave.
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

void RateLimitedLog::Log(LogLevel level, std::string_view message) {
  const auto now = std::chrono::steady_clock::now();
  uint64_t held = 0;
  {
    std::lock_guard lock(mutex_);
    if (logged_ && now - last_ < interval_) {
      ++held_;
      return;
    }
    logged_ = true;
    last_ = now;
    held = std::exchange(held_, 0);
  }
  if (held == 0) {
    daemon::Log(level, message);
  } else {
    daemon::Log(level, Str(message, " (and ", held, " more like it since the last report)"));
  }
}

}  // namespace kvtier::daemon

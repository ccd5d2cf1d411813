// Clock: the source of time for everything that ages (policies, retention
// durations, leases). Injected so tests control time (STYLE.md 12).
#pragma once

#include <atomic>
#include <cstdint>

namespace kvtier {

// Nanoseconds on a monotonic timeline; only differences are meaningful.
using TimeNs = int64_t;

inline constexpr TimeNs kNsPerUs = 1'000;
inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerSec = 1'000'000'000;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic: never decreases. Thread-safe.
  virtual TimeNs Now() const = 0;
};

// The process-wide steady clock. Thread-safe; lives forever.
const Clock& SystemClock();

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimeNs start = 0) : now_(start) {}
  TimeNs Now() const override { return now_.load(std::memory_order_relaxed); }
  // REQUIRES: delta >= 0
  void Advance(TimeNs delta) { now_.fetch_add(delta, std::memory_order_relaxed); }

 private:
  std::atomic<TimeNs> now_;
};

}  // namespace kvtier

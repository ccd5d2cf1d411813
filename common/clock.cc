#include "common/clock.h"

#include <chrono>

namespace kvtier {
namespace {

class SteadyClock final : public Clock {
 public:
  TimeNs Now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

const Clock& SystemClock() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace kvtier

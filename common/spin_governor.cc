#include "common/spin_governor.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace kvtier {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The calling thread's run delay from /proc/thread-self/schedstat
// ("cpu_ns run_delay_ns timeslices"); -1 where the kernel has none.
class ThreadSchedstat {
 public:
  ThreadSchedstat() : fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~ThreadSchedstat() {
    if (fd_ >= 0) ::close(fd_);
  }
  ThreadSchedstat(const ThreadSchedstat&) = delete;
  ThreadSchedstat& operator=(const ThreadSchedstat&) = delete;

  int64_t RunDelayNs() const {
    if (fd_ < 0) return -1;
    char buf[96];
    const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    long long cpu = 0;
    long long delay = 0;
    if (std::sscanf(buf, "%lld %lld", &cpu, &delay) != 2) return -1;
    return delay;
  }

 private:
  int fd_;
};

}  // namespace

SpinGovernor::SpinGovernor(Sampler sampler) : sampler_(std::move(sampler)) {
  if (!sampler_) {
    auto stat = std::make_shared<ThreadSchedstat>();
    if (stat->RunDelayNs() >= 0) {
      sampler_ = [stat] { return Sample{NowNs(), stat->RunDelayNs()}; };
    }
  }
  if (sampler_) {
    last_ = sampler_();
    next_sample_ns_ = last_.wall_ns + kWindowNs;
  }
}

bool SpinGovernor::MaySpin() {
  if (sampler_ && NowNs() >= next_sample_ns_) Observe(sampler_());
  return spinning_;
}

void SpinGovernor::Observe(const Sample& s) {
  if (s.wall_ns < next_sample_ns_) return;
  const int64_t wall = s.wall_ns - last_.wall_ns;
  const double waited = wall > 0 ? static_cast<double>(s.run_delay_ns - last_.run_delay_ns) /
                                       static_cast<double>(wall)
                                 : 0;
  last_ = s;
  next_sample_ns_ = s.wall_ns + kWindowNs;
  if (waited > kContendedFraction) {
    if (spinning_) ++backoffs_;
    spinning_ = false;
    quiet_since_ns_ = -1;
    return;
  }
  if (spinning_) return;
  if (waited >= kQuietFraction) {
    quiet_since_ns_ = -1;
    return;
  }
  if (quiet_since_ns_ < 0) quiet_since_ns_ = s.wall_ns - wall;
  if (s.wall_ns - quiet_since_ns_ >= kHoldNs) spinning_ = true;
}

}  // namespace kvtier

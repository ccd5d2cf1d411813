// SpinGovernor: whether a thread that waits for work (kvtierd's io loop, a
// client waiting for its reply) should busy-poll before it sleeps.
//
// Spinning pays only while the thread has a core to itself: it saves the
// wake-up across CPUs (tens of microseconds on a VM, more than a request),
// but on a shared core it takes the CPU from the very process it waits for
// (an inference engine, the daemon, the client). The governor watches how
// long the thread waited to be run (the kernel's run delay,
// /proc/thread-self/schedstat): a thread that has a core of its own barely
// waits; one that shares it waits a noticeable fraction of the time. Past
// `kContendedFraction` of a window it stops spinning, and spins again only
// after `kHold` of windows under `kQuietFraction`.
#pragma once

#include <cstdint>
#include <functional>

namespace kvtier {

class SpinGovernor {
 public:
  // What the governor reads: now and the thread's total run delay, in ns.
  struct Sample {
    int64_t wall_ns = 0;
    int64_t run_delay_ns = 0;
  };
  using Sampler = std::function<Sample()>;

  static constexpr int64_t kWindowNs = 100'000'000;  // 100 ms between samples
  static constexpr double kContendedFraction = 0.05;
  static constexpr double kQuietFraction = 0.01;
  static constexpr int64_t kHoldNs = 1'000'000'000;  // quiet this long to spin again

  // The default sampler reads the schedstat of the thread that constructs
  // the governor: keep it to that thread (thread_local, or the loop's own).
  // Without schedstat the governor always allows spinning.
  explicit SpinGovernor(Sampler sampler = {});

  // Whether to spin now (false while the thread's CPU is shared). Cheap (one
  // clock read) except once a window.
  bool MaySpin();

  bool spinning() const { return spinning_; }
  // Times the governor turned spinning off since construction.
  uint64_t backoffs() const { return backoffs_; }

  // Takes one reading (MaySpin() calls it once a window; tests feed their
  // own). Readings less than a window after the last are ignored.
  void Observe(const Sample& s);

 private:
  Sampler sampler_;
  bool spinning_ = true;
  Sample last_{};
  int64_t next_sample_ns_ = 0;
  int64_t quiet_since_ns_ = -1;  // -1: not quiet since the last backoff
  uint64_t backoffs_ = 0;
};

}  // namespace kvtier

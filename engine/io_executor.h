// IoExecutor: runs blocking storage work (SSD reads and writes, checksums of
// large blocks) off the engine's thread, and hands each completion back to
// it, so the engine never waits on a disk (DESIGN.md §3).
//
// Queues are bounded: Submit() refuses work when full, and the engine then
// degrades (drops a block it was demoting, stops a lease short) rather than
// waiting.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvtier::engine {

class IoExecutor {
 public:
  using Work = std::function<Status()>;
  using Done = std::function<void(Status)>;

  virtual ~IoExecutor() = default;

  // Queues `work` for an I/O thread; `done(work's status)` runs later on the
  // engine's thread. Returns false, queuing nothing, when the queue is full.
  // Thread-safety: called on the engine's thread.
  virtual bool Submit(Work work, Done done) = 0;
  // Work submitted and not yet completed (done not yet run).
  virtual size_t in_flight() const = 0;
};

// `threads` I/O threads with at most `max_queued` items waiting for one.
// `post` hands a completion to the engine's thread (the daemon posts it to
// its io_context); it must be thread-safe. The destructor finishes queued
// work and joins; completions posted after that are the poster's affair.
std::unique_ptr<IoExecutor> NewThreadPoolExecutor(size_t threads, size_t max_queued,
                                                  std::function<void(std::function<void()>)> post);

// For tests: nothing runs until RunAll(), which runs every queued work item
// and its completion on the calling thread, in order (including work that
// completions submit). Deterministic; bounded by `max_queued`.
class ManualExecutor final : public IoExecutor {
 public:
  explicit ManualExecutor(size_t max_queued = 1024) : max_queued_(max_queued) {}
  bool Submit(Work work, Done done) override;
  size_t in_flight() const override { return queue_.size(); }
  // Returns how many items ran.
  size_t RunAll();
  // Runs the oldest item only; false if none.
  bool RunOne();

 private:
  size_t max_queued_;
  std::vector<std::pair<Work, Done>> queue_;
};

}  // namespace kvtier::engine

#include "engine/io_executor.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier::engine {
namespace {

class ThreadPoolExecutor final : public IoExecutor {
 public:
  ThreadPoolExecutor(size_t threads, size_t max_queued,
                     std::function<void(std::function<void()>)> post)
      : max_queued_(max_queued), post_(std::move(post)) {
    for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }

  ~ThreadPoolExecutor() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  bool Submit(Work work, Done done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.size() >= max_queued_ || stopping_) return false;
      queue_.emplace_back(std::move(work), std::move(done));
    }
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_one();
    return true;
  }

  size_t in_flight() const override { return in_flight_.load(std::memory_order_relaxed); }

 private:
  void Loop() {
    for (;;) {
      std::pair<Work, Done> item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      Status status = item.first();
      post_([this, done = std::move(item.second), status = std::move(status)]() mutable {
        in_flight_.fetch_sub(1, std::memory_order_relaxed);
        done(std::move(status));
      });
    }
  }

  const size_t max_queued_;
  std::function<void(std::function<void()>)> post_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Work, Done>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::atomic<size_t> in_flight_{0};
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<IoExecutor> NewThreadPoolExecutor(size_t threads, size_t max_queued,
                                                  std::function<void(std::function<void()>)> post) {
  return std::make_unique<ThreadPoolExecutor>(threads, max_queued, std::move(post));
}

bool ManualExecutor::Submit(Work work, Done done) {
  if (queue_.size() >= max_queued_) return false;
  queue_.emplace_back(std::move(work), std::move(done));
  return true;
}

bool ManualExecutor::RunOne() {
  if (queue_.empty()) return false;
  auto item = std::move(queue_.front());
  queue_.erase(queue_.begin());
  item.second(item.first());
  return true;
}

size_t ManualExecutor::RunAll() {
  size_t n = 0;
  while (RunOne()) ++n;
  return n;
}

}  // namespace kvtier::engine

// Runs CUDA kernel source on the CPU, one CTA at a time, so the kernels are
// tested on machines without a GPU: each thread of the CTA is a ucontext
// coroutine, and the scheduler resumes them in turn until each reaches a
// synchronization point (a warp shuffle, __syncthreads, or its end), then
// resolves it. It is strict where hardware is merely undefined: a warp whose
// lanes do not all reach the same shuffle with the same offset, or a CTA
// whose threads do not all reach the same barrier, is reported as an error.
//
// Provides the intrinsics the kernels of kernels/internal/*.cuh use and
// nothing else. Must be included before any CUDA header (it defines
// __shared__ as `static`: one CTA runs at a time, so a static is exactly the
// CTA's shared memory). Not thread-safe: one emulation at a time.
#pragma once

#if defined(__CUDACC__)
#error "cuda_emulator.h is for host compilers"
#endif

#define __shared__ static  // NOLINT: before host_defines.h, which then keeps it
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>
#include <vector_types.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// What a kernel reads to know who it is; set by the scheduler before it
// resumes a thread.
inline uint3 threadIdx;  // NOLINT
inline uint3 blockIdx;   // NOLINT

namespace kvtier::kernels::emulator {

enum class State { kReady, kShuffle, kSync, kDone };

struct Thread {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  State state = State::kReady;
  float value = 0;    // shuffle: this lane's value, then the result
  int lane_mask = 0;  // shuffle: xor offset
};

class Cta {
 public:
  // Runs `kernel` as CTA `block` of `threads` threads. Returns "" or what
  // went wrong.
  std::string Run(uint3 block, unsigned threads, const std::function<void()>& kernel) {
    current_ = this;
    kernel_ = &kernel;
    blockIdx = block;
    threads_ = std::vector<Thread>(threads);
    for (Thread& t : threads_) {
      t.stack = std::make_unique<char[]>(kStackBytes);
      getcontext(&t.context);
      t.context.uc_stack.ss_sp = t.stack.get();
      t.context.uc_stack.ss_size = kStackBytes;
      t.context.uc_link = &scheduler_;
      makecontext(&t.context, &Entry, 0);
    }
    for (;;) {
      for (unsigned i = 0; i < threads; ++i) {
        if (threads_[i].state != State::kReady) continue;
        running_ = i;
        threadIdx = uint3{i, 0, 0};
        swapcontext(&scheduler_, &threads_[i].context);
      }
      if (std::string error = Resolve(); !error.empty()) return error;
      bool all_done = true;
      bool any_ready = false;
      for (const Thread& t : threads_) {
        all_done = all_done && t.state == State::kDone;
        any_ready = any_ready || t.state == State::kReady;
      }
      if (all_done) return "";
      if (!any_ready) return "deadlock: threads wait at a barrier others never reach";
    }
  }

  static float Shuffle(float value, int lane_mask) {
    Thread& t = current_->threads_[current_->running_];
    t.state = State::kShuffle;
    t.value = value;
    t.lane_mask = lane_mask;
    swapcontext(&t.context, &current_->scheduler_);
    return t.value;
  }

  static void SyncThreads() {
    Thread& t = current_->threads_[current_->running_];
    t.state = State::kSync;
    swapcontext(&t.context, &current_->scheduler_);
  }

 private:
  static constexpr size_t kStackBytes = 256 * 1024;

  static void Entry() {
    (*current_->kernel_)();
    current_->threads_[current_->running_].state = State::kDone;
    // Returning resumes uc_link, the scheduler.
  }

  // Every thread is now at a synchronization point or done.
  std::string Resolve() {
    const auto n = static_cast<unsigned>(threads_.size());
    unsigned syncing = 0;
    unsigned done = 0;
    for (unsigned w = 0; w * 32 < n; ++w) {
      const unsigned first = w * 32;
      const unsigned last = first + 32 < n ? first + 32 : n;
      const State s = threads_[first].state;
      for (unsigned i = first; i < last; ++i) {
        if (threads_[i].state != s ||
            (s == State::kShuffle && threads_[i].lane_mask != threads_[first].lane_mask)) {
          return "divergent warp " + std::to_string(w) + ": lanes " + std::to_string(first) +
                 " and " + std::to_string(i) + " are at different synchronization points";
        }
      }
      if (s == State::kShuffle) {
        if (last - first != 32) return "shuffle in a partial warp";
        float values[32];
        for (unsigned i = 0; i < 32; ++i) values[i] = threads_[first + i].value;
        for (unsigned i = 0; i < 32; ++i) {
          Thread& t = threads_[first + i];
          t.value = values[i ^ static_cast<unsigned>(t.lane_mask)];
          t.state = State::kReady;
        }
      }
      if (s == State::kSync) syncing += last - first;
      if (s == State::kDone) done += last - first;
    }
    if (syncing > 0 && syncing + done == n) {
      if (done > 0) return "__syncthreads after some threads exited";
      for (Thread& t : threads_) t.state = State::kReady;
    }
    return "";
  }

  static inline Cta* current_ = nullptr;
  const std::function<void()>* kernel_ = nullptr;
  ucontext_t scheduler_{};
  std::vector<Thread> threads_;
  unsigned running_ = 0;
};

}  // namespace kvtier::kernels::emulator

// The intrinsics.
inline float __shfl_xor_sync(unsigned /*mask*/, float value, int lane_mask, int /*width*/ = 32) {
  return kvtier::kernels::emulator::Cta::Shuffle(value, lane_mask);
}
inline void __syncthreads() { kvtier::kernels::emulator::Cta::SyncThreads(); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }

namespace kvtier::kernels::emulator {

// Runs a grid of CTAs in order (x fastest), each with `threads` threads.
inline std::string RunGrid(uint3 grid, unsigned threads, const std::function<void()>& kernel) {
  Cta cta;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        if (std::string e = cta.Run(uint3{x, y, z}, threads, kernel); !e.empty()) {
          return "CTA (" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) +
                 "): " + e;
        }
      }
    }
  }
  return "";
}

}  // namespace kvtier::kernels::emulator

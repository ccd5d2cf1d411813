// ReplyRounds: small replies held to the end of the io loop's round and
// written together, as Redis writes its replies before it sleeps.
//
// Why. With many workers, a reply written as soon as it is made wakes its
// worker's thread (or a load generator's) while the daemon goes on with
// the next session's request: an inter-processor wake-up for nearly every
// reply, paid in the daemon's send (~2.6 µs of a ~6.5 µs LOOKUP at 50
// clients, docs/performance.md). Held to the end of the round (every
// request already read, answered) the replies leave back to back: the
// first wakes the reader, the rest find it awake. Measured on
// bench_control_plane (64 keys, 50 clients, pinned to cores of their own):
// 0.53x of the socket's limit before, 0.63x with the replies held.
//
// When. A round is one turn of the io loop (RunLoop: a run_one() or a
// poll()). Replies are held only while the last round that served anyone
// served more than one session: a lone worker's reply leaves at once, as
// before (holding it would cost it another epoll_wait before its send).
//
// Thread-safety: none; everything runs on the io thread.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "daemon/asio.h"

namespace kvtier::daemon {

class ReplyRounds {
 public:
  // Whether a session with replies to write waits for the round's end.
  bool holding() const { return holding_; }

  // A session answered requests in this round (once per batch it writes).
  void Served() { ++served_; }

  // Suspends the calling session until EndRound(). REQUIRES: holding().
  asio::awaitable<void> Wait() {
    co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
        [this](auto handler) {
          waiting_.push_back(std::make_unique<Held<decltype(handler)>>(std::move(handler)));
        },
        asio::use_awaitable);
  }

  // The round ends: the sessions that waited resume, in the order they
  // came, each to write its replies (those that wait for their worker to
  // read go back to the io loop). Whether the next round holds replies.
  void EndRound() {
    if (served_ > 0) holding_ = served_ > 1;
    served_ = 0;
    if (waiting_.empty()) return;
    resuming_.swap(waiting_);  // (a session resumed may wait again: next round)
    for (auto& w : resuming_) w->Resume();
    resuming_.clear();
  }

  // Sessions waiting for the round's end.
  size_t waiting() const { return waiting_.size(); }

 private:
  struct Waiter {
    virtual ~Waiter() = default;
    virtual void Resume() = 0;
  };
  // A suspended coroutine's completion handler; calling it resumes the
  // coroutine here, on the io thread.
  template <typename Handler>
  struct Held final : Waiter {
    explicit Held(Handler h) : handler(std::move(h)) {}
    void Resume() override { std::move(handler)(); }
    Handler handler;
  };

  std::vector<std::unique_ptr<Waiter>> waiting_;
  std::vector<std::unique_ptr<Waiter>> resuming_;
  size_t served_ = 0;  // sessions that answered requests this round
  bool holding_ = false;
};

}  // namespace kvtier::daemon

#include "daemon/readiness.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "daemon/log.h"

namespace kvtier::daemon {
namespace {

// Events taken a call: a burst of 50 clients' requests in one or two calls.
constexpr int kMaxEvents = 64;

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP | EPOLLET;
// What a reader must see (EPOLLOUT alone is not).
constexpr uint32_t kNews = EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR;

}  // namespace

ReadinessSet::Choice ReadinessSet::ParseChoice(const std::string& name) {
  if (name == "set") return Choice::kSet;
  if (name == "asio") return Choice::kAsio;
  return Choice::kAuto;
}

ReadinessSet::ReadinessSet(asio::io_context& io, Choice choice) : choice_(choice), epoll_(io) {
  if (choice_ == Choice::kAsio) return;  // (never used: ok() false)
  const int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) {
    Log(LogLevel::kWarn,
        Str("epoll_create1: ", std::strerror(errno), "; sessions wait for requests through Asio"));
    return;
  }
  boost::system::error_code ec;
  epoll_.assign(fd, ec);
  if (ec) {
    ::close(fd);
    Log(LogLevel::kWarn, Str("watching the sessions' epoll set: ", ec.message(),
                             "; sessions wait for requests through Asio"));
  }
}

ReadinessSet::~ReadinessSet() {
  // Each waiter leaves the list before its handler goes: destroying the
  // handler may destroy the session, and the waiter with it.
  while (Waiter* w = waiters_) {
    waiters_ = w->next_;
    if (waiters_ != nullptr) waiters_->prev_ = nullptr;
    w->set_ = nullptr;
    w->fd_ = -1;
    w->prev_ = w->next_ = nullptr;
    w->handler_.Reset();
  }
  boost::system::error_code ignored;
  epoll_.close(ignored);
}

bool ReadinessSet::Waiter::Watch(ReadinessSet& set, int fd) {
  if (!set.ok() || (set_ != nullptr && set_ != &set) || fd_ >= 0) return false;
  epoll_event ev{};
  ev.events = kReadEvents;
  ev.data.ptr = this;
  if (::epoll_ctl(set.epoll_.native_handle(), EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  if (set_ == nullptr) {
    set_ = &set;
    next_ = set.waiters_;
    if (next_ != nullptr) next_->prev_ = this;
    set.waiters_ = this;
  }
  fd_ = fd;
  want_out_ = false;
  // Bytes may have come before the socket joined the set: read first.
  ready_ = true;
  return true;
}

void ReadinessSet::Waiter::Unwatch() {
  if (set_ == nullptr || fd_ < 0) return;
  ::epoll_ctl(set_->epoll_.native_handle(), EPOLL_CTL_DEL, fd_, nullptr);
  fd_ = -1;
}

ReadinessSet::Waiter::~Waiter() {
  if (set_ == nullptr) return;
  Unwatch();
  if (prev_ != nullptr) {
    prev_->next_ = next_;
  } else {
    set_->waiters_ = next_;
  }
  if (next_ != nullptr) next_->prev_ = prev_;
  if (handler_.has_value()) --set_->waiting_;
}

void ReadinessSet::Waiter::WantWritable(bool want) {
  if (want == want_out_ || set_ == nullptr || fd_ < 0) return;
  epoll_event ev{};
  ev.events = kReadEvents | (want ? EPOLLOUT : 0u);
  ev.data.ptr = this;
  // (Should MOD fail, a write wait still ends: by its deadline.)
  if (::epoll_ctl(set_->epoll_.native_handle(), EPOLL_CTL_MOD, fd_, &ev) == 0) want_out_ = want;
}

void ReadinessSet::Waiter::Complete() {
  if (!handler_.has_value()) return;
  if (set_ != nullptr && --set_->waiting_ == 0) set_->Disarm();
  writing_ = false;
  handler_.Complete();
}

void ReadinessSet::Arm() {
  if (armed_ || !epoll_.is_open()) return;
  armed_ = true;
  epoll_.async_wait(asio::posix::descriptor_base::wait_read,
                    [this](const boost::system::error_code& ec) {
                      // Aborted: the set is gone (its destructor closed the
                      // descriptor), so `this` must not be touched.
                      if (ec == asio::error::operation_aborted) return;
                      armed_ = false;
                      if (ec) {
                        Log(LogLevel::kError, Str("the sessions' epoll set: ", ec.message()));
                      }
                      OnEvents();
                    });
}

void ReadinessSet::Disarm() {
  if (!armed_) return;
  // The wait on the set is what keeps io_context::run() going: with no
  // session waiting (they were stopped, say) it must not linger.
  armed_ = false;
  boost::system::error_code ignored;
  epoll_.cancel(ignored);  // (its handler, aborted, touches nothing)
}

void ReadinessSet::OnEvents() {
  std::array<epoll_event, kMaxEvents> events;
  int n = 0;
  do {
    n = ::epoll_wait(epoll_.native_handle(), events.data(), kMaxEvents, 0);
  } while (n < 0 && errno == EINTR);
  batch_.clear();
  for (int i = 0; i < n; ++i) {
    const epoll_event& ev = events[static_cast<size_t>(i)];
    auto* w = static_cast<Waiter*>(ev.data.ptr);
    const bool news = (ev.events & kNews) != 0;
    if (w->waiting()) {
      batch_.push_back(w);
      // A writer woken by news leaves it for the read after the write.
      if (w->writing_ && news) w->ready_ = true;
    } else if (news) {
      w->ready_ = true;  // its session is busy: it reads before it waits
    }
  }
  // Resumed after the loop over the events: a resumed session may end, and
  // only a waiter with a handler is sure to outlive the others' turns (its
  // handler owns its session). (No OnEvents runs inside this one: it is
  // only ever an Asio handler.)
  for (Waiter* w : batch_) w->Complete();
  if (waiting_ > 0) Arm();
}

}  // namespace kvtier::daemon

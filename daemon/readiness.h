// ReadinessSet: the sessions' sockets in an epoll set of kvtierd's own,
// edge-triggered, watched by the io loop as one descriptor.
//
// Why: a session that has answered a request waits for the next one. Asio
// (1.74) starts every read with a read attempt of its own, which fails
// (EAGAIN) whenever the worker is still busy with the reply, i.e. on every
// request of a ping-pong: two recv calls for each send. Here a session reads
// only when the kernel has said that bytes came, or when its last read
// filled the space it offered (there may be more): one recv a request. The
// set itself costs one epoll_wait and one re-arm a batch of ready sockets,
// not a request.
//
// Edge-triggered, so an event that comes while its session is busy (in the
// engine, or writing) is kept (Waiter::TakeReady), and a read that leaves
// bytes behind must be followed by another read, not a wait: Session reads
// again whenever a read filled its buffer.
//
// Only waiting for readability goes through here. The socket stays an Asio
// socket for everything else (writes that wait for the worker, refusals,
// close); when the set could not be made or a socket could not be added,
// the session reads through Asio as before.
//
// Thread-safety: everything runs on the io thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "daemon/asio.h"

namespace kvtier::daemon {

class ReadinessSet {
 public:
  class Waiter;

  // Where sessions wait (server.session_wait): here while many are busy
  // (dense()), always, or never.
  enum class Choice { kAuto, kSet, kAsio };
  // "auto", "set" or "asio" (anything else: auto).
  static Choice ParseChoice(const std::string& name);

  // Makes the epoll set; ok() says whether it could (if not, every Watch
  // fails and sessions read through Asio).
  explicit ReadinessSet(asio::io_context& io, Choice choice = Choice::kAuto);
  // Destroys the handlers still waiting (their sessions with them), as
  // io_context does with its own pending operations.
  ~ReadinessSet();
  ReadinessSet(const ReadinessSet&) = delete;
  ReadinessSet& operator=(const ReadinessSet&) = delete;

  bool ok() const { return epoll_.is_open(); }

  // Whether many sessions are busy at once, so that their reads are best
  // waited for here; with few, each is best left in Asio's reactor. A wait
  // here costs the set's epoll_wait and its re-arm (two calls) for every
  // batch of ready sockets, against Asio's failed read (one call) for
  // every request: the set wins from two sockets ready together, and at
  // 50 busy clients it sees ~40 a batch. Judged from how many sessions
  // read within the last kWindowReads reads (NoteRead): a count, no clock.
  bool dense() const { return dense_; }
  // Whether a session about to wait should wait here (the choice, and
  // dense() where it is auto).
  bool WaitHere() const { return choice_ == Choice::kSet || (choice_ == Choice::kAuto && dense_); }
  // Counts a session's read; `window` is the session's own (0 at first).
  void NoteRead(uint64_t* window) {
    if (*window != window_) {
      *window = window_;
      ++readers_;
    }
    if (++reads_ == kWindowReads) {
      dense_ = readers_ >= kDenseReaders;
      reads_ = 0;
      readers_ = 0;
      ++window_;
    }
  }

  // One socket's readability.
  class Waiter {
   public:
    Waiter() = default;
    ~Waiter();
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;

    // Adds the connected socket `fd` to `set`. False if it could not be
    // added (the caller reads through Asio). A waiter belongs to one set
    // and watches one socket at a time.
    bool Watch(ReadinessSet& set, int fd);
    // Takes the socket out of the set: before it goes back to Asio, and
    // before it is closed (an fd closed while a copy of it lives on, in a
    // child say, would stay in the set). A wait under way stays until
    // Complete().
    void Unwatch();
    bool watching() const { return fd_ >= 0; }

    // True (once) if the socket had news since the last wait: an event
    // came while nobody waited.
    bool TakeReady() { return std::exchange(ready_, false); }

    // Completes (with no error) when the socket has news: bytes, end of
    // file, an error; or at Complete(). Never completes inside this call:
    // ask TakeReady() first. One wait at a time.
    template <typename Token>
    auto AsyncWaitReadable(Token&& token) {
      return Wait(false, std::forward<Token>(token));
    }
    // Completes when the socket may take more bytes (or has news, or at
    // Complete()): for a write the worker is slow to read. News that comes
    // meanwhile is kept for TakeReady().
    template <typename Token>
    auto AsyncWaitWritable(Token&& token) {
      return Wait(true, std::forward<Token>(token));
    }
    bool waiting() const { return handler_.has_value(); }

    // Completes the wait now, if there is one (as if the socket had news).
    // Resumes the waiter inside this call: post it from a handler that
    // must not be re-entered.
    void Complete();

   private:
    friend class ReadinessSet;

    template <typename Token>
    auto Wait(bool writable, Token&& token) {
      return asio::async_initiate<Token, void(boost::system::error_code)>(
          [this, writable](auto handler) {
            WantWritable(writable);
            handler_.Store(std::move(handler));
            writing_ = writable;
            ++set_->waiting_;
            set_->Arm();
          },
          token);
    }
    // Adds EPOLLOUT to the socket's events (edge-triggered: a socket that
    // is writable now reports so at once), or takes it off. It stays from a
    // write wait to the next read wait: taken off and put back around each
    // retry, every re-arm would report the unread request again, and a
    // write waiting for a worker that sends but does not read would spin.
    void WantWritable(bool want);

    // The waiting handler, type-erased in place: a coroutine's handler
    // fits, so a wait allocates nothing.
    class Pending {
     public:
      Pending() = default;
      ~Pending() { Reset(); }
      Pending(const Pending&) = delete;
      Pending& operator=(const Pending&) = delete;

      template <typename H>
      void Store(H&& h) {
        using T = std::decay_t<H>;
        if constexpr (sizeof(T) <= kInline && alignof(T) <= alignof(std::max_align_t)) {
          new (buf_) T(std::forward<H>(h));
          complete_ = [](void* p) {
            T& held = *static_cast<T*>(p);
            T local(std::move(held));
            held.~T();
            local(boost::system::error_code());
          };
          destroy_ = [](void* p) { static_cast<T*>(p)->~T(); };
        } else {
          *reinterpret_cast<T**>(buf_) = new T(std::forward<H>(h));
          complete_ = [](void* p) {
            T* held = *static_cast<T**>(p);
            T local(std::move(*held));
            delete held;
            local(boost::system::error_code());
          };
          destroy_ = [](void* p) { delete *static_cast<T**>(p); };
        }
      }
      bool has_value() const { return complete_ != nullptr; }
      // Invokes the handler (moved out first, so it may wait again).
      void Complete() {
        auto* complete = std::exchange(complete_, nullptr);
        destroy_ = nullptr;
        if (complete != nullptr) complete(buf_);
      }
      void Reset() {
        auto* destroy = std::exchange(destroy_, nullptr);
        complete_ = nullptr;
        if (destroy != nullptr) destroy(buf_);
      }

     private:
      static constexpr size_t kInline = 96;
      alignas(std::max_align_t) unsigned char buf_[kInline];
      void (*complete_)(void*) = nullptr;
      void (*destroy_)(void*) = nullptr;
    };

    ReadinessSet* set_ = nullptr;
    int fd_ = -1;
    bool ready_ = false;
    bool writing_ = false;   // the wait is for writability
    bool want_out_ = false;  // EPOLLOUT is among the socket's events
    Pending handler_;
    // The set's list of its waiters (for teardown).
    Waiter* prev_ = nullptr;
    Waiter* next_ = nullptr;
  };

 private:
  // Waits (through Asio) for the set to have events, unless it already does.
  void Arm();
  // Stops waiting for the set (once no waiter waits).
  void Disarm();
  // Takes the events, marks their waiters ready and resumes those waiting.
  void OnEvents();

  static constexpr uint32_t kWindowReads = 128;
  static constexpr uint32_t kDenseReaders = 3;

  const Choice choice_;
  asio::posix::stream_descriptor epoll_;
  bool armed_ = false;
  bool dense_ = false;
  uint64_t window_ = 1;
  uint32_t reads_ = 0;
  uint32_t readers_ = 0;
  size_t waiting_ = 0;          // waiters with a handler
  Waiter* waiters_ = nullptr;   // every waiter watching a socket
  std::vector<Waiter*> batch_;  // OnEvents: those to resume
};

}  // namespace kvtier::daemon

// Session: one worker's connection. Reads frames, has the Service answer
// them, writes the replies in request order; on disconnect (or a malformed
// frame, or a missed deadline) it ends, and its open writes and leases go
// with it.
//
// Deadlines (DaemonConfig): a connection completes HELLO within
// hello_timeout_ms of connecting; a request frame arrives whole within
// frame_timeout_ms of its first byte; the worker takes each reply within
// reply_timeout_ms. Missing one closes the connection. None of them can
// hold up another session: every session is a coroutine on the io thread
// and none of them blocks it.
//
// Memory of one session: its input buffer (grows with the bytes that
// arrive, up to one frame, <= max_payload + 24 bytes), its reply buffer (the
// largest recent reply, <= max_payload) and small replies queued for one
// write (<= kMaxQueuedReplyBytes). Past that the session writes what is
// queued and reads no more requests until the worker takes it:
// backpressure, not an unbounded queue, and the reply deadline ends a
// worker that never reads.
//
// Thread-safety: everything runs on the io thread.
#pragma once

#include <chrono>
#include <memory>

#include "daemon/asio.h"
#include "daemon/log.h"
#include "daemon/readiness.h"
#include "daemon/service.h"

namespace kvtier::daemon {

// Small replies queued for one write, at most; then the session writes them
// before it reads another request.
inline constexpr size_t kMaxQueuedReplyBytes = 256 * 1024;

// Rate-limited lines shared by all sessions: one hostile client may open
// thousands of connections, and each kind of trouble is one line per 10 s.
struct SessionLogs {
  RateLimitedLog timeouts;  // hello, frame and reply deadlines missed
  RateLimitedLog denied;    // peers not on the allow lists
  RateLimitedLog full;      // connections past max_sessions
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `refusal`, when not OK, is the error reply to the connection's first
  // request, after which it closes: the peer may not attach (allow lists)
  // or the daemon serves max_sessions already. A refused connection is not
  // a session: it reads one frame header, at most hello_timeout_ms.
  // A session waits for its requests through `readiness` (where it can add
  // the socket), which must outlive it.
  Session(asio::local::stream_protocol::socket socket, Service& service, const DaemonConfig& config,
          SessionLogs& logs, ReadinessSet& readiness, PeerCredentials peer,
          Status refusal = Status::Ok());

  // Runs until the peer leaves, a frame is malformed, a deadline passes, or
  // Stop(). The coroutine owns `self`, so the session lives exactly as long
  // as it runs.
  static asio::awaitable<void> Run(std::shared_ptr<Session> self);
  // Ends the session after the request in flight: no more requests are read.
  void Stop();
  bool refusing() const { return !refusal_.ok(); }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Deadline { kNone, kHello, kFrame, kReply };

  asio::awaitable<void> Serve();
  asio::awaitable<void> Refuse();
  // Writes `frame` whole, with `fds` attached to its first byte; a write
  // that waits for the worker is bounded by reply_timeout_ms.
  asio::awaitable<Status> Send(std::span<const std::byte> frame, const std::vector<int>& fds);
  // Sends what of `*frame` the socket takes now, without waiting, and
  // leaves the rest in `*frame` (empty: all sent). False on an error that
  // ends the connection. Most replies leave whole here, with no coroutine.
  bool SendNow(std::span<const std::byte>* frame);
  // Reads what is there (at least a byte) into `into`; 0 at EOF, on an
  // error, or when `deadline` (unless kNone) passes first.
  asio::awaitable<size_t> ReadSome(std::span<std::byte> into, Deadline why, Clock::time_point at);
  // Arms the timer for the read about to start (disarms it for kNone).
  void ArmRead(Deadline why, Clock::time_point at);
  // The timer closes the connection at `at` unless re-armed or disarmed.
  void Arm(Deadline why, Clock::time_point at);
  void Disarm();
  void OnDeadline();
  // Moves the socket from Asio's reactor into the readiness set (`in_set`:
  // the session then waits there) or back, where it can; the fd stays open.
  void PlaceSocket(bool in_set);
  // Closes the socket (out of the readiness set first).
  void CloseSocket();
  // Resumes a wait for readability soon (posted), so that the session sees
  // the socket closed or shut down.
  void WakeReader();
  // When a stopping session gives up on a worker that does not read.
  static Clock::time_point StopDeadline();

  asio::local::stream_protocol::socket socket_;
  Service& service_;
  const DaemonConfig& config_;
  SessionLogs& logs_;
  const Status refusal_;
  SessionState state_;
  // A session's socket is in one epoll set at a time: Asio's (socket_)
  // while few sessions are busy, the readiness set's (fd_, own_fd_) while
  // many are (ReadinessSet::dense()). A refusing session, or one whose
  // socket the set could not take, stays with Asio.
  int Fd() { return own_fd_ ? fd_ : socket_.native_handle(); }
  ReadinessSet& readiness_;
  ReadinessSet::Waiter reader_;
  int fd_ = -1;  // while own_fd_; -1 once closed
  bool own_fd_ = false;
  uint64_t read_window_ = 0;  // ReadinessSet::NoteRead
  asio::steady_timer timer_;
  Deadline armed_ = Deadline::kNone;
  Clock::time_point armed_at_;
  bool stopping_ = false;
};

}  // namespace kvtier::daemon

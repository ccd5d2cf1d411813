#include "daemon/session.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "daemon/log.h"

namespace kvtier::daemon {
namespace {

// Sends the first part of `frame` with the fds attached (SCM_RIGHTS).
// Returns bytes sent, or -errno.
ssize_t SendWithFds(int sock, std::span<const std::byte> frame, const std::vector<int>& fds) {
  iovec iov{const_cast<std::byte*>(frame.data()), frame.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  if (!fds.empty()) {
    const size_t bytes = sizeof(int) * fds.size();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(bytes);
    std::memcpy(CMSG_DATA(c), fds.data(), bytes);
  }
  const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  return n >= 0 ? n : -errno;
}

// Sends what the socket takes now. Returns bytes sent, or -errno.
ssize_t SendSome(int sock, std::span<const std::byte> frame) {
  const ssize_t n = ::send(sock, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return n >= 0 ? n : -errno;
}

// Bytes asked of each read: a few requests' worth, or one big header.
constexpr size_t kReadChunk = 64 * 1024;

// What can be read of a header that failed to decode, so the error reply
// can still name the request.
static_assert(std::endian::native == std::endian::little, "the wire is little-endian");
protocol::FrameHeader RawHeader(std::span<const std::byte> header) {
  protocol::FrameHeader raw;
  uint16_t op = 0;
  std::memcpy(&raw.request_id, header.data() + 8, 8);
  std::memcpy(&op, header.data() + 6, 2);
  raw.opcode = static_cast<protocol::Opcode>(op);
  return raw;
}

}  // namespace

Session::Session(asio::local::stream_protocol::socket socket, Service& service,
                 const DaemonConfig& config, SessionLogs& logs, ReadinessSet& readiness,
                 PeerCredentials peer, Status refusal)
    : socket_(std::move(socket)),
      service_(service),
      config_(config),
      logs_(logs),
      refusal_(std::move(refusal)),
      readiness_(readiness),
      timer_(socket_.get_executor()) {
  state_.peer = peer;
}

void Session::PlaceSocket(bool in_set) {
  if (in_set == own_fd_) return;
  boost::system::error_code ec;
  if (in_set) {
    const int fd = socket_.native_handle();
    if (fd < 0 || !reader_.Watch(readiness_, fd)) return;
    socket_.release(ec);  // out of Asio's epoll set; the fd stays open
    if (ec) {
      reader_.Unwatch();
      return;
    }
    fd_ = fd;
    own_fd_ = true;
  } else if (fd_ >= 0) {
    reader_.Unwatch();
    socket_.assign(asio::local::stream_protocol(), fd_, ec);
    if (ec) {
      reader_.Watch(readiness_, fd_);  // (stays in the set)
      return;
    }
    fd_ = -1;
    own_fd_ = false;
  }
}

void Session::CloseSocket() {
  reader_.Unwatch();
  if (own_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void Session::WakeReader() {
  if (!reader_.waiting()) return;
  asio::post(socket_.get_executor(), [weak = weak_from_this()] {
    if (std::shared_ptr<Session> self = weak.lock()) self->reader_.Complete();
  });
}

void Session::Stop() {
  stopping_ = true;
  // A read in progress ends with EOF; a reply being written still goes out,
  // but a worker that does not read it gets a second, not reply_timeout_ms.
  if (Fd() >= 0) ::shutdown(Fd(), SHUT_RD);
  WakeReader();
  if (armed_ == Deadline::kReply) Arm(Deadline::kReply, std::min(armed_at_, StopDeadline()));
}

Session::Clock::time_point Session::StopDeadline() {
  return Clock::now() + std::chrono::seconds(1);
}

void Session::Arm(Deadline why, Clock::time_point at) {
  if (armed_ == why && armed_at_ == at) return;
  armed_ = why;
  armed_at_ = at;
  timer_.expires_at(at);  // cancels the previous wait, whose handler sees the error
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    if (std::shared_ptr<Session> self = weak.lock()) self->OnDeadline();
  });
}

void Session::Disarm() {
  if (armed_ == Deadline::kNone) return;
  armed_ = Deadline::kNone;
  timer_.cancel();
}

void Session::OnDeadline() {
  // A handler that was queued before a re-arm or a disarm must not act.
  if (armed_ == Deadline::kNone || Clock::now() < armed_at_) return;
  const Deadline why = std::exchange(armed_, Deadline::kNone);
  const std::string who =
      state_.attached     ? Str("session ", state_.id)
      : state_.peer.known ? Str("connection from pid ", state_.peer.pid, " uid ", state_.peer.uid)
                          : std::string("a connection");
  switch (why) {
    case Deadline::kHello:
      service_.CountRefusal(Refusal::kHelloTimeout);
      logs_.timeouts.Log(LogLevel::kWarn,
                         Str(who, " said no HELLO within ", config_.hello_timeout_ms,
                             " ms (server.hello_timeout_ms); closing it"));
      break;
    case Deadline::kFrame:
      service_.CountRefusal(Refusal::kFrameTimeout);
      logs_.timeouts.Log(LogLevel::kWarn,
                         Str(who, ": a request frame took over ", config_.frame_timeout_ms,
                             " ms to arrive (server.frame_timeout_ms); closing it"));
      break;
    case Deadline::kReply:
      service_.CountRefusal(Refusal::kReplyTimeout);
      logs_.timeouts.Log(LogLevel::kWarn,
                         stopping_
                             ? Str(who, ": a reply went unread while kvtierd stops; closing it")
                             : Str(who, ": a reply went unread for ", config_.reply_timeout_ms,
                                   " ms (server.reply_timeout_ms); closing it"));
      break;
    case Deadline::kNone:
      return;
  }
  // Ends the read or the write the coroutine waits in; it then cleans up.
  CloseSocket();
  WakeReader();
}

void Session::ArmRead(Deadline why, Clock::time_point at) {
  if (why == Deadline::kNone) {
    Disarm();
  } else {
    Arm(why, at);
  }
}

asio::awaitable<size_t> Session::ReadSome(std::span<std::byte> into, Deadline why,
                                          Clock::time_point at) {
  ArmRead(why, at);
  boost::system::error_code ec;
  const size_t n = co_await socket_.async_read_some(asio::buffer(into.data(), into.size()),
                                                    asio::redirect_error(asio::use_awaitable, ec));
  co_return ec ? 0 : n;
}

bool Session::SendNow(std::span<const std::byte>* frame) {
  const int sock = Fd();
  while (!frame->empty()) {
    const ssize_t n = SendSome(sock, *frame);
    if (n > 0) {
      *frame = frame->subspan(static_cast<size_t>(n));
    } else if (n == -EAGAIN || n == -EWOULDBLOCK) {
      return true;  // the rest waits for the worker to read (Send)
    } else if (n != -EINTR) {
      return false;
    }
  }
  return true;
}

asio::awaitable<Status> Session::Send(std::span<const std::byte> frame,
                                      const std::vector<int>& fds) {
  Status status;
  bool fds_pending = !fds.empty();
  bool waited = false;
  while (!frame.empty()) {
    const int sock = Fd();
    const ssize_t n = fds_pending ? SendWithFds(sock, frame, fds) : SendSome(sock, frame);
    if (n > 0) {
      frame = frame.subspan(static_cast<size_t>(n));
      fds_pending = false;  // the fds travelled with the first byte
      continue;
    }
    if (n == -EINTR) continue;
    if (n != -EAGAIN && n != -EWOULDBLOCK) {
      status =
          UnavailableError(n == 0 ? "send made no progress" : std::strerror(static_cast<int>(-n)));
      break;
    }
    // The worker is not reading. Only now is the deadline worth a timer:
    // most replies leave in one call.
    if (!waited) {
      const auto at = Clock::now() + std::chrono::milliseconds(config_.reply_timeout_ms);
      Arm(Deadline::kReply, stopping_ ? std::min(at, StopDeadline()) : at);
    }
    waited = true;
    boost::system::error_code ec;
    if (own_fd_) {
      // (A deadline closes the socket and completes the wait; the next
      // send then fails.)
      co_await reader_.AsyncWaitWritable(asio::redirect_error(asio::use_awaitable, ec));
    } else {
      co_await socket_.async_wait(asio::socket_base::wait_write,
                                  asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec) {
      status = UnavailableError(ec.message());
      break;
    }
  }
  if (waited) Disarm();
  co_return status;
}

asio::awaitable<void> Session::Run(std::shared_ptr<Session> self) {
  if (self->refusing()) {
    co_await self->Refuse();
  } else {
    co_await self->Serve();
  }
}

asio::awaitable<void> Session::Refuse() {
  // The error answers the first request, so the client reports it as the
  // reply to its HELLO; the header is all that is read.
  std::array<std::byte, protocol::kHeaderBytes> header;
  size_t got = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.hello_timeout_ms);
  while (got < header.size() && !stopping_) {
    const size_t n = co_await ReadSome(std::span(header).subspan(got), Deadline::kHello, deadline);
    if (n == 0) break;
    got += n;
  }
  if (got == header.size()) {
    const protocol::FrameHeader h = RawHeader(header);
    std::vector<std::byte> frame;
    protocol::EncodeError(h.opcode, h.request_id, refusal_, &frame);
    (co_await Send(frame, {})).IgnoreError();
  }
  Disarm();
  CloseSocket();
}

asio::awaitable<void> Session::Serve() {
  state_.id = service_.OpenSession();
  const auto max_payload = static_cast<uint32_t>(config_.max_payload_bytes);
  const auto hello_deadline = Clock::now() + std::chrono::milliseconds(config_.hello_timeout_ms);
  const auto frame_timeout = std::chrono::milliseconds(config_.frame_timeout_ms);
  // Input is read in chunks and parsed from a buffer, so one read syscall
  // serves a whole header and payload, or several pipelined requests; their
  // replies leave in one write.
  std::vector<std::byte> in(kReadChunk);
  size_t begin = 0, end = 0;
  std::vector<std::byte> out;
  // Reused for every request, so large replies (inline GET) allocate and
  // fault their pages in once, not per request.
  Reply reply;
  // Each request is decoded into this one, so that the keys of a LOOKUP
  // land in a vector grown once, not one allocated per request.
  protocol::Request request;
  size_t small_frames = 0;   // since the last one that grew `in`
  size_t small_replies = 0;  // since the last one that grew `reply.frame`
  // The frame at `begin` is incomplete, and began to arrive then (counted
  // from when the daemon was ready to read it, so time spent writing
  // replies is not held against it).
  bool partial = false;
  Clock::time_point frame_since;
  bool closing = false;
  bool may_read = false;  // the last read filled its space
  while (!closing) {
    while (!closing && end - begin >= protocol::kHeaderBytes) {
      const std::span<const std::byte> header(in.data() + begin, protocol::kHeaderBytes);
      reply.frame.clear();
      reply.fds.clear();
      reply.close = false;
      auto h = protocol::DecodeHeader(header, max_payload);
      if (!h) {
        service_.Malformed(RawHeader(header), h.status(), &reply);
      } else {
        const size_t frame = protocol::kHeaderBytes + h->payload_bytes;
        if (end - begin < frame) {
          // Make room for more of this frame. The buffer grows (doubling,
          // up to the frame) only as bytes fill it, so a header that
          // announces a large payload costs nothing until the payload comes.
          if (in.size() - begin < frame) {
            std::memmove(in.data(), in.data() + begin, end - begin);
            end -= begin;
            begin = 0;
            if (end == in.size()) in.resize(std::min(frame, 2 * in.size()));
            small_frames = 0;
          }
          break;
        }
        const auto payload =
            std::span(in).subspan(begin + protocol::kHeaderBytes, h->payload_bytes);
        if (Status decoded = protocol::DecodeRequest(*h, payload, config_.max_keys, &request);
            !decoded.ok()) {
          service_.Malformed(*h, decoded, &reply);
        } else if (!service_.HandleNow(state_, *h, request, &reply)) {
          co_await service_.Handle(state_, *h, request, &reply);
        }
        begin += frame;
        partial = false;
      }
      closing = reply.close;
      ++small_frames;
      if (reply.fds.empty() && reply.frame.size() < kReadChunk) {
        ++small_replies;
        out.insert(out.end(), reply.frame.begin(), reply.frame.end());
        // Backpressure: a worker that pipelines requests without reading
        // the replies gets no more read than the socket takes of these.
        if (out.size() >= kMaxQueuedReplyBytes) {
          if (!(co_await Send(out, {})).ok()) closing = true;
          out.clear();
        }
        continue;
      }
      small_replies = 0;
      // A reply with fds, or a large one (not worth a copy), goes alone,
      // after what was queued before it.
      if (!(co_await Send(out, {})).ok() || !(co_await Send(reply.frame, reply.fds)).ok()) {
        closing = true;
      }
      out.clear();
    }
    if (!out.empty()) {
      std::span<const std::byte> rest = out;
      if (!SendNow(&rest) || (!rest.empty() && !(co_await Send(rest, {})).ok())) break;
      out.clear();
    }
    if (closing || stopping_) break;

    if (begin == end) {
      begin = end = 0;
      // Keep buffers grown for large frames while they keep coming; give
      // them back once the connection has gone back to small ones.
      if (in.size() > 4 * kReadChunk && small_frames > 64) {
        in.assign(kReadChunk, std::byte{0});
        request = {};  // (its vectors may have grown with the large frames)
      }
      if (reply.frame.capacity() > 4 * kReadChunk && small_replies > 64) reply.frame = {};
    } else if (end == in.size()) {
      std::memmove(in.data(), in.data() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    // The deadline of this read: the frame under way, and HELLO.
    Deadline why = Deadline::kNone;
    Clock::time_point at = Clock::time_point::max();
    if (begin != end) {
      if (!partial) frame_since = Clock::now();
      partial = true;
      why = Deadline::kFrame;
      at = frame_since + frame_timeout;
    }
    if (!state_.attached && hello_deadline < at) {
      why = Deadline::kHello;
      at = hello_deadline;
    }
    ArmRead(why, at);
    size_t n = 0;
    const size_t space = in.size() - end;
    // Many sessions busy at once: wait in the readiness set; few: in Asio's
    // reactor, where a lone session's wait costs no call (ReadinessSet).
    PlaceSocket(readiness_.WaitHere());
    if (own_fd_) {
      // Read only when the kernel said bytes came, or the last read filled
      // its space (more may wait): one recv a request (ReadinessSet).
      for (;;) {
        if (!may_read && !reader_.TakeReady())
          co_await reader_.AsyncWaitReadable(asio::use_awaitable);
        may_read = false;
        if (stopping_) break;
        // (Closed by a deadline: -1, and recv fails.)
        const ssize_t got = ::recv(fd_, in.data() + end, space, MSG_DONTWAIT);
        if (got > 0) {
          n = static_cast<size_t>(got);
          may_read = n == space;
          break;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (got < 0 && errno == EINTR) {
          may_read = true;
          continue;
        }
        break;  // end of file, or an error: the connection ends
      }
    } else {
      // (Awaited here, not through ReadSome: a coroutine frame less.)
      boost::system::error_code ec;
      n = co_await socket_.async_read_some(asio::buffer(in.data() + end, space),
                                           asio::redirect_error(asio::use_awaitable, ec));
      if (ec) n = 0;
    }
    readiness_.NoteRead(&read_window_);
    if (n == 0) break;  // the peer left (perhaps mid-frame), a deadline passed, or Stop()
    end += n;
  }
  Disarm();
  CloseSocket();
  if (!state_.allocations.empty() || !state_.leases.empty()) {
    Log(LogLevel::kInfo, Str("session ", state_.id, " left with ", state_.allocations.size(),
                             " open writes and ", state_.leases.size(), " leases; freeing them"));
  }
  service_.CloseSession(state_);
}

}  // namespace kvtier::daemon

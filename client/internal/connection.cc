#include "client/internal/connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/spin_governor.h"

namespace kvtier::client::internal {
namespace {

// Room for more descriptors than HELLO ever sends (2), so that a daemon
// sending more is seen as an error instead of silently truncated.
constexpr size_t kMaxFds = 4;

std::string ErrnoText(int err) { return err == 0 ? std::string() : std::strerror(err); }

Status SetTimeouts(int fd, uint32_t timeout_ms) {
  if (timeout_ms == 0) return Status::Ok();
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout_ms % 1000) * 1000);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return InternalError(std::string("setsockopt(SO_RCVTIMEO): ") + ErrnoText(errno));
  }
  return Status::Ok();
}

// connect() interrupted by a signal goes on in the background; wait for it
// and fetch its outcome instead of calling connect() again (EALREADY).
int FinishInterruptedConnect(int fd) {
  pollfd p{fd, POLLOUT, 0};
  while (poll(&p, 1, -1) < 0) {
    if (errno != EINTR) return errno;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                     uint32_t io_timeout_ms,
                                                     uint32_t busy_poll_us) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("socket path '" + path + "' is empty or longer than " +
                                std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());

  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError("kvtierd at " + path + ": socket: " + ErrnoText(errno));
  std::unique_ptr<Connection> conn(new Connection(fd, path, io_timeout_ms, busy_poll_us));
  KVTIER_RETURN_IF_ERROR(SetTimeouts(fd, io_timeout_ms));
  // sockaddr_un is what connect() takes; the cast is the sockets API.
  const auto* sa = reinterpret_cast<const sockaddr*>(&addr);
  int err = 0;
  if (connect(fd, sa, sizeof(addr)) != 0) {
    err = errno == EINTR ? FinishInterruptedConnect(fd) : errno;
  }
  if (err != 0) {
    return UnavailableError("kvtierd at " + path + ": cannot connect: " + ErrnoText(err));
  }
  return conn;
}

Connection::Connection(int fd, std::string path, uint32_t io_timeout_ms, uint32_t busy_poll_us)
    : fd_(fd), path_(std::move(path)), io_timeout_ms_(io_timeout_ms), busy_poll_us_(busy_poll_us) {}

Connection::~Connection() {
  for (int fd : fds_) close(fd);
  close(fd_);
}

std::vector<int> Connection::TakeFds() { return std::exchange(fds_, {}); }

Status Connection::Break(Status status) {
  if (broken_.ok()) broken_ = status;
  return status;
}

Status Connection::BrokenError() const {
  return UnavailableError("kvtierd at " + path_ + ": connection unusable after an earlier error (" +
                          broken_.ToString() + ")");
}

Status Connection::SocketError(std::string_view what, int err) {
  std::string msg = "kvtierd at " + path_ + ": " + std::string(what);
  if (err != 0) msg += ": " + ErrnoText(err);
  return Break(UnavailableError(msg));
}

Status Connection::Send(std::span<const std::byte> bytes) {
  if (broken()) return BrokenError();
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return SocketError("send timed out", ETIMEDOUT);
    } else if (errno != EINTR) {
      return SocketError("send", errno);
    }
  }
  return Status::Ok();
}

void Connection::CollectFds(const void* msg_ptr) {
  const auto* msg = static_cast<const msghdr*>(msg_ptr);
  // CMSG_* are the kernel's macros; they cast internally.
  for (const cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(msg), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds_.push_back(fd);
    }
  }
}

Status Connection::ReadSome(bool dont_wait, bool* done) {
  *done = false;
  const bool in_header = header_have_ < protocol::kHeaderBytes;
  iovec iov{};
  if (in_header) {
    iov.iov_base = header_buf_.data() + header_have_;
    iov.iov_len = protocol::kHeaderBytes - header_have_;
  } else {
    iov.iov_base = frame_.payload.data() + payload_have_;
    iov.iov_len = frame_.payload.size() - payload_have_;
  }
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const int flags = MSG_CMSG_CLOEXEC | (dont_wait ? MSG_DONTWAIT : 0);
  const ssize_t n = recvmsg(fd_, &msg, flags);
  if (n < 0) {
    if (errno == EINTR) return Status::Ok();
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return dont_wait ? Status::Ok() : SocketError("timed out waiting for a reply", ETIMEDOUT);
    }
    return SocketError("recvmsg", errno);
  }
  CollectFds(&msg);
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return SocketError("reply carried more than " + std::to_string(kMaxFds) + " descriptors", 0);
  }
  if (n == 0) return SocketError("connection closed by the daemon", 0);
  if (in_header) {
    header_have_ += static_cast<size_t>(n);
    if (header_have_ < protocol::kHeaderBytes) return Status::Ok();
    auto header = protocol::DecodeHeader(header_buf_, protocol::kMaxPayloadBytes);
    if (!header.ok()) {
      return Break(InvalidArgumentError("kvtierd at " + path_ + ": malformed reply header: " +
                                        std::string(header.error().message())));
    }
    frame_.header = *header;
    frame_.payload.resize(header->payload_bytes);
    payload_have_ = 0;
  } else {
    payload_have_ += static_cast<size_t>(n);
  }
  *done = payload_have_ == frame_.payload.size();
  if (*done) header_have_ = 0;
  return Status::Ok();
}

Result<const Frame*> Connection::Receive() {
  if (broken()) return BrokenError();
  bool done = false;
  // Poll first: a reply usually comes within microseconds, and sleeping
  // costs a wake-up across CPUs that is longer than the request itself;
  // but not on a shared core, where spinning takes the CPU from the daemon.
  thread_local SpinGovernor governor;
  if (busy_poll_us_ > 0 && governor.MaySpin()) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(busy_poll_us_);
    while (!done && std::chrono::steady_clock::now() < until) {
      KVTIER_RETURN_IF_ERROR(ReadSome(/*dont_wait=*/true, &done));
    }
  }
  while (!done) KVTIER_RETURN_IF_ERROR(ReadSome(/*dont_wait=*/false, &done));
  payload_have_ = 0;
  return &frame_;
}

Status Connection::Pipeline(std::span<const std::byte> bytes, size_t replies,
                            const std::function<Status(const Frame&)>& on_reply) {
  if (broken()) return BrokenError();
  Status first_error;
  size_t sent = 0;
  size_t received = 0;
  const int timeout = io_timeout_ms_ == 0 ? -1 : static_cast<int>(io_timeout_ms_);
  while (received < replies) {
    const bool sending = sent < bytes.size();
    pollfd p{fd_, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    const int ready = poll(&p, 1, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return SocketError("poll", errno);
    if (ready == 0) return SocketError("timed out waiting for a reply", ETIMEDOUT);
    if (sending && (p.revents & POLLOUT) != 0) {
      const ssize_t n =
          send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) {
        sent += static_cast<size_t>(n);
      } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        return SocketError("send", errno);
      }
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    bool done = false;
    KVTIER_RETURN_IF_ERROR(ReadSome(/*dont_wait=*/true, &done));
    if (!done) continue;
    payload_have_ = 0;
    if (++received == replies && sent < bytes.size()) {
      // Every reply came before all requests were sent: the stream is out of step.
      return Break(InvalidArgumentError("kvtierd at " + path_ + ": more replies than requests"));
    }
    Status s = on_reply(frame_);
    if (first_error.ok() && !s.ok()) first_error = std::move(s);
  }
  return first_error;
}

}  // namespace kvtier::client::internal

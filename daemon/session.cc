#include "daemon/session.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

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
  const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  return n >= 0 ? n : -errno;
}

}  // namespace

Session::Session(asio::local::stream_protocol::socket socket, Service& service,
                 const DaemonConfig& config)
    : socket_(std::move(socket)), service_(service), config_(config) {}

void Session::Stop() {
  stopping_ = true;
  // A read in progress ends with EOF; a reply being written still goes out.
  boost::system::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_receive, ignored);
}

asio::awaitable<Status> Session::Send(const Reply& reply) {
  std::span<const std::byte> frame(reply.frame);
  if (!reply.fds.empty()) {
    // The fds travel with the first byte; retry until the kernel takes it.
    for (;;) {
      const ssize_t n = SendWithFds(socket_.native_handle(), frame, reply.fds);
      if (n > 0) {
        frame = frame.subspan(static_cast<size_t>(n));
        break;
      }
      if (n != -EAGAIN && n != -EWOULDBLOCK && n != -EINTR) {
        co_return UnavailableError(std::strerror(static_cast<int>(-n)));
      }
      boost::system::error_code ec;
      co_await socket_.async_wait(asio::socket_base::wait_write,
                                  asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return UnavailableError(ec.message());
    }
  }
  boost::system::error_code ec;
  co_await asio::async_write(socket_, asio::buffer(frame.data(), frame.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return UnavailableError(ec.message());
  co_return Status::Ok();
}

asio::awaitable<void> Session::Run(std::shared_ptr<Session> self) { co_await self->Serve(); }

asio::awaitable<void> Session::Serve() {
  state_.id = service_.OpenSession();
  std::array<std::byte, protocol::kHeaderBytes> header;
  std::vector<std::byte> payload;
  Reply reply;
  while (!stopping_) {
    boost::system::error_code ec;
    co_await asio::async_read(socket_, asio::buffer(header),
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;  // the peer left, or Stop()
    reply = Reply{};
    auto h = protocol::DecodeHeader(header, static_cast<uint32_t>(config_.max_payload_bytes));
    if (!h) {
      // Echo what can be read of the header so the client can match it.
      protocol::FrameHeader raw;
      std::memcpy(&raw.request_id, header.data() + 8, 8);
      uint16_t op;
      std::memcpy(&op, header.data() + 6, 2);
      raw.opcode = static_cast<protocol::Opcode>(op);
      service_.Malformed(raw, h.status(), &reply);
    } else {
      payload.resize(h->payload_bytes);
      co_await asio::async_read(socket_, asio::buffer(payload),
                                asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;  // truncated frame: the peer left mid-request
      auto request = protocol::DecodeRequest(*h, payload, config_.max_keys);
      if (!request) {
        service_.Malformed(*h, request.status(), &reply);
      } else {
        co_await service_.Handle(state_, *h, *request, &reply);
      }
    }
    const Status sent = co_await Send(reply);
    if (!sent.ok() || reply.close) break;
  }
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (!state_.allocations.empty() || !state_.leases.empty()) {
    Log(LogLevel::kInfo, Str("session ", state_.id, " left with ", state_.allocations.size(),
                             " open writes and ", state_.leases.size(), " leases; freeing them"));
  }
  service_.CloseSession(state_);
}

}  // namespace kvtier::daemon

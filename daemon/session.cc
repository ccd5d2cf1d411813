#include "daemon/session.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <bit>
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
                 const DaemonConfig& config)
    : socket_(std::move(socket)), service_(service), config_(config) {}

void Session::Stop() {
  stopping_ = true;
  // A read in progress ends with EOF; a reply being written still goes out.
  boost::system::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_receive, ignored);
}

asio::awaitable<Status> Session::Send(std::span<const std::byte> frame,
                                      const std::vector<int>& fds) {
  if (frame.empty()) co_return Status::Ok();
  if (!fds.empty()) {
    // The fds travel with the first byte; retry until the kernel takes it.
    for (;;) {
      const ssize_t n = SendWithFds(socket_.native_handle(), frame, fds);
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
  const auto max_payload = static_cast<uint32_t>(config_.max_payload_bytes);
  // Input is read in chunks and parsed from a buffer, so one read syscall
  // serves a whole header and payload, or several pipelined requests; their
  // replies leave in one write.
  std::vector<std::byte> in(kReadChunk);
  size_t begin = 0, end = 0;
  std::vector<std::byte> out;
  // Reused for every request, so large replies (inline GET) allocate and
  // fault their pages in once, not per request.
  Reply reply;
  size_t small_frames = 0;  // since the last one that grew `in`
  bool closing = false;
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
          // Make room for the rest of this frame, then read it.
          if (in.size() - begin < frame) {
            std::memmove(in.data(), in.data() + begin, end - begin);
            end -= begin;
            begin = 0;
            if (in.size() < frame) in.resize(frame);
            small_frames = 0;
          }
          break;
        }
        const auto payload =
            std::span(in).subspan(begin + protocol::kHeaderBytes, h->payload_bytes);
        auto request = protocol::DecodeRequest(*h, payload, config_.max_keys);
        if (!request) {
          service_.Malformed(*h, request.status(), &reply);
        } else {
          co_await service_.Handle(state_, *h, *request, &reply);
        }
        begin += frame;
      }
      closing = reply.close;
      ++small_frames;
      if (reply.fds.empty() && reply.frame.size() < kReadChunk) {
        out.insert(out.end(), reply.frame.begin(), reply.frame.end());
        continue;
      }
      // A reply with fds, or a large one (not worth a copy), goes alone,
      // after what was queued before it.
      if (!(co_await Send(out, {})).ok() || !(co_await Send(reply.frame, reply.fds)).ok()) {
        closing = true;
      }
      out.clear();
    }
    if (!out.empty()) {
      if (!(co_await Send(out, {})).ok()) break;
      out.clear();
    }
    if (closing || stopping_) break;

    if (begin == end) {
      begin = end = 0;
      // Keep a buffer grown for large frames while they keep coming; give
      // it back once the connection has gone back to small requests.
      if (in.size() > 4 * kReadChunk && small_frames > 64) in.assign(kReadChunk, std::byte{0});
    } else if (end == in.size()) {
      std::memmove(in.data(), in.data() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    boost::system::error_code ec;
    const size_t n =
        co_await socket_.async_read_some(asio::buffer(in.data() + end, in.size() - end),
                                         asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;  // the peer left (perhaps mid-frame), or Stop()
    end += n;
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

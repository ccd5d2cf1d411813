// Connection: one blocking, framed Unix-socket connection to kvtierd.
//
// It moves whole frames (protocol/wire.h) and the file descriptors the daemon
// passes with SCM_RIGHTS; it knows nothing of opcodes beyond the header.
// Every read goes through recvmsg() with room for descriptors, so a
// descriptor can never be dropped by a read that did not expect one.
//
// After a socket error or an undecodable header the byte stream cannot be
// trusted any more: the connection is *broken* and every later call fails
// with Unavailable without touching the socket.
//
// Thread-safety: none; one owner (the Client).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "protocol/wire.h"

namespace kvtier::client::internal {

struct Frame {
  protocol::FrameHeader header;
  std::vector<std::byte> payload;
};

class Connection {
 public:
  // Connects to the Unix socket at `path`. `io_timeout_ms` bounds each wait
  // for the socket (0: wait forever). Receive() polls for a reply for up to
  // `busy_poll_us` before it sleeps.
  static Result<std::unique_ptr<Connection>> Open(const std::string& path, uint32_t io_timeout_ms,
                                                  uint32_t busy_poll_us = 0);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Writes all of `bytes`.
  Status Send(std::span<const std::byte> bytes);
  // Reads one whole frame. The frame lives in the connection, valid until
  // the next Receive or Pipeline: its buffer is reused, so a stream of large
  // replies costs no allocation or page faults after the first.
  Result<const Frame*> Receive();
  // Writes `bytes`, which hold `replies` requests, while reading their
  // replies as they arrive: writing everything first could deadlock once
  // both sides' socket buffers are full. `on_reply` sees each reply in
  // order; the first error it returns is returned after all replies were
  // read, so the stream stays in step.
  Status Pipeline(std::span<const std::byte> bytes, size_t replies,
                  const std::function<Status(const Frame&)>& on_reply);

  // Descriptors received so far; the caller owns them.
  std::vector<int> TakeFds();

  // Marks the connection broken with `status` (a reply that put the stream
  // out of step) and returns it.
  Status Break(Status status);
  bool broken() const { return !broken_.ok(); }
  // Unavailable, naming the error that broke the connection.
  Status BrokenError() const;

  const std::string& path() const { return path_; }

 private:
  Connection(int fd, std::string path, uint32_t io_timeout_ms, uint32_t busy_poll_us);

  // Unavailable("kvtierd at PATH: what: strerror(err)"); breaks the connection.
  Status SocketError(std::string_view what, int err);
  // Reads what the frame in progress still needs. Sets *done when it is
  // complete; with `dont_wait`, returns with nothing read if nothing is there.
  Status ReadSome(bool dont_wait, bool* done);
  // Appends the descriptors of a received control message to fds_.
  void CollectFds(const void* msg);

  int fd_;
  std::string path_;
  uint32_t io_timeout_ms_;
  uint32_t busy_poll_us_;
  Status broken_;
  std::vector<int> fds_;

  // The frame being read: header bytes first, then the payload.
  std::array<std::byte, protocol::kHeaderBytes> header_buf_{};
  size_t header_have_ = 0;
  Frame frame_;
  size_t payload_have_ = 0;
};

}  // namespace kvtier::client::internal

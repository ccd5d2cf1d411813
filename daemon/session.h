// Session: one worker's connection. Reads frames, has the Service answer
// them, writes the replies in request order; on disconnect (or a malformed
// frame) it ends, and its open writes and leases go with it.
#pragma once

#include <memory>

#include "daemon/asio.h"
#include "daemon/service.h"

namespace kvtier::daemon {

class Session {
 public:
  Session(asio::local::stream_protocol::socket socket, Service& service,
          const DaemonConfig& config);

  // Runs until the peer leaves, a frame is malformed, or Stop(). The
  // coroutine owns `self`, so the session lives exactly as long as it runs.
  static asio::awaitable<void> Run(std::shared_ptr<Session> self);
  // Ends the session after the request in flight: no more requests are read.
  void Stop();

 private:
  asio::awaitable<void> Serve();
  // Writes `frame` whole, with `fds` attached to its first byte.
  asio::awaitable<Status> Send(std::span<const std::byte> frame, const std::vector<int>& fds);

  asio::local::stream_protocol::socket socket_;
  Service& service_;
  const DaemonConfig& config_;
  SessionState state_;
  bool stopping_ = false;
};

}  // namespace kvtier::daemon

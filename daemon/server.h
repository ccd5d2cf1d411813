// Server: the Unix socket, the sessions on it, and a graceful stop.
//
// One io thread runs the acceptor, every session and the engine, so the
// engine's state has one owner and needs no locks (DESIGN.md §3); bulk copies
// go to the Service's copy pool.
#pragma once

#include <list>
#include <memory>
#include <string>

#include "daemon/asio.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/service.h"

namespace kvtier::daemon {

class Session;

class Server {
 public:
  // Binds the socket: a stale socket file left by a crash is replaced; a
  // live one (another daemon answers on it) is an error, as is a path that
  // exists and is not a socket.
  static Result<std::unique_ptr<Server>> Create(asio::io_context& io, Service& service,
                                                const DaemonConfig& config);
  ~Server();

  // Starts accepting. Returns at once; the io_context runs the work.
  void Start();
  // Stops accepting, lets every session finish the request in flight, then
  // closes them, and removes the socket file. Idempotent.
  void Stop();

  const std::string& socket_path() const { return path_; }

 private:
  Server(asio::io_context& io, Service& service, const DaemonConfig& config,
         asio::local::stream_protocol::acceptor acceptor);
  asio::awaitable<void> Accept();

  asio::io_context& io_;
  Service& service_;
  const DaemonConfig& config_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::string path_;
  std::list<std::weak_ptr<Session>> sessions_;
  bool stopping_ = false;
  RateLimitedLog accept_log_;  // accept errors (out of fds) come in bursts
};

}  // namespace kvtier::daemon

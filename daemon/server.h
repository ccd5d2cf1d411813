// Server: the Unix socket, the sessions on it, and a graceful stop.
//
// One io thread runs the acceptor, every session and the engine, so the
// engine's state has one owner and needs no locks (DESIGN.md §3); bulk copies
// go to the Service's copy pool.
//
// Access (docs/security.md): the socket file's mode, owner and group say who
// may connect; at accept the peer's SO_PEERCRED pid, uid and gid are read,
// checked against server.allow_uids / allow_gids when either is set, and
// logged when the session attaches. A connection refused (not allowed, or
// past server.max_sessions) gets an error reply to its first request and is
// closed; at most kMaxRefusing wait for theirs at once, the rest are closed
// at accept.
#pragma once

#include <list>
#include <memory>
#include <string>

#include "daemon/asio.h"
#include "daemon/config.h"
#include "daemon/log.h"
#include "daemon/readiness.h"
#include "daemon/service.h"
#include "daemon/session.h"

namespace kvtier::daemon {

class Session;

// Refused connections waiting for their first request at once, at most.
inline constexpr size_t kMaxRefusing = 64;

class Server {
 public:
  // Binds the socket: a stale socket file left by a crash is replaced; a
  // live one (another daemon answers on it) is an error, as is a path that
  // exists and is not a socket. Sets its owner, group and mode before it
  // listens, so no one connects under other permissions. Raises the soft
  // fd limit to hold max_sessions connections where the hard one allows.
  static Result<std::unique_ptr<Server>> Create(asio::io_context& io, Service& service,
                                                const DaemonConfig& config);
  ~Server();

  // Starts accepting. Returns at once; the io_context runs the work.
  void Start();
  // Stops accepting, lets every session finish the request in flight, then
  // closes them, and removes the socket file. Idempotent.
  void Stop();

  const std::string& socket_path() const { return path_; }
  bool stopping() const { return stopping_; }
  // Connections open now: attached, still to say HELLO, or being refused.
  size_t open_connections() const;

 private:
  Server(asio::io_context& io, Service& service, const DaemonConfig& config,
         asio::local::stream_protocol::acceptor acceptor);
  asio::awaitable<void> Accept();
  // Why a new connection from `peer` may not have a session; OK if it may.
  Status Admit(const PeerCredentials& peer);

  asio::io_context& io_;
  Service& service_;
  const DaemonConfig& config_;
  asio::local::stream_protocol::acceptor acceptor_;
  // Where the sessions wait for their requests.
  ReadinessSet readiness_;
  std::string path_;
  std::list<std::weak_ptr<Session>> sessions_;
  std::list<std::weak_ptr<Session>> refusing_;  // refused, answering their first request
  bool stopping_ = false;
  RateLimitedLog accept_log_;  // accept errors (out of fds) come in bursts
  SessionLogs session_logs_;
};

}  // namespace kvtier::daemon

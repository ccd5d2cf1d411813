#include "daemon/server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "daemon/log.h"

namespace kvtier::daemon {
namespace {

using asio::local::stream_protocol;

// True if a process accepts connections on the socket at `path`.
bool SomeoneListens(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

// Makes `path` free to bind: creates its directory, removes a stale socket.
Status PreparePath(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(Str("cannot create ", dir.string(), ": ", ec.message()));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return IoError(Str(path, ": ", std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPreconditionError(Str(path, " exists and is not a socket; not touching it"));
  }
  if (SomeoneListens(path)) {
    return UnavailableError(Str("another kvtierd is listening on ", path));
  }
  Log(LogLevel::kWarn, Str("removing stale socket ", path, " (left by a crash?)"));
  if (::unlink(path.c_str()) != 0) return IoError(Str("unlink ", path, ": ", std::strerror(errno)));
  return Status::Ok();
}

// Owner, group and mode of the bound socket file, before it listens.
Status SetPermissions(const DaemonConfig& config) {
  if (!config.socket_owner.empty() || !config.socket_group.empty()) {
    uid_t uid = static_cast<uid_t>(-1);  // -1: unchanged
    gid_t gid = static_cast<gid_t>(-1);
    if (!config.socket_owner.empty()) {
      KVTIER_ASSIGN_OR_RETURN(uid, ResolveUser(config.socket_owner));
    }
    if (!config.socket_group.empty()) {
      KVTIER_ASSIGN_OR_RETURN(gid, ResolveGroup(config.socket_group));
    }
    if (::chown(config.socket_path.c_str(), uid, gid) != 0) {
      const int err = errno;
      return IoError(Str("chown ", config.socket_path, " to owner '", config.socket_owner,
                         "' group '", config.socket_group,
                         "' (server.socket_owner, server.socket_group): ", std::strerror(err),
                         err == EPERM ? " (another owner needs CAP_CHOWN; another group needs "
                                        "the daemon's user in it)"
                                      : ""));
    }
  }
  if (::chmod(config.socket_path.c_str(), static_cast<mode_t>(config.socket_mode)) != 0) {
    return IoError(Str("chmod ", config.socket_path, ": ", std::strerror(errno)));
  }
  return Status::Ok();
}

// Every session holds an fd; raise the soft limit to fit max_sessions and
// the daemon's own files, as far as the hard limit allows.
void RaiseFdLimit(uint32_t max_sessions) {
  constexpr rlim_t kOwnFds = 256;  // arenas, the ssd tier, RocksDB, metrics
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t want = max_sessions + kOwnFds;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = std::min(want, rl.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < want) {
    Log(LogLevel::kWarn,
        Str("the fd limit (", rl.rlim_cur, ") is below server.max_sessions (", max_sessions, ") + ",
            kOwnFds, "; connections past it wait until others close (raise LimitNOFILE)"));
  }
}

PeerCredentials PeerOf(int fd) {
  PeerCredentials peer;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof cred) {
    peer.known = true;
    peer.pid = cred.pid;
    peer.uid = cred.uid;
    peer.gid = cred.gid;
  }
  return peer;
}

bool Listed(const std::vector<uint32_t>& ids, uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(asio::io_context& io, Service& service,
                                               const DaemonConfig& config) {
  KVTIER_RETURN_IF_ERROR(PreparePath(config.socket_path));
  stream_protocol::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(stream_protocol(), ec);
  if (!ec) {
    // Bind under a umask that yields the configured mode, so the socket is
    // never reachable with wider permissions, even for an instant; nothing
    // can connect before listen() anyway, which comes after the owner and
    // group are set.
    const mode_t old = ::umask(static_cast<mode_t>(~config.socket_mode & 0777));
    acceptor.bind(stream_protocol::endpoint(config.socket_path), ec);
    ::umask(old);
  }
  if (ec) return IoError(Str("cannot bind ", config.socket_path, ": ", ec.message()));
  if (Status s = SetPermissions(config); !s.ok()) {
    ::unlink(config.socket_path.c_str());
    return s;
  }
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    ::unlink(config.socket_path.c_str());
    return IoError(Str("cannot listen on ", config.socket_path, ": ", ec.message()));
  }
  RaiseFdLimit(config.max_sessions);
  return std::unique_ptr<Server>(new Server(io, service, config, std::move(acceptor)));
}

Server::Server(asio::io_context& io, Service& service, const DaemonConfig& config,
               stream_protocol::acceptor acceptor)
    : io_(io),
      service_(service),
      config_(config),
      acceptor_(std::move(acceptor)),
      readiness_(io, ReadinessSet::ParseChoice(config.session_wait)),
      path_(config.socket_path) {}

Server::~Server() { Stop(); }

void Server::Start() { asio::co_spawn(io_, Accept(), asio::detached); }

Status Server::Admit(const PeerCredentials& peer) {
  const bool restricted = !config_.allow_uids.empty() || !config_.allow_gids.empty();
  if (restricted && !(peer.known && (Listed(config_.allow_uids, peer.uid) ||
                                     Listed(config_.allow_gids, peer.gid)))) {
    const std::string who = peer.known ? Str("pid ", peer.pid, " uid ", peer.uid, " gid ", peer.gid)
                                       : std::string("a peer of unknown uid");
    service_.CountRefusal(Refusal::kPermissionDenied);
    session_logs_.denied.Log(
        LogLevel::kWarn,
        Str("refused a connection from ", who, ": not in server.allow_uids or server.allow_gids"));
    return PermissionDeniedError(
        Str("permission denied: ", who,
            " may not attach to this kvtierd (server.allow_uids, server.allow_gids)"));
  }
  if (sessions_.size() >= config_.max_sessions) {
    service_.CountRefusal(Refusal::kMaxSessions);
    session_logs_.full.Log(LogLevel::kWarn,
                           Str("refused a connection: ", sessions_.size(),
                               " sessions open, the most allowed (server.max_sessions)"));
    return ResourceExhaustedError(Str("kvtierd serves ", sessions_.size(),
                                      " sessions, the most allowed (server.max_sessions); "
                                      "try again when one has closed"));
  }
  return Status::Ok();
}

asio::awaitable<void> Server::Accept() {
  asio::steady_timer backoff(io_);
  while (!stopping_) {
    boost::system::error_code ec;
    stream_protocol::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) break;
      accept_log_.Log(LogLevel::kWarn, Str("accept: ", ec.message()));
      // Out of fds (or memory): the connection stays in the backlog and
      // accept would fail again at once; wait for sessions to close rather
      // than spin.
      backoff.expires_after(std::chrono::milliseconds(100));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    auto expired = [](const std::weak_ptr<Session>& w) { return w.expired(); };
    sessions_.remove_if(expired);
    refusing_.remove_if(expired);
    const PeerCredentials peer = PeerOf(socket.native_handle());
    Status refusal = Admit(peer);
    if (!refusal.ok() && refusing_.size() >= kMaxRefusing) {
      boost::system::error_code ignored;
      socket.close(ignored);  // too many to answer: close without a word
      continue;
    }
    const bool refused = !refusal.ok();
    auto session = std::make_shared<Session>(std::move(socket), service_, config_, session_logs_,
                                             readiness_, peer, std::move(refusal));
    (refused ? refusing_ : sessions_).push_back(session);
    asio::co_spawn(io_, Session::Run(session), asio::detached);
  }
}

size_t Server::open_connections() const {
  size_t open = 0;
  for (const auto* list : {&sessions_, &refusing_}) {
    for (const std::weak_ptr<Session>& w : *list) open += w.expired() ? 0u : 1u;
  }
  return open;
}

void Server::Stop() {
  if (stopping_) return;
  stopping_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (auto* list : {&sessions_, &refusing_}) {
    for (const std::weak_ptr<Session>& w : *list) {
      if (auto s = w.lock()) s->Stop();
    }
    list->clear();
  }
  ::unlink(path_.c_str());
}

}  // namespace kvtier::daemon

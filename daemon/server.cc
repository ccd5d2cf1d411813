#include "daemon/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "daemon/log.h"
#include "daemon/session.h"

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

}  // namespace

Result<std::unique_ptr<Server>> Server::Create(asio::io_context& io, Service& service,
                                               const DaemonConfig& config) {
  KVTIER_RETURN_IF_ERROR(PreparePath(config.socket_path));
  stream_protocol::acceptor acceptor(io);
  boost::system::error_code ec;
  acceptor.open(stream_protocol(), ec);
  if (!ec) {
    // Bind under a umask that yields the configured mode, so the socket is
    // never reachable with wider permissions, even for an instant.
    const mode_t old = ::umask(static_cast<mode_t>(~config.socket_mode & 0777));
    acceptor.bind(stream_protocol::endpoint(config.socket_path), ec);
    ::umask(old);
  }
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError(Str("cannot listen on ", config.socket_path, ": ", ec.message()));
  if (::chmod(config.socket_path.c_str(), static_cast<mode_t>(config.socket_mode)) != 0) {
    return IoError(Str("chmod ", config.socket_path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<Server>(new Server(io, service, config, std::move(acceptor)));
}

Server::Server(asio::io_context& io, Service& service, const DaemonConfig& config,
               stream_protocol::acceptor acceptor)
    : io_(io),
      service_(service),
      config_(config),
      acceptor_(std::move(acceptor)),
      path_(config.socket_path) {}

Server::~Server() { Stop(); }

void Server::Start() { asio::co_spawn(io_, Accept(), asio::detached); }

asio::awaitable<void> Server::Accept() {
  while (!stopping_) {
    boost::system::error_code ec;
    stream_protocol::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) break;
      accept_log_.Log(LogLevel::kWarn, Str("accept: ", ec.message()));
      continue;
    }
    auto session = std::make_shared<Session>(std::move(socket), service_, config_);
    sessions_.remove_if([](const std::weak_ptr<Session>& w) { return w.expired(); });
    sessions_.push_back(session);
    asio::co_spawn(io_, Session::Run(session), asio::detached);
  }
}

void Server::Stop() {
  if (stopping_) return;
  stopping_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const std::weak_ptr<Session>& w : sessions_) {
    if (auto s = w.lock()) s->Stop();
  }
  sessions_.clear();
  ::unlink(path_.c_str());
}

}  // namespace kvtier::daemon

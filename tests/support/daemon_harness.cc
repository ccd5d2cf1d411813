#include "support/daemon_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

namespace kvtier::testing {
namespace {

bool CanConnect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// kvtierd with `args`, its output appended to `log_path`.
pid_t SpawnDaemon(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> argv = {KVTIERD_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return SpawnLogged(argv, log_path);
}

}  // namespace

std::unique_ptr<Daemon> Daemon::Start(std::vector<std::string> args, const std::string& socket) {
  auto d = std::unique_ptr<Daemon>(new Daemon());
  d->socket_ = socket.empty() ? d->dir_ / "kvtierd.sock" : socket;
  // Test defaults, unless the caller sets the flag itself.
  std::vector<std::string> all = {"--socket", d->socket_, "--no-reserve-memory"};
  for (const auto& [flag, value] :
       {std::pair{"--host-capacity", "64MiB"}, std::pair{"--host-slab", "4MiB"},
        std::pair{"--ssd-dir", ""}, std::pair{"--metrics-address", ""},
        std::pair{"--device", "off"}}) {
    if (std::find(args.begin(), args.end(), flag) == args.end()) {
      all.push_back(flag);
      all.push_back(value);
    }
  }
  all.insert(all.end(), args.begin(), args.end());
  d->pid_ = SpawnDaemon(all, d->dir_ / "kvtierd.log");
  for (int i = 0; i < 400; ++i) {
    if (CanConnect(d->socket_)) return d;
    if (!d->Alive()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::cerr << "kvtierd did not start:\n" << d->Log() << "\n";
  return nullptr;
}

Daemon::~Daemon() {
  if (pid_ > 0 && Alive()) Stop(SIGKILL);
  ::unlink(socket_.c_str());  // the folder goes with dir_; a socket given elsewhere too
}

bool Daemon::Alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int Daemon::Stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

int Daemon::WaitForExit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  const int status = testing::WaitForExit(pid_, timeout);
  pid_ = -1;
  return status;
}

std::string Daemon::Log() const { return ReadFile(dir_ / "kvtierd.log"); }

int RunDaemonToExit(const std::vector<std::string>& args, std::string* stderr_text,
                    std::chrono::seconds timeout) {
  const TempDir dir("/tmp/kvtier-run");
  const pid_t pid = SpawnDaemon(args, dir / "log");
  const int status = WaitForExit(pid, timeout);
  *stderr_text = ReadFile(dir / "log");
  return status;
}

std::unique_ptr<RawConnection> RawConnection::Open(const std::string& socket) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<RawConnection>(new RawConnection(fd));
}

RawConnection::~RawConnection() { ::close(fd_); }

bool RawConnection::Send(std::span<const std::byte> bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool RawConnection::ReadExact(std::byte* out, size_t n, std::chrono::milliseconds timeout,
                              bool* timed_out) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) {
      if (timed_out) *timed_out = true;
      return false;
    }
    char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{out + got, n - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t r = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r <= 0) return false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        ::close(fd);
      }
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

std::optional<RawConnection::Frame> RawConnection::Read(std::chrono::milliseconds timeout,
                                                        bool* timed_out) {
  if (timed_out) *timed_out = false;
  std::array<std::byte, protocol::kHeaderBytes> raw;
  if (!ReadExact(raw.data(), raw.size(), timeout, timed_out)) return std::nullopt;
  // Parsed by hand, not with DecodeHeader: a reply may echo a bad opcode.
  protocol::FrameHeader h;
  uint16_t op = 0;
  std::memcpy(&h.version, raw.data() + 4, 2);
  std::memcpy(&op, raw.data() + 6, 2);
  std::memcpy(&h.request_id, raw.data() + 8, 8);
  std::memcpy(&h.payload_bytes, raw.data() + 16, 4);
  std::memcpy(&h.status, raw.data() + 20, 2);
  std::memcpy(&h.flags, raw.data() + 22, 2);
  h.opcode = static_cast<protocol::Opcode>(op);
  if (h.payload_bytes > protocol::kMaxPayloadBytes) return std::nullopt;
  Frame f{h, std::vector<std::byte>(h.payload_bytes)};
  if (!ReadExact(f.payload.data(), f.payload.size(), timeout, timed_out)) return std::nullopt;
  return f;
}

bool RawConnection::ClosedByPeer(std::chrono::milliseconds timeout) {
  std::byte b;
  bool timed_out = false;
  while (ReadExact(&b, 1, timeout, &timed_out)) {
  }
  return !timed_out;
}

uint64_t ResidentBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "... kB"
  }
  return 0;
}

void FillPattern(std::span<std::byte> bytes, const prefix_index::BlockKey& key) {
  uint64_t x = key.hi ^ (key.lo * 0x9e3779b97f4a7c15ULL) ^ 1;
  for (size_t i = 0; i < bytes.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(bytes.data() + i, &x, std::min<size_t>(8, bytes.size() - i));
  }
}

bool MatchesPattern(std::span<const std::byte> bytes, const prefix_index::BlockKey& key) {
  std::vector<std::byte> want(bytes.size());
  FillPattern(want, key);
  return std::memcmp(want.data(), bytes.data(), bytes.size()) == 0;
}

std::vector<prefix_index::TokenId> RandomTokens(uint32_t seed, size_t tokens) {
  std::mt19937 rng(seed);
  std::vector<prefix_index::TokenId> t(tokens);
  for (auto& x : t) x = static_cast<prefix_index::TokenId>(rng() % 50'000);
  return t;
}

std::vector<prefix_index::TokenId> RandomPrompt(uint32_t seed, size_t blocks) {
  return RandomTokens(seed, blocks * 16);
}

protocol::HelloRequest TestHello(const std::string& model, const std::string& salt) {
  protocol::HelloRequest h;
  h.model = model;
  h.salt = salt;
  h.layout = Layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
  h.client_name = "test";
  return h;
}

}  // namespace kvtier::testing

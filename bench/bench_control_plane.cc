// Control-plane load against kvtierd, shaped like redis-benchmark so the two
// compare at equal concurrency: one thread, N connections, one request in
// flight on each, for a fixed time. Prints ops/s and latency p50/p99.
//
//   bench_control_plane --socket S [--clients N] [--keys K] [--seconds T]
//                       [--peer-busy-poll-us U] [--json]
//
// Each connection attaches (HELLO) to one namespace with 4 KiB blocks; a
// chain of K blocks is PUT once, then every request is a LOOKUP of those K
// keys (all hits, so the daemon walks the whole chain).
//
// The same load also runs against the socket's limit: a minimal ping-pong
// server in a process of its own (as the daemon is), on the CPUs the daemon
// may run on, on the same kind of socket, that answers each request of the
// LOOKUP's size with a reply of the size the daemon's LOOKUP reply had,
// polling for U µs after each burst of work before it blocks, as kvtierd's
// io loop does (pass the daemon's server.busy_poll_us; like the daemon, it
// stops spinning on a shared core). The two take turns (daemon, peer, peer,
// daemon). What the daemon does beyond the peer (decoding, the index walk,
// its io loop) is the gap between the two.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_flags.h"
#include "common/spin_governor.h"
#include "protocol/wire.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string socket;
  int clients = 1;
  size_t keys = 1;
  double seconds = 5;
  int peer_busy_poll_us = 200;  // kvtierd's default server.busy_poll_us
  bool json = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_control_plane: %s\n", what.c_str());
  std::exit(1);
}

int Connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Die("cannot connect to " + path + ": " + std::strerror(errno));
  }
  return fd;
}

void SendAll(int fd, const std::vector<std::byte>& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) Die("send failed");
    sent += static_cast<size_t>(n);
  }
}

// Blocking read of one reply; closes any fds that come with it.
std::vector<std::byte> ReadReply(int fd) {
  std::vector<std::byte> buf;
  size_t want = protocol::kHeaderBytes;
  while (buf.size() < want) {
    std::byte chunk[65536];
    char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{chunk, std::min(sizeof(chunk), want - buf.size())};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) Die("the daemon closed the connection");
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        ::close(passed);
      }
    }
    buf.insert(buf.end(), chunk, chunk + n);
    if (buf.size() >= protocol::kHeaderBytes && want == protocol::kHeaderBytes) {
      auto h = protocol::DecodeHeader(buf, protocol::kMaxPayloadBytes);
      if (!h) Die("bad reply header");
      if (h->status != 0) Die("error reply to " + std::string(protocol::OpcodeName(h->opcode)));
      want = protocol::kHeaderBytes + h->payload_bytes;
    }
  }
  return buf;
}

protocol::HelloRequest Hello() {
  protocol::HelloRequest h;
  h.model = "bench-control-plane";
  h.layout = Layout{1, 1, 64, DType::kFloat16, 16};  // 4 KiB blocks
  h.client_name = "bench_control_plane";
  return h;
}

struct Conn {
  int fd = -1;
  Clock::time_point sent;
  std::vector<std::byte> in;
  size_t want = 0;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(i), v.end());
  return v[i];
}

// One server's share of the run: its legs' latencies and time, summed.
struct Leg {
  std::vector<double> latency_us;
  double seconds = 0;
};

struct Measured {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
};

Measured Summarize(Leg& leg) {
  Measured m;
  m.ops_per_s = static_cast<double>(leg.latency_us.size()) / leg.seconds;
  m.p50_us = Percentile(leg.latency_us, 0.50);
  m.p99_us = Percentile(leg.latency_us, 0.99);
  return m;
}

// The load: `clients` connections, one `request` in flight on each, until
// `seconds` have passed; adds its latencies and time to `leg`. `hello` says
// whether each connection attaches first.
void Load(const Args& a, double seconds, const std::string& socket,
          const std::vector<std::byte>& request, bool hello, Leg& leg) {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<Conn> conns(static_cast<size_t>(a.clients));
  for (size_t i = 0; i < conns.size(); ++i) {
    Conn& c = conns[i];
    c.fd = Connect(socket);
    if (hello) {
      std::vector<std::byte> frame;
      protocol::EncodeHello(1, Hello(), &frame);
      SendAll(c.fd, frame);
      ReadReply(c.fd);
    }
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }

  std::vector<double>& latency_us = leg.latency_us;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  for (Conn& c : conns) {
    c.sent = Clock::now();
    SendAll(c.fd, request);
  }
  std::vector<epoll_event> events(conns.size());
  std::byte chunk[65536];
  bool running = true;
  while (running) {
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    for (int e = 0; e < n; ++e) {
      Conn& c = conns[events[static_cast<size_t>(e)].data.u64];
      const ssize_t got = ::recv(c.fd, chunk, sizeof(chunk), 0);
      if (got <= 0) {
        if (got < 0 && errno == EAGAIN) continue;
        Die("the server closed a connection");
      }
      c.in.insert(c.in.end(), chunk, chunk + got);
      if (c.in.size() < protocol::kHeaderBytes) continue;
      uint32_t payload;
      std::memcpy(&payload, c.in.data() + 16, 4);
      if (c.in.size() < protocol::kHeaderBytes + payload) continue;
      const auto now = Clock::now();
      latency_us.push_back(std::chrono::duration<double, std::micro>(now - c.sent).count());
      c.in.clear();
      if (now >= deadline) {
        running = false;
        continue;
      }
      c.sent = now;
      SendAll(c.fd, request);
    }
  }
  leg.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  for (Conn& c : conns) ::close(c.fd);
  ::close(ep);
}

// The ping-pong server: answers every frame of `request_bytes` with `reply`,
// one thread, epoll, non-blocking sockets, busy-polling `busy_poll_us` after
// work. Runs until killed.
[[noreturn]] void PingPongServer(int listener, size_t request_bytes,
                                 const std::vector<std::byte>& reply, int busy_poll_us) {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listener;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
  std::vector<size_t> pending(1024, 0);  // bytes of the request read so far, by fd
  std::vector<epoll_event> events(256);
  std::byte chunk[65536];
  SpinGovernor governor;  // as kvtierd's io loop: no spinning on a shared core
  auto until = Clock::now();
  for (;;) {
    const bool spinning = Clock::now() < until;
    const int n =
        ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), spinning ? 0 : -1);
    if (n > 0 && governor.MaySpin()) until = Clock::now() + std::chrono::microseconds(busy_poll_us);
    for (int e = 0; e < n; ++e) {
      const int fd = events[static_cast<size_t>(e)].data.fd;
      if (fd == listener) {
        const int c = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) continue;
        if (static_cast<size_t>(c) >= pending.size()) pending.resize(static_cast<size_t>(c) + 1, 0);
        pending[static_cast<size_t>(c)] = 0;
        epoll_event cev{};
        cev.events = EPOLLIN;
        cev.data.fd = c;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        continue;
      }
      // A connection closed by the load generator (at the end of its leg,
      // perhaps with a reply under way) is closed here too.
      bool open = true;
      while (open) {
        const ssize_t got = ::recv(fd, chunk, sizeof(chunk), 0);
        if (got < 0 && errno == EAGAIN) break;
        open = got > 0;
        size_t& have = pending[static_cast<size_t>(fd)];
        have += open ? static_cast<size_t>(got) : 0;
        while (open && have >= request_bytes) {  // one reply per whole request
          have -= request_bytes;
          // One request in flight: the reply always fits the socket's buffer.
          open = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(reply.size());
        }
        if (!open) ::close(fd);
      }
    }
  }
}

// The CPUs the process at the other end of `fd` may run on (SO_PEERCRED),
// so that the ping-pong peer runs where the daemon does; all CPUs when
// that cannot be read.
cpu_set_t PeerCpus(int fd) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      ::sched_getaffinity(cred.pid, sizeof(cpus), &cpus) != 0) {
    for (size_t i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &cpus);
  }
  return cpus;
}

// Forks the ping-pong server listening on `path`, on `cpus`; returns its pid.
pid_t StartPingPong(const std::string& path, size_t request_bytes,
                    const std::vector<std::byte>& reply, int busy_poll_us, const cpu_set_t& cpus) {
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ::unlink(path.c_str());
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 4096) != 0) {
    Die("cannot listen on " + path + ": " + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    ::sched_setaffinity(0, sizeof(cpus), &cpus);
    PingPongServer(listener, request_bytes, reply, busy_poll_us);
  }
  ::close(listener);
  return pid;
}

int Run(const Args& a) {
  std::vector<prefix_index::BlockKey> keys;
  for (size_t i = 0; i < a.keys; ++i) keys.push_back({0xbe7c4, i + 1});
  std::vector<std::byte> lookup;
  protocol::EncodeKeys(protocol::Opcode::kLookup, 7, keys, &lookup);
  std::vector<std::byte> lookup_reply;
  cpu_set_t daemon_cpus;
  // Cache the chain once, and keep one LOOKUP reply: the peer's reply.
  {
    const int fd = Connect(a.socket);
    std::vector<std::byte> frame;
    protocol::EncodeHello(1, Hello(), &frame);
    SendAll(fd, frame);
    ReadReply(fd);
    frame.clear();
    std::vector<std::byte> data(keys.size() * 4096, std::byte{1});
    protocol::EncodePut(2, std::nullopt, keys, data, &frame);
    SendAll(fd, frame);
    ReadReply(fd);
    SendAll(fd, lookup);
    lookup_reply = ReadReply(fd);
    daemon_cpus = PeerCpus(fd);
    ::close(fd);
  }

  // The two servers take turns, daemon, peer, peer, daemon, half the time
  // each, so that a drift of the machine's speed falls on both alike.
  const std::string peer_path = a.socket + ".pingpong";
  const pid_t peer =
      StartPingPong(peer_path, lookup.size(), lookup_reply, a.peer_busy_poll_us, daemon_cpus);
  Leg daemon_leg, peer_leg;
  const double half = a.seconds / 2;
  Load(a, half, a.socket, lookup, /*hello=*/true, daemon_leg);
  Load(a, half, peer_path, lookup, /*hello=*/false, peer_leg);
  Load(a, half, peer_path, lookup, /*hello=*/false, peer_leg);
  Load(a, half, a.socket, lookup, /*hello=*/true, daemon_leg);
  const Measured daemon = Summarize(daemon_leg);
  const Measured limit = Summarize(peer_leg);
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
  ::unlink(peer_path.c_str());

  if (a.json) {
    std::printf(
        "{\"clients\":%d,\"keys\":%zu,\"ops_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
        "\"request_bytes\":%zu,\"reply_bytes\":%zu,\"pingpong_ops_per_s\":%.1f,"
        "\"pingpong_p50_us\":%.1f,\"pingpong_p99_us\":%.1f}\n",
        a.clients, a.keys, daemon.ops_per_s, daemon.p50_us, daemon.p99_us, lookup.size(),
        lookup_reply.size(), limit.ops_per_s, limit.p50_us, limit.p99_us);
  } else {
    std::printf(
        "LOOKUP of %zu keys, %d clients: %.0f ops/s, p50 %.1f us, p99 %.1f us; socket ping-pong "
        "(%zu-byte requests, %zu-byte replies): %.0f ops/s, p50 %.1f us, p99 %.1f us; %.2fx\n",
        a.keys, a.clients, daemon.ops_per_s, daemon.p50_us, daemon.p99_us, lookup.size(),
        lookup_reply.size(), limit.ops_per_s, limit.p50_us, limit.p99_us,
        daemon.ops_per_s / limit.ops_per_s);
  }
  return 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::Args a;
  kvtier::bench::Flags flags;
  flags.options["--socket"] = [&](const std::string& v) { a.socket = v; };
  flags.options["--clients"] = [&](const std::string& v) { a.clients = std::stoi(v); };
  flags.options["--keys"] = [&](const std::string& v) { a.keys = std::stoul(v); };
  flags.options["--seconds"] = [&](const std::string& v) { a.seconds = std::stod(v); };
  flags.options["--peer-busy-poll-us"] = [&](const std::string& v) {
    a.peer_busy_poll_us = std::stoi(v);
  };
  flags.switches["--json"] = [&] { a.json = true; };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags,
      "bench_control_plane --socket PATH [--clients N] [--keys K] [--seconds T] "
      "[--peer-busy-poll-us U] [--json]");
  if (done >= 0) return done;
  if (a.socket.empty() || a.clients < 1 || a.keys < 1) kvtier::bench::Die("bad arguments");
  return kvtier::bench::Run(a);
}

// Control-plane load against kvtierd, shaped like redis-benchmark so the two
// compare at equal concurrency: one thread, N connections, one request in
// flight on each, for a fixed time. Prints ops/s and latency p50/p99.
//
//   bench_control_plane --socket S [--clients N] [--keys K] [--seconds T] [--json]
//
// Each connection attaches (HELLO) to one namespace with 4 KiB blocks; a
// chain of K blocks is PUT once, then every request is a LOOKUP of those K
// keys (all hits, so the daemon walks the whole chain).
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_flags.h"
#include "protocol/wire.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string socket;
  int clients = 1;
  size_t keys = 1;
  double seconds = 5;
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

int Run(const Args& a) {
  std::vector<prefix_index::BlockKey> keys;
  for (size_t i = 0; i < a.keys; ++i) keys.push_back({0xbe7c4, i + 1});
  // Cache the chain once.
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
    ::close(fd);
  }
  std::vector<std::byte> lookup;
  protocol::EncodeKeys(protocol::Opcode::kLookup, 7, keys, &lookup);

  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<Conn> conns(static_cast<size_t>(a.clients));
  for (size_t i = 0; i < conns.size(); ++i) {
    Conn& c = conns[i];
    c.fd = Connect(a.socket);
    std::vector<std::byte> frame;
    protocol::EncodeHello(1, Hello(), &frame);
    SendAll(c.fd, frame);
    ReadReply(c.fd);
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }

  std::vector<double> latency_us;
  latency_us.reserve(4'000'000);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(a.seconds);
  for (Conn& c : conns) {
    c.sent = Clock::now();
    SendAll(c.fd, lookup);
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
        Die("the daemon closed a connection");
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
      SendAll(c.fd, lookup);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double ops = static_cast<double>(latency_us.size()) / elapsed;
  const double p50 = Percentile(latency_us, 0.50);
  const double p99 = Percentile(latency_us, 0.99);
  if (a.json) {
    std::printf(
        "{\"clients\":%d,\"keys\":%zu,\"ops_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
        a.clients, a.keys, ops, p50, p99);
  } else {
    std::printf("LOOKUP of %zu keys, %d clients: %.0f ops/s, p50 %.1f us, p99 %.1f us\n", a.keys,
                a.clients, ops, p50, p99);
  }
  for (Conn& c : conns) ::close(c.fd);
  ::close(ep);
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
  flags.switches["--json"] = [&] { a.json = true; };
  const int done = kvtier::bench::ParseFlags(
      argc, argv, flags,
      "bench_control_plane --socket PATH [--clients N] [--keys K] [--seconds T] [--json]");
  if (done >= 0) return done;
  if (a.socket.empty() || a.clients < 1 || a.keys < 1) kvtier::bench::Die("bad arguments");
  return kvtier::bench::Run(a);
}

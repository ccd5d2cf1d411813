#include "fake_daemon.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

namespace kvtier::client::testing {
namespace {

using prefix_index::BlockKey;
using protocol::Opcode;
using protocol::WireWriteState;

constexpr uint64_t kPage = 4096;

// Waits until `fd` is readable or the daemon stops; false when stopping.
bool WaitReadable(int fd, const std::atomic<bool>& stop) {
  while (!stop.load()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) return true;
  }
  return false;
}

bool ReadExact(int fd, std::byte* p, size_t n, const std::atomic<bool>& stop) {
  while (n > 0) {
    if (!WaitReadable(fd, stop)) return false;
    const ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void WriteAll(int fd, const std::vector<std::byte>& b, bool byte_by_byte) {
  for (size_t off = 0; off < b.size();) {
    const size_t n = byte_by_byte ? 1 : b.size() - off;
    const ssize_t w = send(fd, b.data() + off, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
    if (byte_by_byte) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Sends `frame` with `fds` attached to its first byte, then the rest.
void SendWithFds(int fd, const std::vector<std::byte>& frame, const std::vector<int>& fds) {
  iovec iov{const_cast<std::byte*>(frame.data()), 1};
  std::vector<char> control(CMSG_SPACE(fds.size() * sizeof(int)));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  if (sendmsg(fd, &msg, MSG_NOSIGNAL) != 1) return;
  WriteAll(fd, std::vector<std::byte>(frame.begin() + 1, frame.end()), false);
}

}  // namespace

struct FakeDaemon::State {
  Layout layout;
  uint64_t block_bytes = 0;
  uint64_t slot_bytes = 0;
  uint32_t slots = 0;
  protocol::DeviceKind device = protocol::DeviceKind::kNone;
  int host_fd = -1;
  int device_fd = -1;
  std::byte* arena = nullptr;
  std::vector<uint32_t> free_slots;
  std::map<BlockKey, uint32_t> committed;
  std::map<uint64_t, std::vector<std::pair<BlockKey, uint32_t>>> allocations;
  std::set<uint64_t> leases;
  uint64_t next_id = 100;
  Fault fault = Fault::kNone;
  std::vector<Opcode> ops;

  uint64_t Offset(uint32_t slot) const { return slot * slot_bytes; }
  size_t Leading(const std::vector<BlockKey>& keys) const {
    size_t n = 0;
    while (n < keys.size() && committed.count(keys[n]) != 0) ++n;
    return n;
  }
};

FakeDaemon::FakeDaemon(const Layout& layout, uint32_t slots, protocol::DeviceKind device)
    : state_(std::make_unique<State>()) {
  path_ = dir_ / "kvtierd.sock";
  State& s = *state_;
  s.layout = layout;
  s.block_bytes = layout.BlockBytes();
  s.slot_bytes = (s.block_bytes + kPage - 1) / kPage * kPage;
  s.slots = slots;
  s.device = device;
  s.host_fd = memfd_create("fake_host", MFD_CLOEXEC);
  const auto bytes = static_cast<off_t>(s.slot_bytes * slots);
  if (s.host_fd < 0 || ftruncate(s.host_fd, bytes) != 0) throw std::runtime_error("memfd");
  s.arena = static_cast<std::byte*>(
      mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, s.host_fd, 0));
  if (device == protocol::DeviceKind::kEmulated) {
    s.device_fd = memfd_create("fake_device", MFD_CLOEXEC);
    if (s.device_fd < 0 || ftruncate(s.device_fd, kPage) != 0) throw std::runtime_error("memfd");
  }
  for (uint32_t i = slots; i-- > 0;) s.free_slots.push_back(i);

  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.data(), path_.size());
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 8) != 0) {
    throw std::runtime_error("bind/listen " + path_);
  }
  thread_ = std::thread([this] { Serve(); });
}

FakeDaemon::~FakeDaemon() {
  stop_ = true;
  thread_.join();
  close(listen_fd_);
  munmap(state_->arena, state_->slot_bytes * state_->slots);
  close(state_->host_fd);
  if (state_->device_fd >= 0) close(state_->device_fd);
  unlink(path_.c_str());
}

void FakeDaemon::InjectFault(Fault fault) {
  std::lock_guard lock(mu_);
  state_->fault = fault;
}

std::vector<Opcode> FakeDaemon::ops() const {
  std::lock_guard lock(mu_);
  return state_->ops;
}

size_t FakeDaemon::blocks() const {
  std::lock_guard lock(mu_);
  return state_->committed.size();
}

size_t FakeDaemon::open_leases() const {
  std::lock_guard lock(mu_);
  return state_->leases.size();
}

size_t FakeDaemon::open_allocations() const {
  std::lock_guard lock(mu_);
  return state_->allocations.size();
}

void FakeDaemon::Serve() {
  while (WaitReadable(listen_fd_, stop_)) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeConnection(fd);
    close(fd);
  }
}

namespace {

// Answers one decoded request; `fds` gets the descriptors to pass.
Status Answer(FakeDaemon::State& s, const protocol::FrameHeader& h, const protocol::Request& req,
              std::vector<std::byte>* out, std::vector<int>* fds);

}  // namespace

void FakeDaemon::ServeConnection(int fd) {
  std::array<std::byte, protocol::kHeaderBytes> hb;
  while (ReadExact(fd, hb.data(), hb.size(), stop_)) {
    auto h = protocol::DecodeHeader(hb, protocol::kMaxPayloadBytes);
    if (!h.ok()) return;
    std::vector<std::byte> payload(h->payload_bytes);
    if (!ReadExact(fd, payload.data(), payload.size(), stop_)) return;
    auto req = protocol::DecodeRequest(*h, payload, protocol::kMaxKeys);
    std::lock_guard lock(mu_);
    State& s = *state_;
    s.ops.push_back(h->opcode);
    const Fault fault = std::exchange(s.fault, Fault::kNone);
    std::vector<std::byte> out;
    std::vector<int> fds;
    Status st = req.ok() ? Answer(s, *h, *req, &out, &fds) : req.status();
    if (fault == Fault::kErrorReply) st = NotFoundError("injected");
    if (!st.ok()) {
      out.clear();
      fds.clear();
      protocol::EncodeError(h->opcode, h->request_id, st, &out);
    }
    if (fault == Fault::kClose) return;
    if (fault == Fault::kGarbageHeader) out[0] = std::byte{0xee};
    if (fault == Fault::kWrongRequestId) {
      out.clear();
      protocol::EncodeError(h->opcode, h->request_id + 1000, NotFoundError("x"), &out);
    }
    if (!fds.empty()) {
      SendWithFds(fd, out, fds);
    } else {
      WriteAll(fd, out, fault == Fault::kByteByByte);
    }
  }
}

namespace {

Status Answer(FakeDaemon::State& s, const protocol::FrameHeader& h, const protocol::Request& req,
              std::vector<std::byte>* out, std::vector<int>* fds) {
  const uint64_t id = h.request_id;
  switch (h.opcode) {
    case Opcode::kHello: {
      const auto& r = std::get<protocol::HelloRequest>(req);
      if (!(r.layout == s.layout)) return InvalidArgumentError("layout differs");
      protocol::HelloReply rep;
      rep.session_id = 1;
      rep.block_bytes = s.block_bytes;
      rep.slot_bytes = s.slot_bytes;
      rep.host_arena_bytes = s.slot_bytes * s.slots;
      rep.device = s.device;
      for (size_t i = 0; i < rep.namespace_secret.size(); ++i) {
        rep.namespace_secret[i] = static_cast<std::byte>(i * 7 + 1);
      }
      fds->push_back(s.host_fd);
      if (s.device == protocol::DeviceKind::kEmulated) {
        rep.device_arena_bytes = kPage;
        fds->push_back(s.device_fd);
      }
      protocol::EncodeHelloReply(id, rep, true, out);
      return Status::Ok();
    }
    case Opcode::kLookup: {
      const auto& keys = std::get<protocol::KeysRequest>(req).keys;
      protocol::LookupReply rep;
      rep.tiers.assign(s.Leading(keys), protocol::WireTier::kHost);
      protocol::EncodeLookupReply(id, rep, out);
      return Status::Ok();
    }
    case Opcode::kAllocate:
    case Opcode::kPut: {
      const bool put = h.opcode == Opcode::kPut;
      const auto& keys = put ? std::get<protocol::PutRequest>(req).keys
                             : std::get<protocol::AllocateRequest>(req).keys;
      protocol::AllocateReply rep;
      rep.allocation_id = s.next_id++;
      auto& alloc = s.allocations[rep.allocation_id];
      for (size_t i = 0; i < keys.size(); ++i) {
        WireWriteState st = WireWriteState::kSkipped;
        uint64_t off = 0;
        if (s.committed.count(keys[i]) != 0) {
          st = WireWriteState::kExists;
        } else if (!s.free_slots.empty()) {
          const uint32_t slot = s.free_slots.back();
          s.free_slots.pop_back();
          alloc.emplace_back(keys[i], slot);
          st = WireWriteState::kAllocated;
          off = s.Offset(slot);
          if (put) {
            const auto data = std::get<protocol::PutRequest>(req).data;
            std::memcpy(s.arena + off, data.data() + i * s.block_bytes, s.block_bytes);
          }
        }
        rep.states.push_back(st);
        rep.offsets.push_back(off);
      }
      if (!put) {
        protocol::EncodeAllocateReply(id, rep, out);
        return Status::Ok();
      }
      for (auto [k, slot] : alloc) s.committed[k] = slot;
      s.allocations.erase(rep.allocation_id);
      protocol::EncodePutReply(id, protocol::PutReply{rep.states}, out);
      return Status::Ok();
    }
    case Opcode::kCommit:
    case Opcode::kAbort: {
      auto it = s.allocations.find(std::get<protocol::HandleRequest>(req).id);
      if (it == s.allocations.end()) return NotFoundError("no such allocation");
      for (auto [k, slot] : it->second) {
        if (h.opcode == Opcode::kCommit) {
          s.committed[k] = slot;
        } else {
          s.free_slots.push_back(slot);
        }
      }
      s.allocations.erase(it);
      protocol::EncodeCountReply(h.opcode, id, {}, out);
      return Status::Ok();
    }
    case Opcode::kAcquire: {
      const auto& keys = std::get<protocol::AcquireRequest>(req).keys;
      protocol::AcquireReply rep;
      rep.lease_id = s.next_id++;
      for (size_t i = 0; i < s.Leading(keys); ++i) {
        rep.offsets.push_back(s.Offset(s.committed[keys[i]]));
      }
      s.leases.insert(rep.lease_id);
      protocol::EncodeAcquireReply(id, rep, out);
      return Status::Ok();
    }
    case Opcode::kRelease:
      if (s.leases.erase(std::get<protocol::HandleRequest>(req).id) == 0) {
        return NotFoundError("no such lease");
      }
      protocol::EncodeCountReply(h.opcode, id, {}, out);
      return Status::Ok();
    case Opcode::kGet: {
      const auto& keys = std::get<protocol::KeysRequest>(req).keys;
      const size_t hits = s.Leading(keys);
      auto data =
          protocol::EncodeGetReplyPrefix(id, static_cast<uint32_t>(hits), s.block_bytes, out);
      for (size_t i = 0; i < hits; ++i) {
        std::memcpy(data.data() + i * s.block_bytes, s.arena + s.Offset(s.committed[keys[i]]),
                    s.block_bytes);
      }
      return Status::Ok();
    }
    case Opcode::kTouch: {
      uint64_t n = 0;
      for (const auto& k : std::get<protocol::KeysRequest>(req).keys) n += s.committed.count(k);
      protocol::EncodeCountReply(h.opcode, id, {n}, out);
      return Status::Ok();
    }
    case Opcode::kRemove: {
      uint64_t n = 0;
      for (const auto& k : std::get<protocol::KeysRequest>(req).keys) {
        auto it = s.committed.find(k);
        if (it == s.committed.end()) continue;
        s.free_slots.push_back(it->second);
        s.committed.erase(it);
        ++n;
      }
      protocol::EncodeCountReply(h.opcode, id, {n}, out);
      return Status::Ok();
    }
    case Opcode::kSetRetention: {
      const auto& r = std::get<protocol::RetentionRequest>(req);
      protocol::EncodeCountReply(h.opcode, h.request_id, {r.keys.size()}, out);
      return Status::Ok();
    }
    case Opcode::kHint: {
      // The fake protects nothing; it answers with the leading cached run.
      protocol::HintReply rep;
      for (const auto& k : std::get<protocol::HintRequest>(req).keys) {
        if (!s.committed.contains(k)) break;
        ++rep.blocks;
      }
      protocol::EncodeHintReply(id, rep, out);
      return Status::Ok();
    }
    case Opcode::kStats: {
      protocol::StatsReply rep;
      rep.entries = {{"sessions", "1"},
                     {"tier.host.blocks", std::to_string(s.committed.size())},
                     {"tier.host.description", "fake \"arena\""}};
      protocol::EncodeStatsReply(id, rep, out);
      return Status::Ok();
    }
  }
  return InvalidArgumentError("unknown opcode");
}

}  // namespace
}  // namespace kvtier::client::testing

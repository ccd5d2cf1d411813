// FakeDaemon: a small in-process stand-in for kvtierd that speaks the real
// wire format (protocol/wire.h) over a real Unix socket and passes a real
// memfd arena, so the client is tested end to end without the daemon, and
// with faults the daemon would never commit (STYLE.md 12): garbage headers,
// replies out of step, a reply dribbled byte by byte, a vanished peer.
//
// It serves one connection at a time on its own thread; its store is a map
// from key to arena slot, with no eviction and a fixed number of slots.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/layout.h"
#include "protocol/wire.h"
#include "support/temp_dir.h"

namespace kvtier::client::testing {

enum class Fault {
  kNone,
  kGarbageHeader,   // the reply's header has a wrong magic
  kWrongRequestId,  // the reply answers another request id
  kClose,           // the connection is closed instead of replying
  kByteByByte,      // the reply is written one byte per send(), with pauses
  kErrorReply,      // NotFound("injected") instead of the reply
};

class FakeDaemon {
 public:
  // `slots` blocks of `layout` fit its arena.
  explicit FakeDaemon(const Layout& layout, uint32_t slots = 64,
                      protocol::DeviceKind device = protocol::DeviceKind::kNone);
  ~FakeDaemon();

  const std::string& path() const { return path_; }
  // The reply to the next request gets `fault` (once).
  void InjectFault(Fault fault);
  // The opcodes of the requests served so far, in order.
  std::vector<protocol::Opcode> ops() const;
  // Keys committed and not removed.
  size_t blocks() const;
  size_t open_leases() const;
  size_t open_allocations() const;

  // The fake's store; public only so that its request handler can see it.
  struct State;

 private:
  void Serve();
  void ServeConnection(int fd);

  kvtier::testing::TempDir dir_{"/tmp/kvtier_fake"};  // its socket
  std::string path_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::unique_ptr<State> state_;
  mutable std::mutex mu_;
  std::thread thread_;
};

}  // namespace kvtier::client::testing

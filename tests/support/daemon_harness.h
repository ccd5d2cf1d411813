// Test support: starts the real kvtierd on a temporary socket, and a raw
// connection that speaks frames directly (for malformed input).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "prefix_index/key_hasher.h"
#include "protocol/wire.h"
#include "support/process.h"
#include "support/temp_dir.h"

// True when this tree is built with AddressSanitizer or ThreadSanitizer
// (cmake/sanitizers.cmake builds the daemon the tests spawn the same way):
// their shadow memory and quarantine make resident-memory bounds moot.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVTIER_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KVTIER_TEST_SANITIZED 1
#endif
#endif
#ifndef KVTIER_TEST_SANITIZED
#define KVTIER_TEST_SANITIZED 0
#endif

namespace kvtier::testing {

inline constexpr bool kSanitized = KVTIER_TEST_SANITIZED != 0;

class Daemon {
 public:
  // Starts kvtierd with `args` added to a small test configuration (64 MiB
  // host tier, memory not reserved, no ssd tier, metrics off: pass
  // {"--metrics-address", "127.0.0.1:0"} for them) on `socket` (a fresh one
  // if empty). Null on failure (the reason is printed).
  static std::unique_ptr<Daemon> Start(std::vector<std::string> args = {},
                                       const std::string& socket = "");
  ~Daemon();

  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_.path(); }
  pid_t pid() const { return pid_; }
  bool Alive();
  // Sends `sig` and waits for the exit; returns the wait status.
  int Stop(int sig = 15);
  // Waits for the daemon to exit by itself, at most `timeout` (then kills
  // it); returns the wait status, or -1 when it had to be killed.
  int WaitForExit(std::chrono::milliseconds timeout);
  // Everything the daemon wrote to stderr so far.
  std::string Log() const;

 private:
  TempDir dir_{"/tmp/kvtier-test"};  // its log, and its socket unless given one
  std::string socket_;
  pid_t pid_ = -1;
};

// Starts kvtierd with exactly `args` (no test defaults); returns its exit
// status, waiting at most `timeout`. For start-up failures.
int RunDaemonToExit(const std::vector<std::string>& args, std::string* stderr_text,
                    std::chrono::seconds timeout = std::chrono::seconds(20));

// A connection that sends raw bytes and reads raw replies.
class RawConnection {
 public:
  static std::unique_ptr<RawConnection> Open(const std::string& socket);
  ~RawConnection();

  bool Send(std::span<const std::byte> bytes);
  // The next reply frame, or nullopt when the daemon closed the connection
  // (or nothing came within the timeout: then `timed_out` is set). Received
  // fds are closed.
  struct Frame {
    protocol::FrameHeader header;
    std::vector<std::byte> payload;
  };
  std::optional<Frame> Read(std::chrono::milliseconds timeout = std::chrono::seconds(10),
                            bool* timed_out = nullptr);
  // True when the daemon has closed its end (a read sees EOF).
  bool ClosedByPeer(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  int fd() const { return fd_; }

 private:
  explicit RawConnection(int fd) : fd_(fd) {}
  bool ReadExact(std::byte* out, size_t n, std::chrono::milliseconds timeout, bool* timed_out);
  int fd_;
};

// The resident memory of process `pid` (VmRSS in /proc/<pid>/status), in
// bytes; 0 if it cannot be read.
uint64_t ResidentBytes(pid_t pid);

// The bytes every test writer puts under `key`: a pattern no other key
// shares, so any reader can check any block it gets back.
void FillPattern(std::span<std::byte> bytes, const prefix_index::BlockKey& key);
bool MatchesPattern(std::span<const std::byte> bytes, const prefix_index::BlockKey& key);

// `tokens` random token ids (< 50,000), the same for a seed.
std::vector<prefix_index::TokenId> RandomTokens(uint32_t seed, size_t tokens);
// `blocks` blocks of 16 of them: RandomTokens(seed, 16 * blocks).
std::vector<prefix_index::TokenId> RandomPrompt(uint32_t seed, size_t blocks);

// A HELLO for `model` with a small layout (4 KiB blocks).
protocol::HelloRequest TestHello(const std::string& model, const std::string& salt = "");

}  // namespace kvtier::testing

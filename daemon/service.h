// Service: turns decoded requests into engine calls and encoded replies.
// It is the only place where protocol/ meets engine/ (DESIGN.md §2: daemon/
// only wires): Handle() routes each request by its opcode to one handler.
//
// Thread-safety: every call runs on the engine's thread (the io thread);
// Handle() may suspend while a pool thread copies inline bytes, during which
// the blocks involved stay pinned.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "daemon/asio.h"
#include "daemon/config.h"
#include "daemon/kv_events.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "engine/cache_engine.h"
#include "protocol/wire.h"

namespace kvtier::daemon {

// Who is at the other end of a connection: SO_PEERCRED, read at accept
// (the process that connected, with its effective ids at connect time).
struct PeerCredentials {
  bool known = false;  // false where the kernel did not say
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

// What one connection holds. Destroying it (on the engine's thread) aborts
// its open writes and releases its leases.
struct SessionState {
  uint64_t id = 0;
  PeerCredentials peer;
  bool attached = false;
  prefix_index::NamespaceId ns = 0;
  uint64_t block_bytes = 0;
  std::unordered_map<uint64_t, engine::Allocation> allocations;
  std::unordered_map<uint64_t, engine::Lease> leases;
};

// A reply frame, the fds to pass with it, and whether to close afterwards.
struct Reply {
  std::vector<std::byte> frame;
  std::vector<int> fds;
  bool close = false;
};

class Service {
 public:
  // `engine` and `copy_pool` must outlive the Service. Namespace secrets
  // derive from config.secret_hex if set, else from `persistent_secret`
  // (the ssd tier's, so keys outlive a restart) if not empty, else from a
  // random secret.
  Service(engine::CacheEngine& engine, const DaemonConfig& config, asio::thread_pool& copy_pool,
          std::span<const std::byte> persistent_secret);

  uint64_t OpenSession();
  // Ends the session: aborts its writes, releases its leases.
  void CloseSession(SessionState& session);

  // Handles one well-formed request, if it needs no wait (everything but
  // ACQUIRE, PUT, GET and, with a remote tier, LOOKUP): true. False: it was
  // left alone, for Handle. Most requests take this way, which costs no
  // coroutine frame.
  bool HandleNow(SessionState& session, const protocol::FrameHeader& header,
                 protocol::Request& request, Reply* reply);
  // Handles one well-formed request that HandleNow left.
  asio::awaitable<void> Handle(SessionState& session, const protocol::FrameHeader& header,
                               protocol::Request& request, Reply* reply);

  // A reply for a frame that could not be decoded: the connection closes.
  void Malformed(const protocol::FrameHeader& header, const Status& error, Reply* reply);

  // Counts a worker turned away or cut off (the caller logs it).
  void CountRefusal(Refusal why) { ++refusals_[static_cast<size_t>(why)]; }

  uint64_t sessions() const { return sessions_; }
  // Every figure STATS and /metrics report, now.
  DaemonSnapshot Snapshot() const;
  // The KV-event publisher whose counters snapshots carry; null: events off.
  // Must outlive the Service.
  void SetEventPublisher(const KvEventPublisher* publisher) { publisher_ = publisher; }

 private:
  // What every request ends with: its figures, and an error's reply and log
  // line in place of the reply.
  void Finish(const SessionState& s, const protocol::FrameHeader& h,
              std::chrono::steady_clock::time_point start, const Status& status, Reply* reply);

  // One handler per opcode, in the wire's order (HandleNow's switch calls
  // them, and Handle's those that wait).
  Status Hello(SessionState& s, const protocol::FrameHeader& h, const protocol::HelloRequest& r,
               Reply* reply);
  // LookupNow without a remote tier, Lookup (waiting for it) with one.
  Status LookupNow(SessionState& s, const protocol::FrameHeader& h, const protocol::KeysRequest& r,
                   Reply* reply);
  asio::awaitable<Status> Lookup(SessionState& s, const protocol::FrameHeader& h,
                                 const protocol::KeysRequest& r, Reply* reply);
  // Both LOOKUPs' reply, from what the engine found.
  void EncodeLookup(const protocol::FrameHeader& h, const engine::LookupResult& found,
                    Reply* reply);
  Status Allocate(SessionState& s, const protocol::FrameHeader& h,
                  const protocol::AllocateRequest& r, Reply* reply);
  Status Commit(SessionState& s, const protocol::FrameHeader& h, const protocol::HandleRequest& r,
                Reply* reply);
  Status Abort(SessionState& s, const protocol::FrameHeader& h, const protocol::HandleRequest& r,
               Reply* reply);
  asio::awaitable<Status> AcquireRequest(SessionState& s, const protocol::FrameHeader& h,
                                         const protocol::AcquireRequest& r, Reply* reply);
  Status Release(SessionState& s, const protocol::FrameHeader& h, const protocol::HandleRequest& r,
                 Reply* reply);
  asio::awaitable<Status> Put(SessionState& s, const protocol::FrameHeader& h,
                              const protocol::PutRequest& r, Reply* reply);
  asio::awaitable<Status> Get(SessionState& s, const protocol::FrameHeader& h,
                              const protocol::KeysRequest& r, Reply* reply);
  Status Touch(SessionState& s, const protocol::FrameHeader& h, const protocol::KeysRequest& r,
               Reply* reply);
  Status Remove(SessionState& s, const protocol::FrameHeader& h, const protocol::KeysRequest& r,
                Reply* reply);
  Status Stats(const protocol::FrameHeader& h, Reply* reply);
  Status SetRetention(SessionState& s, const protocol::FrameHeader& h,
                      const protocol::RetentionRequest& r, Reply* reply);
  Status Hint(SessionState& s, const protocol::FrameHeader& h, const protocol::HintRequest& r,
              Reply* reply);

  // The session's open allocation `id`, taken out of it (COMMIT, ABORT).
  Result<engine::Allocation> TakeAllocation(SessionState& s, uint64_t id);
  std::array<std::byte, protocol::kNamespaceSecretBytes> NamespaceSecret(
      const std::string& model, const std::string& salt) const;
  // AcquireAsync, awaited: promotions from the ssd complete meanwhile.
  asio::awaitable<Result<engine::Lease>> Acquire(prefix_index::NamespaceId ns,
                                                 std::span<const prefix_index::BlockKey> keys,
                                                 tiers::TierKind tier);
  // Runs `copy` on the copy pool when it moves many bytes, inline otherwise.
  template <typename F>
  asio::awaitable<void> Copy(uint64_t bytes, F copy);

  engine::CacheEngine& engine_;
  const DaemonConfig& config_;
  asio::thread_pool& copy_pool_;
  const KvEventPublisher* publisher_ = nullptr;
  std::vector<std::byte> master_secret_;
  // The LOOKUPs', reused: no allocation a request once they have grown.
  engine::LookupResult lookup_found_;
  protocol::LookupReply lookup_reply_;
  uint64_t next_session_id_ = 1;
  uint64_t sessions_ = 0;
  uint64_t requests_ = 0;
  uint64_t request_errors_ = 0;
  uint64_t protocol_errors_ = 0;
  std::array<uint64_t, kNumRefusals> refusals_{};
  RequestStats ops_;
  // One line per kind of trouble every 10 s, at most.
  RateLimitedLog malformed_log_, failed_log_, full_log_, rejected_log_, namespaces_log_;
};

}  // namespace kvtier::daemon

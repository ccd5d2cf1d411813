// The worker-side client of kvtierd (DESIGN.md §3, §5; docs/protocol.md).
//
// A Client is one session: it connects to the daemon's Unix socket, says
// HELLO for one namespace (model, salt, layout), receives the shared arenas'
// descriptors and maps them, and then reads and writes blocks in place:
//
//   auto client = Client::Connect(options);             // Result<unique_ptr>
//   auto keys = (*client)->Keys(prompt_tokens);          // full blocks only
//   auto w = (*client)->Allocate(keys);                  // WriteHandle
//   for (i...) if (w->state(i) == kAllocated) fill(w->Bytes(i));
//   w->Commit();
//   auto r = (*client)->Acquire(keys);                   // ReadLease
//   for (i < r->size()) use(r->Bytes(i));                // leading hits
//   // ~ReadLease releases
//
// Calls are synchronous and blocking, one request in flight at a time,
// except LookupMany(), which pipelines. Errors: a daemon's error reply
// becomes the Status it carries; a socket error is Unavailable("kvtierd at
// PATH: ..."); a malformed reply is InvalidArgument. After a socket error or
// a reply that puts the stream out of step the client is broken: every
// later call returns Unavailable. Reconnect with a new Client.
//
// Thread-safety: a Client is not thread-safe; use one per thread. A
// WriteHandle or ReadLease belongs to the Client that made it, is used on
// that Client's thread, and must not outlive it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/fp8.h"
#include "common/layout.h"
#include "common/result.h"
#include "prefix_index/block_key.h"
#include "prefix_index/key_hasher.h"
#include "protocol/wire.h"

namespace kvtier::client {

using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::WireTier;
using protocol::WireWriteState;

inline constexpr const char* kDefaultSocketPath = "/run/kvtier/kvtierd.sock";

struct ClientOptions {
  // The daemon's Unix socket.
  std::string socket_path = kDefaultSocketPath;
  // The namespace: model id (required) and tenant / cache salt (may be
  // empty). Blocks of different namespaces never match.
  std::string model;
  std::string salt;
  // The block layout of the namespace; must Validate(). A namespace that
  // exists with another layout is refused by the daemon.
  Layout layout;
  // Shown in the daemon's logs and stats; free text.
  std::string client_name;
  // Quantize on demote (docs/fp8.md): the daemon's ssd and remote tiers
  // keep this namespace's blocks in that fp8 format, half the bytes, and
  // restore them on the way up: lossy. fp16/bf16 layouts only. Every worker
  // of a namespace must ask for the same. Default off (exact).
  Quantize quantize_lower = Quantize::kOff;
  // Map the shared arenas (zero-copy Allocate/Acquire). false: the arenas'
  // descriptors are closed at once and only the inline PUT/GET and the
  // metadata calls work, for workers that cannot map shared memory.
  bool map_arenas = true;
  // Longest wait, in milliseconds, for the socket to accept a request or
  // deliver a reply; 0 waits forever. A timeout breaks the client (the reply
  // may still come, out of step).
  uint32_t io_timeout_ms = 0;
  // Poll for a reply this long before sleeping: a wake-up across CPUs costs
  // more than a request round trip with a busy-polling daemon, so polling
  // cuts latency several-fold, at the price of this much CPU per request
  // that waits longer. 0 turns it off.
  uint32_t busy_poll_us = 50;
};

class Client;
namespace internal {
class Connection;
}  // namespace internal

// Slots reserved by Allocate(): fill the kAllocated ones in place, then
// Commit() publishes them; Abort() or the destructor frees them.
class WriteHandle {
 public:
  WriteHandle() = default;
  WriteHandle(WriteHandle&& other) noexcept;
  WriteHandle& operator=(WriteHandle&& other) noexcept;
  WriteHandle(const WriteHandle&) = delete;
  WriteHandle& operator=(const WriteHandle&) = delete;
  // Aborts if still open; an error doing so is ignored.
  ~WriteHandle();

  // One entry per key given to Allocate().
  size_t size() const { return states_.size(); }
  WireWriteState state(size_t i) const { return states_[i]; }
  // Keys in state kAllocated: the blocks this write will publish.
  size_t allocated() const;
  uint64_t id() const { return id_; }
  WireTier tier() const { return tier_; }
  bool open() const { return client_ != nullptr; }

  // The block's slot in the mapped arena, block_bytes() long.
  // REQUIRES: open() && state(i) == kAllocated, in a host-addressable tier
  // (host, or an emulated device); a GPU's slot is written through its
  // offset in the device arena (client/cuda_ipc.h).
  std::span<std::byte> Bytes(size_t i) const;
  // The block's byte offset in its tier's arena. REQUIRES: state(i) == kAllocated.
  uint64_t offset(size_t i) const { return offsets_[i]; }

  // Publishes the kAllocated blocks. The handle is closed whatever the
  // outcome: the daemon ends the allocation on a failed commit too.
  Status Commit();
  // Frees the slots. The handle is closed whatever the outcome.
  Status Abort();

 private:
  friend class Client;
  Client* client_ = nullptr;
  uint64_t id_ = 0;
  WireTier tier_ = WireTier::kHost;
  uint64_t block_bytes_ = 0;
  std::vector<WireWriteState> states_;
  std::vector<std::byte*> blocks_;  // nullptr unless kAllocated and host-addressable
  std::vector<uint64_t> offsets_;   // 0 unless kAllocated
};

// The leading present blocks of Acquire()'s keys, pinned in one tier until
// Release() or the destructor.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(ReadLease&& other) noexcept;
  ReadLease& operator=(ReadLease&& other) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  // Releases if still held; an error doing so is ignored.
  ~ReadLease();

  // Leading hits leased (<= keys asked for).
  size_t size() const { return blocks_.size(); }
  uint64_t id() const { return id_; }
  WireTier tier() const { return tier_; }
  bool held() const { return client_ != nullptr; }

  // The i-th leased block, block_bytes() long. REQUIRES: held() && i <
  // size(), in a host-addressable tier (see WriteHandle::Bytes).
  std::span<const std::byte> Bytes(size_t i) const;
  // The i-th block's byte offset in its tier's arena.
  uint64_t offset(size_t i) const { return offsets_[i]; }
  // The leased blocks as a kernel's block table: offset / stride_bytes for
  // each, for kernels that address slot k at arena + k x stride (kernels/:
  // pass the same stride). The default, the arenas' 4 KiB page, divides
  // every offset. InvalidArgument when a stride does not divide an offset
  // or the index passes int32.
  Result<std::vector<int32_t>> BlockTable(uint64_t stride_bytes = 4096) const;

  // Unpins the blocks. The lease is dropped whatever the outcome.
  Status Release();

 private:
  friend class Client;
  Client* client_ = nullptr;
  uint64_t id_ = 0;
  WireTier tier_ = WireTier::kHost;
  uint64_t block_bytes_ = 0;
  std::vector<const std::byte*> blocks_;  // nullptr where not host-addressable
  std::vector<uint64_t> offsets_;
};

class Client {
 public:
  // Connects, says HELLO, receives and maps the arenas. InvalidArgument for
  // bad options (checked before connecting); Unavailable when the daemon
  // cannot be reached; the daemon's error when it refuses the namespace.
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();  // unmaps the arenas and closes the socket
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const { return options_; }
  const protocol::HelloReply& session() const { return session_; }
  uint64_t block_bytes() const { return session_.block_bytes; }
  // Keys of this namespace: the hasher seeded with the namespace secret.
  const prefix_index::KeyHasher& hasher() const { return *hasher_; }
  // True when the arena of `tier` is mapped (zero-copy possible there).
  bool mapped(WireTier tier) const;
  // The daemon's GPU arena, when its device tier is a real GPU: a worker
  // opens it with the IPC handle (client/cuda_ipc.h) and addresses blocks
  // by the offsets Allocate/Acquire return. device_ordinal() is -1 otherwise.
  int device_ordinal() const { return session_.device_ordinal; }
  std::span<const std::byte> device_ipc_handle() const { return session_.device_ipc_handle; }
  uint64_t device_arena_bytes() const { return session_.device_arena_bytes; }
  // False once a socket error or an out-of-step reply broke the session.
  bool healthy() const;

  // The chain of full blocks of `tokens`, from the namespace root.
  std::vector<BlockKey> Keys(std::span<const TokenId> tokens) const;

  // The tiers of the leading present keys (the hit is tiers.size()).
  Result<protocol::LookupReply> Lookup(std::span<const BlockKey> keys);
  // One LOOKUP per chain, pipelined: all are sent, then all replies read
  // (while sending, so neither socket buffer fills). Replies in chain order.
  Result<std::vector<protocol::LookupReply>> LookupMany(
      std::span<const std::vector<BlockKey>> chains);

  // Reserves slots in `tier` (kHost, or kDevice when the daemon has one:
  // emulated, or a GPU written through client/cuda_ipc.h) for the keys; `parent` is the key before
  // keys[0] (none: keys[0] is a prompt's first block). FailedPrecondition when that arena is not
  // mapped.
  Result<WriteHandle> Allocate(std::span<const BlockKey> keys,
                               std::optional<BlockKey> parent = std::nullopt,
                               WireTier tier = WireTier::kHost);
  // Pins the leading present blocks in `tier`, promoting them there.
  Result<ReadLease> Acquire(std::span<const BlockKey> keys, WireTier tier = WireTier::kHost);

  // Copies the leading present blocks of `keys` out of the host arena into
  // dst[i] (block_bytes() each); returns how many. A block this client has
  // read with Read before is copied without asking kvtierd while it is still
  // in the slot it was in then (a direct read: its slot's generation, read
  // before and after the copy, unchanged; common/slot_generations.h), and
  // kvtierd hears of it afterwards, so that it stays as recent as a block
  // read through a lease: one TOUCH for every 64 blocks read so, or before
  // the client's next request, whichever comes first.
  // The rest go through one ACQUIRE, their slots remembered. dst[i] for
  // i >= the count returned may have been written. REQUIRES: dst.size() >=
  // keys.size() (InvalidArgument otherwise). FailedPrecondition when the
  // host arena is not mapped.
  Result<size_t> Read(std::span<const BlockKey> keys, std::span<std::byte* const> dst);
  // Blocks Read copied without asking kvtierd, and those it found moved
  // (their slot's generation changed: read again through ACQUIRE), since
  // the client was made.
  uint64_t direct_reads() const { return direct_reads_; }
  uint64_t direct_misses() const { return direct_misses_; }

  // Writes keys.size() blocks through the socket. REQUIRES: data.size() ==
  // keys.size() x block_bytes() (InvalidArgument otherwise).
  Result<protocol::PutReply> PutInline(std::span<const BlockKey> keys,
                                       std::span<const std::byte> data,
                                       std::optional<BlockKey> parent = std::nullopt);
  // The leading present blocks' bytes, through the socket.
  Result<protocol::GetReply> GetInline(std::span<const BlockKey> keys);
  // The same into `reply`, reusing its buffer: no allocation per call once
  // it has grown, which matters for a stream of multi-MiB blocks.
  Status GetInline(std::span<const BlockKey> keys, protocol::GetReply* reply);
  // Removes the keys (and what hangs below them); the count removed.
  Result<uint64_t> Remove(std::span<const BlockKey> keys);
  // Retention for token ranges of the prompt whose chain is `keys`
  // (TensorRT-LLM's semantics: priority 0-100, lower evicted first, 35 the
  // default; back to 35 after duration_ms, 0 = never). A block takes the
  // highest priority of the ranges overlapping it. Returns how many cached
  // blocks were updated.
  Result<uint64_t> SetRetention(std::span<const BlockKey> keys,
                                std::span<const protocol::RetentionRange> ranges);
  // Hints that this worker will soon run a request whose chain is `keys`:
  // the daemon keeps its cached blocks for `ttl_ms` (0: the daemon's
  // default, server.hint_ttl_ms) or until they are acquired, and reads those
  // on the ssd into the host meanwhile. Hinted blocks per session are
  // bounded (server.max_hinted_blocks_per_session): past it the hint is
  // refused, RESOURCE_EXHAUSTED, and nothing changes. Keys never cached are
  // ignored.
  Result<protocol::HintReply> Hint(std::span<const BlockKey> keys, uint32_t ttl_ms = 0);
  // Ends this session's hints on `keys` (the request will not run after
  // all); the count of blocks whose protection it ended.
  Result<uint64_t> Unhint(std::span<const BlockKey> keys);
  // The daemon's counters and settings, "name value" pairs.
  Result<std::vector<std::pair<std::string, std::string>>> Stats();

  // Low level, used by WriteHandle and ReadLease and by tests.
  Status Commit(uint64_t allocation_id);
  Status Abort(uint64_t allocation_id);
  Status Release(uint64_t lease_id);
  // RELEASE without waiting for the reply, which is read after the next
  // request has been sent: a read (acquire, copy, release) then costs one
  // round trip, not two. The daemon handles requests in order, so the
  // blocks are unpinned before anything the client asks next. Only a
  // socket error is reported (a lease id the client holds cannot be
  // refused). ReadLease uses this.
  Status ReleaseDeferred(uint64_t lease_id);

 private:
  struct Arena {
    std::byte* base = nullptr;
    uint64_t bytes = 0;
  };

  explicit Client(const ClientOptions& options);
  Status Hello();
  Status MapArena(int fd, uint64_t bytes, const char* what, Arena* out);
  // The mapped arena of `tier`, or nullptr.
  const Arena* ArenaOf(WireTier tier) const;
  // OK when blocks of `tier` can be addressed in place.
  Status CheckArena(WireTier tier) const;
  // Bytes of the arena of `tier` that offsets may address (mapped or not).
  uint64_t ArenaBytes(WireTier tier) const;
  // Checks a request against the session's caps before it is sent.
  Status CheckKeys(std::span<const BlockKey> keys) const;
  // InvalidArgument naming the daemon, the reply and `why`.
  Status Malformed(protocol::Opcode op, const Status& why) const;
  // Sends tx_ and reads the reply, checked against `op` and `id`: the
  // payload of an OK reply, the carried Status of an error reply.
  // The payload lives in the connection until the next call.
  Result<std::span<const std::byte>> Call(protocol::Opcode op, uint64_t id,
                                          uint16_t* flags = nullptr);
  // An out-of-step reply breaks the connection.
  Result<std::span<const std::byte>> CheckReply(protocol::Opcode op, uint64_t id,
                                                const protocol::FrameHeader& header,
                                                std::span<const std::byte> payload);
  // COMMIT, ABORT or RELEASE of `handle_id`.
  Status Handle(protocol::Opcode op, uint64_t handle_id);
  uint64_t NextId() { return next_id_++; }
  // Reads the replies of deferred RELEASEs and TOUCHes, which precede any
  // later reply.
  Status ReadDeferredReplies();
  // Sends `frame`, request `id` of `op`, without waiting: its reply is read
  // with a later request's (ReadDeferredReplies).
  Status SendDeferred(protocol::Opcode op, uint64_t id, const std::vector<std::byte>& frame);
  // Sends a TOUCH of `keys` whose reply is read with the next request's.
  Status TouchDeferred(std::span<const BlockKey> keys);
  // Sends the TOUCH of the direct reads not yet told (touches_), if any.
  Status FlushTouches();
  // Where Read found a block: its offset in the host arena and its slot's
  // generation while it was leased.
  struct Located {
    uint64_t offset = 0;
    uint64_t generation = 0;
  };
  // Copies a remembered block to `dst` if its slot still holds it.
  bool CopyDirect(const Located& at, std::byte* dst) const;

  ClientOptions options_;
  std::unique_ptr<internal::Connection> conn_;
  protocol::HelloReply session_;
  std::optional<prefix_index::KeyHasher> hasher_;
  Arena host_;
  Arena device_;
  uint64_t next_id_ = 1;
  std::vector<std::byte> tx_;  // reused request buffer
  // Requests whose replies are unread (RELEASE, TOUCH), oldest first.
  std::vector<std::pair<protocol::Opcode, uint64_t>> deferred_;
  static constexpr size_t kMaxDeferred = 32;
  // Keys read directly that kvtierd has not heard of yet: told in one TOUCH
  // once there are kTouchBatch, or before the next request.
  std::vector<BlockKey> touches_;
  static constexpr size_t kTouchBatch = 64;
  // The host arena's slot generations (nullptr: a daemon without them) and
  // the blocks Read has seen, at most kMaxLocated (then forgotten at once).
  const std::atomic<uint64_t>* host_generations_ = nullptr;
  uint64_t host_generation_entries_ = 0;
  static constexpr size_t kMaxLocated = 1 << 16;
  std::unordered_map<BlockKey, Located, prefix_index::BlockKeyHash> located_;
  uint64_t direct_reads_ = 0;
  uint64_t direct_misses_ = 0;
};

}  // namespace kvtier::client

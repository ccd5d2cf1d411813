#include "client/client.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "client/internal/connection.h"
#include "common/slot_generations.h"

namespace kvtier::client {
namespace {

using protocol::Opcode;

// Request buffers above this are not kept between calls (an inline PUT of
// many blocks would otherwise pin its size for the client's life).
constexpr size_t kKeepTxBytes = 1 << 20;

// Closes whatever descriptors it still holds.
class FdList {
 public:
  explicit FdList(std::vector<int> fds) : fds_(std::move(fds)) {}
  ~FdList() {
    for (int fd : fds_) close(fd);
  }
  FdList(const FdList&) = delete;
  FdList& operator=(const FdList&) = delete;
  size_t size() const { return fds_.size(); }
  int operator[](size_t i) const { return fds_[i]; }

 private:
  std::vector<int> fds_;
};

Status ValidateOptions(const ClientOptions& o) {
  if (o.model.empty()) return InvalidArgumentError("ClientOptions::model is empty");
  for (const std::string* s : {&o.model, &o.salt, &o.client_name}) {
    if (s->size() > protocol::kMaxStringBytes) {
      return InvalidArgumentError("model, salt and client name are limited to " +
                                  std::to_string(protocol::kMaxStringBytes) + " bytes");
    }
  }
  KVTIER_RETURN_IF_ERROR(o.layout.Validate().WithContext("ClientOptions::layout"));
  return CheckQuantize(o.layout, o.quantize_lower);
}

std::string TierName(WireTier tier) {
  switch (tier) {
    case WireTier::kDevice:
      return "device";
    case WireTier::kHost:
      return "host";
    case WireTier::kSsd:
      return "ssd";
    case WireTier::kRemote:
      return "remote";
  }
  return "tier " + std::to_string(static_cast<int>(tier));
}

}  // namespace

Client::Client(const ClientOptions& options) : options_(options) {}

Client::~Client() {
  if (host_.base != nullptr) munmap(host_.base, host_.bytes);
  if (device_.base != nullptr) munmap(device_.base, device_.bytes);
}

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  KVTIER_RETURN_IF_ERROR(ValidateOptions(options));
  std::unique_ptr<Client> client(new Client(options));
  KVTIER_ASSIGN_OR_RETURN(
      client->conn_,
      internal::Connection::Open(options.socket_path, options.io_timeout_ms, options.busy_poll_us));
  KVTIER_RETURN_IF_ERROR(client->Hello());
  return client;
}

Status Client::Hello() {
  protocol::HelloRequest req;
  req.model = options_.model;
  req.salt = options_.salt;
  req.layout = options_.layout;
  req.client_name = options_.client_name;
  req.quantize_lower = options_.quantize_lower;
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeHello(id, req, &tx_);
  uint16_t flags = 0;
  auto payload = Call(Opcode::kHello, id, &flags);
  FdList fds(conn_->TakeFds());  // closed on every path below
  if (!payload.ok()) return payload.status();
  auto reply = protocol::DecodeHelloReply(*payload);
  if (!reply.ok()) return Malformed(Opcode::kHello, reply.status());
  session_ = *std::move(reply);
  if (session_.block_bytes != options_.layout.BlockBytes()) {
    return Malformed(Opcode::kHello,
                     InvalidArgumentError("block_bytes " + std::to_string(session_.block_bytes) +
                                          " does not match the layout's " +
                                          std::to_string(options_.layout.BlockBytes())));
  }
  auto hasher =
      prefix_index::KeyHasher::Create(session_.namespace_secret, options_.layout.block_tokens);
  if (!hasher.ok()) return Malformed(Opcode::kHello, hasher.status());
  hasher_.emplace(*std::move(hasher));
  if (!options_.map_arenas) return Status::Ok();
  const size_t expected = session_.device == protocol::DeviceKind::kEmulated ? 2 : 1;
  if ((flags & protocol::kFlagFds) == 0 || fds.size() != expected) {
    return Malformed(Opcode::kHello,
                     InvalidArgumentError("carried " + std::to_string(fds.size()) +
                                          " descriptors, expected " + std::to_string(expected)));
  }
  KVTIER_RETURN_IF_ERROR(MapArena(fds[0], session_.host_arena_bytes, "host", &host_));
  host_generations_ = FindSlotGenerations(host_.base, host_.bytes, &host_generation_entries_);
  if (expected == 2) {
    KVTIER_RETURN_IF_ERROR(MapArena(fds[1], session_.device_arena_bytes, "device", &device_));
  }
  return Status::Ok();
}

Status Client::MapArena(int fd, uint64_t bytes, const char* what, Arena* out) {
  if (bytes == 0) return Status::Ok();
  // A descriptor shorter than announced would SIGBUS on first touch.
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    return Malformed(Opcode::kHello,
                     InvalidArgumentError(std::string(what) + " arena descriptor is shorter than " +
                                          std::to_string(bytes) + " bytes"));
  }
  // An arena on huge pages (kvtierd's host.huge_pages; its st_blksize is
  // the page size) is mapped whole now: a few thousand page table entries
  // for the largest arenas, where leaving them to first touch costs each
  // block's first write or read in this process a page fault. On 4 KiB
  // pages populating would cost ~2 MiB of page tables per GiB and worker,
  // so those stay on demand.
  const int populate = st.st_blksize >= (2 << 20) ? MAP_POPULATE : 0;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | populate, fd, 0);
  if (base == MAP_FAILED) {
    return IoError("mmap of the " + std::string(what) + " arena (" + std::to_string(bytes) +
                   " bytes): " + std::strerror(errno));
  }
  out->base = static_cast<std::byte*>(base);
  out->bytes = bytes;
  return Status::Ok();
}

bool Client::mapped(WireTier tier) const { return ArenaOf(tier) != nullptr; }

uint64_t Client::ArenaBytes(WireTier tier) const {
  if (const Arena* a = ArenaOf(tier)) return a->bytes;
  if (tier == WireTier::kDevice && session_.device == protocol::DeviceKind::kCuda) {
    return session_.device_arena_bytes;
  }
  return 0;
}

bool Client::healthy() const { return !conn_->broken(); }

const Client::Arena* Client::ArenaOf(WireTier tier) const {
  const Arena* a = tier == WireTier::kHost     ? &host_
                   : tier == WireTier::kDevice ? &device_
                                               : nullptr;
  return a != nullptr && a->base != nullptr ? a : nullptr;
}

Status Client::Malformed(Opcode op, const Status& why) const {
  return InvalidArgumentError("kvtierd at " + options_.socket_path + ": malformed " +
                              std::string(protocol::OpcodeName(op)) +
                              " reply: " + std::string(why.message()));
}

Status Client::CheckKeys(std::span<const BlockKey> keys) const {
  if (keys.size() > session_.max_keys) {
    return InvalidArgumentError(std::to_string(keys.size()) +
                                " keys in one request; kvtierd takes " +
                                std::to_string(session_.max_keys) + " at most");
  }
  return Status::Ok();
}

Result<std::span<const std::byte>> Client::Call(Opcode op, uint64_t id, uint16_t* flags) {
  if (conn_->broken()) return conn_->BrokenError();
  if (tx_.size() - protocol::kHeaderBytes > session_.max_payload_bytes) {
    return InvalidArgumentError(std::string(protocol::OpcodeName(op)) + " request of " +
                                std::to_string(tx_.size()) + " bytes exceeds kvtierd's limit of " +
                                std::to_string(session_.max_payload_bytes) + "; split it");
  }
  // Direct reads not yet told go first, their reply read with this one's.
  KVTIER_RETURN_IF_ERROR(FlushTouches());
  Status sent = conn_->Send(tx_);
  if (tx_.capacity() > kKeepTxBytes) tx_ = {};
  KVTIER_RETURN_IF_ERROR(sent);
  KVTIER_RETURN_IF_ERROR(ReadDeferredReplies());
  KVTIER_ASSIGN_OR_RETURN(const internal::Frame* frame, conn_->Receive());
  if (flags != nullptr) *flags = frame->header.flags;
  return CheckReply(op, id, frame->header, frame->payload);
}

Result<std::span<const std::byte>> Client::CheckReply(Opcode op, uint64_t id,
                                                      const protocol::FrameHeader& header,
                                                      std::span<const std::byte> payload) {
  if ((header.flags & protocol::kFlagReply) == 0 || header.opcode != op ||
      header.request_id != id) {
    return conn_->Break(InvalidArgumentError(
        "kvtierd at " + options_.socket_path + ": got " +
        std::string(protocol::OpcodeName(header.opcode)) + " frame #" +
        std::to_string(header.request_id) + " while waiting for the reply to " +
        std::string(protocol::OpcodeName(op)) + " #" + std::to_string(id)));
  }
  if (header.status != 0) return protocol::DecodeError(header, payload);
  return payload;
}

std::vector<BlockKey> Client::Keys(std::span<const TokenId> tokens) const {
  return hasher_->Chain(tokens);
}

Result<protocol::LookupReply> Client::Lookup(std::span<const BlockKey> keys) {
  if (keys.empty()) return protocol::LookupReply{};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeKeys(Opcode::kLookup, id, keys, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kLookup, id));
  auto reply = protocol::DecodeLookupReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kLookup, reply.status());
  if (reply->tiers.size() > keys.size()) {
    return Malformed(Opcode::kLookup, InvalidArgumentError("more hits than keys"));
  }
  return reply;
}

Result<std::vector<protocol::LookupReply>> Client::LookupMany(
    std::span<const std::vector<BlockKey>> chains) {
  std::vector<protocol::LookupReply> replies(chains.size());
  std::vector<size_t> sent_chain;  // the chain index of each request sent
  const uint64_t first_id = next_id_;
  tx_.clear();
  for (size_t i = 0; i < chains.size(); ++i) {
    if (chains[i].empty()) continue;
    KVTIER_RETURN_IF_ERROR(CheckKeys(chains[i]));
    protocol::EncodeKeys(Opcode::kLookup, NextId(), chains[i], &tx_);
    sent_chain.push_back(i);
  }
  if (sent_chain.empty()) return replies;
  KVTIER_RETURN_IF_ERROR(FlushTouches());
  KVTIER_RETURN_IF_ERROR(ReadDeferredReplies());
  if (conn_->broken()) return conn_->BrokenError();
  size_t n = 0;
  Status s = conn_->Pipeline(tx_, sent_chain.size(), [&](const internal::Frame& frame) -> Status {
    const size_t chain = sent_chain[n];
    KVTIER_ASSIGN_OR_RETURN(
        auto payload, CheckReply(Opcode::kLookup, first_id + n++, frame.header, frame.payload));
    auto reply = protocol::DecodeLookupReply(payload);
    if (!reply.ok()) return Malformed(Opcode::kLookup, reply.status());
    if (reply->tiers.size() > chains[chain].size()) {
      return Malformed(Opcode::kLookup, InvalidArgumentError("more hits than keys"));
    }
    replies[chain] = *std::move(reply);
    return Status::Ok();
  });
  if (tx_.capacity() > kKeepTxBytes) tx_ = {};
  KVTIER_RETURN_IF_ERROR(s);
  return replies;
}

Result<WriteHandle> Client::Allocate(std::span<const BlockKey> keys, std::optional<BlockKey> parent,
                                     WireTier tier) {
  KVTIER_RETURN_IF_ERROR(CheckArena(tier));
  if (keys.empty()) return WriteHandle{};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  protocol::AllocateRequest req;
  req.tier = tier;
  req.parent = parent;
  req.keys.assign(keys.begin(), keys.end());
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeAllocate(id, req, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kAllocate, id));
  auto reply = protocol::DecodeAllocateReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kAllocate, reply.status());

  WriteHandle w;
  w.id_ = reply->allocation_id;
  w.tier_ = reply->tier;
  w.block_bytes_ = block_bytes();
  w.states_ = std::move(reply->states);
  w.blocks_.assign(keys.size(), nullptr);
  w.offsets_.assign(keys.size(), 0);
  Status bad;
  const Arena* arena = ArenaOf(reply->tier);
  const uint64_t arena_bytes = ArenaBytes(reply->tier);
  if (w.states_.size() != keys.size() || reply->offsets.size() != keys.size()) {
    bad = InvalidArgumentError("one state and one offset per key expected");
  } else if (arena_bytes == 0) {
    bad = InvalidArgumentError("slots in the unmapped " + TierName(reply->tier) + " tier");
  }
  for (size_t i = 0; bad.ok() && i < keys.size(); ++i) {
    if (w.states_[i] != WireWriteState::kAllocated) continue;
    const uint64_t off = reply->offsets[i];
    if (off > arena_bytes || arena_bytes - off < block_bytes()) {
      bad = InvalidArgumentError("offset " + std::to_string(off) + " outside the arena");
    } else {
      w.offsets_[i] = off;
      if (arena != nullptr) w.blocks_[i] = arena->base + off;
    }
  }
  if (!bad.ok()) {
    Abort(reply->allocation_id).IgnoreError();  // best effort: the reply is unusable
    return Malformed(Opcode::kAllocate, bad);
  }
  w.client_ = this;
  return w;
}

Result<ReadLease> Client::Acquire(std::span<const BlockKey> keys, WireTier tier) {
  KVTIER_RETURN_IF_ERROR(CheckArena(tier));
  if (keys.empty()) return ReadLease{};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  protocol::AcquireRequest req;
  req.tier = tier;
  req.keys.assign(keys.begin(), keys.end());
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeAcquire(id, req, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kAcquire, id));
  auto reply = protocol::DecodeAcquireReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kAcquire, reply.status());

  ReadLease r;
  r.id_ = reply->lease_id;
  r.tier_ = reply->tier;
  r.block_bytes_ = block_bytes();
  Status bad;
  const Arena* arena = ArenaOf(reply->tier);
  const uint64_t arena_bytes = ArenaBytes(reply->tier);
  if (reply->offsets.size() > keys.size()) {
    bad = InvalidArgumentError("more blocks than keys");
  } else if (arena_bytes == 0 && !reply->offsets.empty()) {
    bad = InvalidArgumentError("blocks in the unmapped " + TierName(reply->tier) + " tier");
  }
  for (size_t i = 0; bad.ok() && i < reply->offsets.size(); ++i) {
    const uint64_t off = reply->offsets[i];
    if (off > arena_bytes || arena_bytes - off < block_bytes()) {
      bad = InvalidArgumentError("offset " + std::to_string(off) + " outside the arena");
    } else {
      r.offsets_.push_back(off);
      r.blocks_.push_back(arena != nullptr ? arena->base + off : nullptr);
    }
  }
  if (!bad.ok()) {
    Release(reply->lease_id).IgnoreError();  // best effort: the reply is unusable
    return Malformed(Opcode::kAcquire, bad);
  }
  r.client_ = this;
  return r;
}

Status Client::CheckArena(WireTier tier) const {
  if (tier == WireTier::kSsd) {
    return InvalidArgumentError("the ssd tier cannot be addressed in place; use host");
  }
  if (mapped(tier)) return Status::Ok();
  if (tier == WireTier::kDevice && session_.device == protocol::DeviceKind::kCuda) {
    return Status::Ok();  // addressed by offset in the GPU arena (client/cuda_ipc.h)
  }
  if (!options_.map_arenas) {
    return FailedPreconditionError("arenas not mapped (ClientOptions::map_arenas is false)");
  }
  return FailedPreconditionError("kvtierd offers no mappable " + TierName(tier) + " arena");
}

Result<protocol::PutReply> Client::PutInline(std::span<const BlockKey> keys,
                                             std::span<const std::byte> data,
                                             std::optional<BlockKey> parent) {
  if (data.size() != keys.size() * block_bytes()) {
    return InvalidArgumentError("PUT of " + std::to_string(keys.size()) + " blocks needs " +
                                std::to_string(keys.size() * block_bytes()) + " bytes, got " +
                                std::to_string(data.size()));
  }
  if (keys.empty()) return protocol::PutReply{};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodePut(id, parent, keys, data, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kPut, id));
  auto reply = protocol::DecodePutReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kPut, reply.status());
  if (reply->states.size() != keys.size()) {
    return Malformed(Opcode::kPut, InvalidArgumentError("one state per key expected"));
  }
  return reply;
}

Result<protocol::GetReply> Client::GetInline(std::span<const BlockKey> keys) {
  protocol::GetReply reply;
  KVTIER_RETURN_IF_ERROR(GetInline(keys, &reply));
  return reply;
}

Status Client::GetInline(std::span<const BlockKey> keys, protocol::GetReply* reply) {
  reply->hits = 0;
  reply->data.clear();
  if (keys.empty()) return Status::Ok();
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeKeys(Opcode::kGet, id, keys, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kGet, id));
  Status decoded = protocol::DecodeGetReplyInto(payload, block_bytes(), reply);
  if (!decoded.ok()) return Malformed(Opcode::kGet, decoded);
  if (reply->hits > keys.size() || reply->data.size() != reply->hits * block_bytes()) {
    return Malformed(Opcode::kGet, InvalidArgumentError("hits and data do not match the keys"));
  }
  return Status::Ok();
}

Result<uint64_t> Client::Remove(std::span<const BlockKey> keys) {
  if (keys.empty()) return uint64_t{0};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeKeys(Opcode::kRemove, id, keys, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kRemove, id));
  auto reply = protocol::DecodeCountReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kRemove, reply.status());
  return reply->count;
}

Result<uint64_t> Client::SetRetention(std::span<const BlockKey> keys,
                                      std::span<const protocol::RetentionRange> ranges) {
  if (keys.empty() || ranges.empty()) return uint64_t{0};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  if (ranges.size() > protocol::kMaxRetentionRanges) {
    return InvalidArgumentError("more than " + std::to_string(protocol::kMaxRetentionRanges) +
                                " retention ranges");
  }
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeSetRetention(id, keys, ranges, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kSetRetention, id));
  auto reply = protocol::DecodeCountReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kSetRetention, reply.status());
  return reply->count;
}

Result<protocol::HintReply> Client::Hint(std::span<const BlockKey> keys, uint32_t ttl_ms) {
  if (keys.empty()) return protocol::HintReply{};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeHint(
      id, {.keys = {keys.begin(), keys.end()}, .ttl_ms = ttl_ms, .withdraw = false}, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kHint, id));
  auto reply = protocol::DecodeHintReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kHint, reply.status());
  return *reply;
}

Result<uint64_t> Client::Unhint(std::span<const BlockKey> keys) {
  if (keys.empty()) return uint64_t{0};
  KVTIER_RETURN_IF_ERROR(CheckKeys(keys));
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeHint(id, {.keys = {keys.begin(), keys.end()}, .ttl_ms = 0, .withdraw = true},
                       &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kHint, id));
  auto reply = protocol::DecodeHintReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kHint, reply.status());
  return reply->blocks;
}

Result<std::vector<std::pair<std::string, std::string>>> Client::Stats() {
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeStats(id, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(Opcode::kStats, id));
  auto reply = protocol::DecodeStatsReply(payload);
  if (!reply.ok()) return Malformed(Opcode::kStats, reply.status());
  return std::move(reply->entries);
}

Status Client::Commit(uint64_t allocation_id) { return Handle(Opcode::kCommit, allocation_id); }
Status Client::Abort(uint64_t allocation_id) { return Handle(Opcode::kAbort, allocation_id); }
Status Client::Release(uint64_t lease_id) { return Handle(Opcode::kRelease, lease_id); }

Status Client::ReleaseDeferred(uint64_t lease_id) {
  if (conn_->broken()) return conn_->BrokenError();
  const uint64_t id = NextId();
  std::vector<std::byte> frame;
  protocol::EncodeHandle(Opcode::kRelease, id, lease_id, &frame);
  return SendDeferred(Opcode::kRelease, id, frame);
}

Status Client::SendDeferred(Opcode op, uint64_t id, const std::vector<std::byte>& frame) {
  KVTIER_RETURN_IF_ERROR(conn_->Send(frame));
  deferred_.emplace_back(op, id);
  return Status::Ok();
}

Status Client::TouchDeferred(std::span<const BlockKey> keys) {
  if (conn_->broken()) return conn_->BrokenError();
  // A worker that only reads directly sends nothing else: its TOUCHes'
  // replies are read now and then, or they would fill the socket until
  // kvtierd stopped reading it.
  if (deferred_.size() >= kMaxDeferred) KVTIER_RETURN_IF_ERROR(ReadDeferredReplies());
  const uint64_t id = NextId();
  std::vector<std::byte> frame;
  protocol::EncodeKeys(Opcode::kTouch, id, keys, &frame);
  return SendDeferred(Opcode::kTouch, id, frame);
}

Status Client::FlushTouches() {
  if (touches_.empty()) return Status::Ok();
  Status s = TouchDeferred(touches_);
  touches_.clear();
  return s;
}

Status Client::ReadDeferredReplies() {
  for (const auto& [op, id] : std::exchange(deferred_, {})) {
    KVTIER_ASSIGN_OR_RETURN(const internal::Frame* frame, conn_->Receive());
    auto payload = CheckReply(op, id, frame->header, frame->payload);
    if (!payload.ok() && conn_->broken()) return payload.status();
    // A refused RELEASE (see ReleaseDeferred) or TOUCH (the blocks went
    // meanwhile) costs nothing that was read.
    payload.status().IgnoreError();
  }
  return Status::Ok();
}

bool Client::CopyDirect(const Located& at, std::byte* dst) const {
  const std::atomic<uint64_t>& generation = host_generations_[at.offset / kSlotGenerationPageBytes];
  if (generation.load(std::memory_order_acquire) != at.generation) return false;
  std::memcpy(dst, host_.base + at.offset, block_bytes());
  // The copy's loads before the second look (a seqlock's reader).
  std::atomic_thread_fence(std::memory_order_acquire);
  return generation.load(std::memory_order_relaxed) == at.generation;
}

Result<size_t> Client::Read(std::span<const BlockKey> keys, std::span<std::byte* const> dst) {
  KVTIER_RETURN_IF_ERROR(CheckArena(WireTier::kHost));
  if (dst.size() < keys.size()) {
    return InvalidArgumentError("Read: " + std::to_string(keys.size()) + " keys but " +
                                std::to_string(dst.size()) + " destinations");
  }
  size_t direct = 0;
  for (; host_generations_ != nullptr && direct < keys.size(); ++direct) {
    auto it = located_.find(keys[direct]);
    if (it == located_.end()) break;
    if (!CopyDirect(it->second, dst[direct])) {
      located_.erase(it);
      ++direct_misses_;
      break;
    }
  }
  direct_reads_ += direct;
  if (direct > 0) {
    if (touches_.size() + direct > session_.max_keys) KVTIER_RETURN_IF_ERROR(FlushTouches());
    touches_.insert(touches_.end(), keys.begin(), keys.begin() + static_cast<ptrdiff_t>(direct));
    if (touches_.size() >= kTouchBatch) KVTIER_RETURN_IF_ERROR(FlushTouches());
  }
  if (direct == keys.size()) return direct;
  KVTIER_ASSIGN_OR_RETURN(ReadLease lease, Acquire(keys.subspan(direct)));
  if (located_.size() + lease.size() > kMaxLocated) located_.clear();
  for (size_t i = 0; i < lease.size(); ++i) {
    std::memcpy(dst[direct + i], lease.Bytes(i).data(), block_bytes());
    const uint64_t page = lease.offset(i) / kSlotGenerationPageBytes;
    if (host_generations_ != nullptr && page < host_generation_entries_) {
      // Steady while the lease pins the block.
      located_[keys[direct + i]] = {lease.offset(i),
                                    host_generations_[page].load(std::memory_order_acquire)};
    }
  }
  return direct + lease.size();
}

Status Client::Handle(Opcode op, uint64_t handle_id) {
  const uint64_t id = NextId();
  tx_.clear();
  protocol::EncodeHandle(op, id, handle_id, &tx_);
  KVTIER_ASSIGN_OR_RETURN(auto payload, Call(op, id));
  auto reply = protocol::DecodeCountReply(payload);
  if (!reply.ok()) return Malformed(op, reply.status());
  return Status::Ok();
}

}  // namespace kvtier::client

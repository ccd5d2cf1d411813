#include "daemon/service.h"

#include <sys/random.h>

#include <cassert>
#include <chrono>
#include <cstring>
#include <optional>

#include "daemon/log.h"
#include "prefix_index/namespace_secret.h"

namespace kvtier::daemon {
namespace {

using protocol::FrameHeader;
using protocol::Opcode;
using protocol::WireTier;
using protocol::WireWriteState;
using tiers::TierKind;

// Copies at or above this size go to the copy pool; below it, the hop to
// another thread costs more than the copy.
constexpr uint64_t kOffloadBytes = 1 * kMiB;

TierKind ToTier(WireTier t) {
  switch (t) {
    case WireTier::kDevice:
      return TierKind::kDevice;
    case WireTier::kHost:
      return TierKind::kHost;
    case WireTier::kSsd:
      return TierKind::kSsd;
    case WireTier::kRemote:
      return TierKind::kRemote;
  }
  return TierKind::kSsd;
}

WireTier ToWire(TierKind t) {
  switch (t) {
    case TierKind::kDevice:
      return WireTier::kDevice;
    case TierKind::kHost:
      return WireTier::kHost;
    case TierKind::kSsd:
      return WireTier::kSsd;
    case TierKind::kRemote:
      return WireTier::kRemote;
  }
  return WireTier::kSsd;
}

WireWriteState ToWire(engine::WriteState s) {
  switch (s) {
    case engine::WriteState::kAllocated:
      return WireWriteState::kAllocated;
    case engine::WriteState::kExists:
      return WireWriteState::kExists;
    case engine::WriteState::kSkipped:
      return WireWriteState::kSkipped;
  }
  return WireWriteState::kSkipped;
}

std::vector<std::byte> MasterSecret(const std::string& hex, std::span<const std::byte> persistent) {
  std::vector<std::byte> secret;
  if (hex.empty() && !persistent.empty()) return {persistent.begin(), persistent.end()};
  if (!hex.empty()) {
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      secret.push_back(static_cast<std::byte>(std::stoul(hex.substr(i, 2), nullptr, 16)));
    }
    return secret;
  }
  secret.resize(32);
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = getrandom(secret.data() + got, secret.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return secret;
}

}  // namespace

Service::Service(engine::CacheEngine& engine, const DaemonConfig& config,
                 asio::thread_pool& copy_pool, std::span<const std::byte> persistent_secret)
    : engine_(engine),
      config_(config),
      copy_pool_(copy_pool),
      master_secret_(MasterSecret(config.secret_hex, persistent_secret)) {}

asio::awaitable<Result<engine::Lease>> Service::Acquire(
    prefix_index::NamespaceId ns, std::span<const prefix_index::BlockKey> keys,
    tiers::TierKind tier) {
  // The completion runs on this (the engine's) thread, either inside
  // AcquireAsync or later from an ssd read; a timer cancelled by it wakes
  // the coroutine in the second case.
  struct Wait {
    explicit Wait(const asio::any_io_executor& ex) : timer(ex) {}
    std::optional<Result<engine::Lease>> result;
    asio::steady_timer timer;
  };
  auto wait = std::make_shared<Wait>(co_await asio::this_coro::executor);
  engine_.AcquireAsync(ns, keys, tier, [wait](Result<engine::Lease> r) {
    wait->result.emplace(std::move(r));
    wait->timer.cancel();
  });
  while (!wait->result) {
    wait->timer.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await wait->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return std::move(*wait->result);
}

Status Service::LookupNow(SessionState& s, const FrameHeader& h, const protocol::KeysRequest& r,
                          Reply* reply) {
  KVTIER_RETURN_IF_ERROR(engine_.Lookup(s.ns, r.keys, &lookup_found_));
  EncodeLookup(h, lookup_found_, reply);
  return Status::Ok();
}

void Service::EncodeLookup(const FrameHeader& h, const engine::LookupResult& found, Reply* reply) {
  lookup_reply_.tiers.resize(found.tiers.size());
  for (size_t i = 0; i < found.tiers.size(); ++i) lookup_reply_.tiers[i] = ToWire(found.tiers[i]);
  protocol::EncodeLookupReply(h.request_id, lookup_reply_, &reply->frame);
}

asio::awaitable<Status> Service::Lookup(SessionState& s, const FrameHeader& h,
                                        const protocol::KeysRequest& r, Reply* reply) {
  // As Acquire: the completion runs inside LookupAsync, or later when the
  // remote tier answers.
  struct Wait {
    explicit Wait(const asio::any_io_executor& ex) : timer(ex) {}
    std::optional<Result<engine::LookupResult>> result;
    asio::steady_timer timer;
  };
  auto wait = std::make_shared<Wait>(co_await asio::this_coro::executor);
  engine_.LookupAsync(s.ns, r.keys, [wait](Result<engine::LookupResult> found) {
    wait->result.emplace(std::move(found));
    wait->timer.cancel();
  });
  while (!wait->result) {
    wait->timer.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await wait->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!*wait->result) co_return wait->result->status();
  EncodeLookup(h, **wait->result, reply);
  co_return Status::Ok();
}

uint64_t Service::OpenSession() {
  ++sessions_;
  return next_session_id_++;
}

void Service::CloseSession(SessionState& session) {
  // RAII: destroying the handles aborts the writes and releases the leases.
  session.allocations.clear();
  session.leases.clear();
  if (session.id != 0) engine_.DropHints(session.id);  // its queue is gone with it
  if (session.id != 0) --sessions_;
  session.id = 0;
}

std::array<std::byte, protocol::kNamespaceSecretBytes> Service::NamespaceSecret(
    const std::string& model, const std::string& salt) const {
  static_assert(protocol::kNamespaceSecretBytes == prefix_index::kNamespaceSecretBytes);
  return prefix_index::DeriveNamespaceSecret(master_secret_, model, salt);
}

template <typename F>
asio::awaitable<void> Service::Copy(uint64_t bytes, F copy) {
  if (bytes < kOffloadBytes) {
    copy();
    co_return;
  }
  co_await asio::co_spawn(
      copy_pool_,
      [&copy]() -> asio::awaitable<void> {
        copy();
        co_return;
      },
      asio::use_awaitable);
}

void Service::Malformed(const FrameHeader& header, const Status& error, Reply* reply) {
  ++protocol_errors_;
  malformed_log_.Log(LogLevel::kWarn,
                     Str("malformed frame; closing the connection: ", error.ToString()));
  protocol::EncodeError(header.opcode, header.request_id, error, &reply->frame);
  reply->close = true;
}

// One switch, one named handler per opcode. It has no default, and a
// missing case is an error whatever the build's flags (the pragma below):
// an opcode added to protocol/wire.h without a handler does not compile.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
bool Service::HandleNow(SessionState& s, const FrameHeader& h, protocol::Request& request,
                        Reply* reply) {
  ++requests_;  // (here for those Handle answers too)
  const auto start = std::chrono::steady_clock::now();
  // Set by the opcode's case. Only a value outside the enum leaves it unset
  // (the decoder refuses those); not made an error up front, which would
  // cost every request two allocations.
  std::optional<Status> status;
  if (h.opcode != Opcode::kHello && !s.attached) {
    status = FailedPreconditionError("HELLO must be the first request of a connection");
    reply->close = true;
  } else {
    switch (h.opcode) {
      case Opcode::kAcquire:
      case Opcode::kPut:
      case Opcode::kGet:
        return false;  // they wait: Handle
      case Opcode::kLookup:
        if (engine_.has_remote()) return false;  // for the remote tier
        status = LookupNow(s, h, std::get<protocol::KeysRequest>(request), reply);
        break;
      case Opcode::kHello:
        status = Hello(s, h, std::get<protocol::HelloRequest>(request), reply);
        break;
      case Opcode::kAllocate:
        status = Allocate(s, h, std::get<protocol::AllocateRequest>(request), reply);
        break;
      case Opcode::kCommit:
        status = Commit(s, h, std::get<protocol::HandleRequest>(request), reply);
        break;
      case Opcode::kAbort:
        status = Abort(s, h, std::get<protocol::HandleRequest>(request), reply);
        break;
      case Opcode::kRelease:
        status = Release(s, h, std::get<protocol::HandleRequest>(request), reply);
        break;
      case Opcode::kRemove:
        status = Remove(s, h, std::get<protocol::KeysRequest>(request), reply);
        break;
      case Opcode::kStats:
        status = Stats(h, reply);
        break;
      case Opcode::kSetRetention:
        status = SetRetention(s, h, std::get<protocol::RetentionRequest>(request), reply);
        break;
      case Opcode::kHint:
        status = Hint(s, h, std::get<protocol::HintRequest>(request), reply);
        break;
      case Opcode::kTouch:
        status = Touch(s, h, std::get<protocol::KeysRequest>(request), reply);
        break;
    }
  }
  if (!status) status = InternalError("unhandled opcode");
  Finish(s, h, start, *status, reply);
  return true;
}
#pragma GCC diagnostic pop

asio::awaitable<void> Service::Handle(SessionState& s, const FrameHeader& h,
                                      protocol::Request& request, Reply* reply) {
  const auto start = std::chrono::steady_clock::now();
  Status status;
  switch (h.opcode) {
    case Opcode::kLookup:
      status = co_await Lookup(s, h, std::get<protocol::KeysRequest>(request), reply);
      break;
    case Opcode::kAcquire:
      status = co_await AcquireRequest(s, h, std::get<protocol::AcquireRequest>(request), reply);
      break;
    case Opcode::kPut:
      status = co_await Put(s, h, std::get<protocol::PutRequest>(request), reply);
      break;
    case Opcode::kGet:
      status = co_await Get(s, h, std::get<protocol::KeysRequest>(request), reply);
      break;
    default:  // HandleNow answered it
      assert(false && "Handle is for the requests HandleNow leaves");
      status = InternalError("request routed to the waiting handler by mistake");
      break;
  }
  Finish(s, h, start, status, reply);
}

void Service::Finish(const SessionState& s, const FrameHeader& h,
                     std::chrono::steady_clock::time_point start, const Status& status,
                     Reply* reply) {
  ops_.Record(h.opcode, std::chrono::steady_clock::now() - start, status.ok());
  if (!status.ok()) {
    ++request_errors_;
    const std::string line =
        Str("session ", s.id, ": ", protocol::OpcodeName(h.opcode), " failed: ", status.ToString());
    switch (status.code()) {
      case StatusCode::kIoError:
      case StatusCode::kCorruption:
      case StatusCode::kInternal:
        failed_log_.Log(LogLevel::kWarn, line);
        break;
      case StatusCode::kResourceExhausted:
        full_log_.Log(LogLevel::kWarn, line);
        break;
      default:  // the worker's mistake: worth a line, not an alarm
        rejected_log_.Log(LogLevel::kInfo, line);
        break;
    }
    reply->frame.clear();
    reply->fds.clear();
    protocol::EncodeError(h.opcode, h.request_id, status, &reply->frame);
  }
}

Status Service::Hello(SessionState& s, const FrameHeader& h, const protocol::HelloRequest& r,
                      Reply* reply) {
  if (s.attached) {
    reply->close = true;
    return FailedPreconditionError("this connection is attached already; HELLO comes once");
  }
  const uint16_t version = std::min(r.max_version, protocol::kMaxVersion);
  if (version < std::max(r.min_version, protocol::kMinVersion)) {
    reply->close = true;
    return FailedPreconditionError(Str("no common protocol version: client speaks ", r.min_version,
                                       "-", r.max_version, ", kvtierd ", protocol::kMinVersion, "-",
                                       protocol::kMaxVersion));
  }
  if (!engine_.FindNamespace(r.model, r.salt) &&
      engine_.namespace_count() >= config_.max_namespaces) {
    CountRefusal(Refusal::kMaxNamespaces);
    namespaces_log_.Log(LogLevel::kWarn, Str("refused a new namespace (model '", r.model,
                                             "'): ", engine_.namespace_count(),
                                             " are registered, the most allowed is ",
                                             config_.max_namespaces, " (server.max_namespaces)"));
    return ResourceExhaustedError(
        Str("kvtierd has ", engine_.namespace_count(),
            " namespaces (model, salt, layout) registered, the most allowed is ",
            config_.max_namespaces, " (server.max_namespaces); attach with one of them"));
  }
  KVTIER_ASSIGN_OR_RETURN(const prefix_index::NamespaceId ns,
                          engine_.AddNamespace({r.model, r.salt, r.layout, r.quantize_lower}));
  s.attached = true;
  s.ns = ns;
  s.block_bytes = r.layout.BlockBytes();

  protocol::HelloReply out;
  out.version = version;
  out.session_id = s.id;
  out.namespace_id = ns;
  out.block_bytes = s.block_bytes;
  tiers::Tier& host = *engine_.tier(TierKind::kHost);
  out.slot_bytes = host.SlotBytes(s.block_bytes);
  out.host_arena_bytes = host.arena_bytes();
  reply->fds.push_back(host.arena_fd());
  if (tiers::Tier* device = engine_.tier(TierKind::kDevice)) {
    out.device = device->emulated() ? protocol::DeviceKind::kEmulated : protocol::DeviceKind::kCuda;
    out.device_arena_bytes = device->arena_bytes();
    if (device->arena_fd() >= 0) reply->fds.push_back(device->arena_fd());
    if (out.device == protocol::DeviceKind::kCuda) {
      out.device_ordinal = device->device_ordinal();
      const std::span<const std::byte> handle = device->ipc_handle();
      std::copy(handle.begin(), handle.end(), out.device_ipc_handle.begin());
    }
  }
  out.max_keys = config_.max_keys;
  out.max_payload_bytes = static_cast<uint32_t>(config_.max_payload_bytes);
  out.namespace_secret = NamespaceSecret(r.model, r.salt);
  protocol::EncodeHelloReply(h.request_id, out, /*fds=*/true, &reply->frame);
  Log(LogLevel::kInfo,
      Str("session ", s.id, " attached: client '", r.client_name, "', model '", r.model, "'",
          r.salt.empty() ? "" : " (salted)", ", ", r.layout.ToString(), ", peer ",
          s.peer.known ? Str("pid ", s.peer.pid, " uid ", s.peer.uid, " gid ", s.peer.gid)
                       : std::string("unknown")));
  return Status::Ok();
}

Status Service::Allocate(SessionState& s, const FrameHeader& h, const protocol::AllocateRequest& r,
                         Reply* reply) {
  if (s.allocations.size() >= config_.max_allocations_per_session) {
    CountRefusal(Refusal::kMaxAllocations);
    return ResourceExhaustedError(
        Str("this session has ", s.allocations.size(),
            " open allocations, the most allowed (server.max_allocations_per_session); "
            "commit or abort one first"));
  }
  KVTIER_ASSIGN_OR_RETURN(engine::Allocation a,
                          engine_.Allocate(s.ns, r.parent, r.keys, ToTier(r.tier)));
  protocol::AllocateReply rep;
  rep.allocation_id = a.id();
  rep.tier = r.tier;
  for (size_t i = 0; i < a.size(); ++i) {
    rep.states.push_back(ToWire(a.state(i)));
    rep.offsets.push_back(a.state(i) == engine::WriteState::kAllocated ? a.location(i).offset : 0);
  }
  s.allocations.emplace(a.id(), std::move(a));
  protocol::EncodeAllocateReply(h.request_id, rep, &reply->frame);
  return Status::Ok();
}

Result<engine::Allocation> Service::TakeAllocation(SessionState& s, uint64_t id) {
  auto it = s.allocations.find(id);
  if (it == s.allocations.end()) {
    return NotFoundError(Str("allocation ", id, " is not open in this session"));
  }
  engine::Allocation a = std::move(it->second);
  s.allocations.erase(it);
  return a;
}

Status Service::Commit(SessionState& s, const FrameHeader& h, const protocol::HandleRequest& r,
                       Reply* reply) {
  KVTIER_ASSIGN_OR_RETURN(engine::Allocation a, TakeAllocation(s, r.id));
  KVTIER_RETURN_IF_ERROR(a.Commit());
  protocol::EncodeCountReply(h.opcode, h.request_id, {}, &reply->frame);
  return Status::Ok();
}

Status Service::Abort(SessionState& s, const FrameHeader& h, const protocol::HandleRequest& r,
                      Reply* reply) {
  KVTIER_ASSIGN_OR_RETURN(engine::Allocation a, TakeAllocation(s, r.id));
  a.Abort();
  protocol::EncodeCountReply(h.opcode, h.request_id, {}, &reply->frame);
  return Status::Ok();
}

Status Service::Release(SessionState& s, const FrameHeader& h, const protocol::HandleRequest& r,
                        Reply* reply) {
  if (s.leases.erase(r.id) == 0) {
    return NotFoundError(Str("lease ", r.id, " is not held by this session"));
  }
  protocol::EncodeCountReply(h.opcode, h.request_id, {}, &reply->frame);
  return Status::Ok();
}

Status Service::Touch(SessionState& s, const FrameHeader& h, const protocol::KeysRequest& r,
                      Reply* reply) {
  KVTIER_ASSIGN_OR_RETURN(const size_t touched, engine_.Touch(s.ns, r.keys));
  protocol::EncodeCountReply(h.opcode, h.request_id, {touched}, &reply->frame);
  return Status::Ok();
}

Status Service::Remove(SessionState& s, const FrameHeader& h, const protocol::KeysRequest& r,
                       Reply* reply) {
  KVTIER_ASSIGN_OR_RETURN(const size_t removed, engine_.Remove(s.ns, r.keys));
  protocol::EncodeCountReply(h.opcode, h.request_id, {removed}, &reply->frame);
  return Status::Ok();
}

namespace {

// SET_RETENTION names token ranges; the engine keeps a priority per block.
// Block j holds tokens [j*bt, (j+1)*bt) and takes the highest priority of the
// ranges overlapping it (with that range's expiry); blocks no range touches
// keep the default.
struct BlockRetention {
  std::vector<uint8_t> priorities;
  std::vector<TimeNs> expires_at;
};

BlockRetention RetentionOfBlocks(std::span<const protocol::RetentionRange> ranges,
                                 uint64_t block_tokens, size_t blocks, TimeNs now) {
  BlockRetention out;
  out.priorities.assign(blocks, eviction::kDefaultPriority);
  out.expires_at.assign(blocks, eviction::kNoExpiry);
  std::vector<bool> set(blocks, false);
  for (const protocol::RetentionRange& range : ranges) {
    const uint64_t first = range.token_begin / block_tokens;
    const uint64_t last = std::min<uint64_t>((range.token_end - 1) / block_tokens, blocks - 1);
    for (uint64_t j = first; j <= last && j < blocks; ++j) {
      if (set[j] && out.priorities[j] >= range.priority) continue;
      set[j] = true;
      out.priorities[j] = range.priority;
      out.expires_at[j] = range.duration_ms == 0
                              ? eviction::kNoExpiry
                              : now + static_cast<TimeNs>(range.duration_ms) * kNsPerMs;
    }
  }
  return out;
}

}  // namespace

Status Service::SetRetention(SessionState& s, const FrameHeader& h,
                             const protocol::RetentionRequest& r, Reply* reply) {
  const BlockRetention retention =
      RetentionOfBlocks(r.ranges, engine_.FindNamespace(s.ns)->layout.block_tokens, r.keys.size(),
                        SystemClock().Now());
  KVTIER_ASSIGN_OR_RETURN(
      const size_t updated,
      engine_.SetRetention(s.ns, r.keys, retention.priorities, retention.expires_at));
  protocol::EncodeCountReply(h.opcode, h.request_id, {updated}, &reply->frame);
  return Status::Ok();
}

Status Service::Hint(SessionState& s, const FrameHeader& h, const protocol::HintRequest& r,
                     Reply* reply) {
  protocol::HintReply rep;
  if (r.withdraw) {
    KVTIER_ASSIGN_OR_RETURN(rep.blocks, engine_.Unhint(s.id, s.ns, r.keys));
    protocol::EncodeHintReply(h.request_id, rep, &reply->frame);
    return Status::Ok();
  }
  if (r.ttl_ms > config_.max_hint_ttl_ms) {
    return InvalidArgumentError(Str("a hint of ", r.ttl_ms, " ms is longer than the most allowed, ",
                                    config_.max_hint_ttl_ms, " (server.max_hint_ttl_ms)"));
  }
  const uint32_t ttl_ms = r.ttl_ms == 0 ? config_.hint_ttl_ms : r.ttl_ms;
  auto hinted = engine_.Hint(s.id, s.ns, r.keys,
                             SystemClock().Now() + static_cast<TimeNs>(ttl_ms) * kNsPerMs);
  if (!hinted) {
    if (hinted.status().code() == StatusCode::kResourceExhausted) {
      CountRefusal(Refusal::kMaxHinted);
      return hinted.status().WithContext("server.max_hinted_blocks_per_session");
    }
    return hinted.status();
  }
  rep.blocks = hinted->protected_blocks;
  rep.prefetching = hinted->prefetching;
  protocol::EncodeHintReply(h.request_id, rep, &reply->frame);
  return Status::Ok();
}

asio::awaitable<Status> Service::Put(SessionState& s, const FrameHeader& h,
                                     const protocol::PutRequest& r, Reply* reply) {
  if (!r.keys.empty() && r.data.size() != r.keys.size() * s.block_bytes) {
    co_return InvalidArgumentError(Str("PUT carries ", r.data.size(), " bytes for ", r.keys.size(),
                                       " blocks of ", s.block_bytes, " bytes"));
  }
  auto allocated = engine_.Allocate(s.ns, r.parent, r.keys, TierKind::kHost);
  if (!allocated) co_return allocated.status();
  engine::Allocation a = std::move(allocated).value();
  // The slots are pinned and invisible until Commit, so filling them off the
  // engine's thread races with nothing.
  co_await Copy(a.allocated() * s.block_bytes, [&] {
    for (size_t i = 0; i < a.size(); ++i) {
      if (a.state(i) != engine::WriteState::kAllocated) continue;
      std::memcpy(a.Bytes(i).data(), r.data.data() + i * s.block_bytes, s.block_bytes);
    }
  });
  protocol::PutReply rep;
  for (size_t i = 0; i < a.size(); ++i) rep.states.push_back(ToWire(a.state(i)));
  if (Status committed = a.Commit(); !committed.ok()) co_return committed;
  protocol::EncodePutReply(h.request_id, rep, &reply->frame);
  co_return Status::Ok();
}

asio::awaitable<Status> Service::AcquireRequest(SessionState& s, const FrameHeader& h,
                                                const protocol::AcquireRequest& r, Reply* reply) {
  if (s.leases.size() >= config_.max_leases_per_session) {
    CountRefusal(Refusal::kMaxLeases);
    co_return ResourceExhaustedError(
        Str("this session holds ", s.leases.size(),
            " leases, the most allowed (server.max_leases_per_session); release one first"));
  }
  Result<engine::Lease> acquired = co_await Acquire(s.ns, r.keys, ToTier(r.tier));
  if (!acquired) co_return acquired.status();
  engine::Lease lease = std::move(acquired).value();
  protocol::AcquireReply rep;
  rep.lease_id = lease.id();
  rep.tier = r.tier;
  for (size_t i = 0; i < lease.size(); ++i) rep.offsets.push_back(lease.location(i).offset);
  s.leases.emplace(lease.id(), std::move(lease));
  protocol::EncodeAcquireReply(h.request_id, rep, &reply->frame);
  co_return Status::Ok();
}

asio::awaitable<Status> Service::Get(SessionState& s, const FrameHeader& h,
                                     const protocol::KeysRequest& r, Reply* reply) {
  // As many keys as fit one reply frame.
  const uint64_t fit = (config_.max_payload_bytes - 4) / s.block_bytes;
  const auto keys = std::span(r.keys).first(std::min<size_t>(r.keys.size(), fit));
  auto acquired = co_await Acquire(s.ns, keys, TierKind::kHost);
  if (!acquired) co_return acquired.status();
  engine::Lease lease = std::move(acquired).value();
  const auto hits = static_cast<uint32_t>(lease.size());
  std::span<std::byte> data =
      protocol::EncodeGetReplyPrefix(h.request_id, hits, s.block_bytes, &reply->frame);
  // The blocks stay pinned by the lease while a pool thread copies them out.
  co_await Copy(data.size(), [&] {
    for (size_t i = 0; i < hits; ++i) {
      std::memcpy(data.data() + i * s.block_bytes, lease.Bytes(i).data(), s.block_bytes);
    }
  });
  co_return Status::Ok();
}

DaemonSnapshot Service::Snapshot() const {
  DaemonSnapshot snap;
  snap.engine = engine_.Stats();
  snap.sessions = sessions_;
  snap.sessions_opened = next_session_id_ - 1;
  snap.requests = requests_;
  snap.request_errors = request_errors_;
  snap.protocol_errors = protocol_errors_;
  snap.refusals = refusals_;
  snap.ops = ops_;
  if (publisher_ != nullptr) {
    const KvEventPublisher::Stats e = publisher_->stats();
    snap.events = DaemonSnapshot::Events{e.batches_published, e.events_published, e.batches_dropped,
                                         e.replay_requests};
  }
  return snap;
}

Status Service::Stats(const FrameHeader& h, Reply* reply) {
  protocol::StatsReply rep;
  rep.entries = StatsEntries(Snapshot());
  protocol::EncodeStatsReply(h.request_id, rep, &reply->frame);
  return Status::Ok();
}

}  // namespace kvtier::daemon

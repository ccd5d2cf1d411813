// The kvtier wire format (DESIGN.md §5, docs/protocol.md): framed binary
// messages over a Unix stream socket. Every function here is a pure function
// of its arguments: no sockets, no engine, no allocation beyond the results.
//
// A frame is a fixed 24-byte little-endian header and `payload_bytes` of
// payload. Requests carry a client-chosen request id; the reply to a request
// carries the same id, the same opcode, the kReply flag and a status code
// (0 = OK; otherwise the payload is the error message). Requests may be
// pipelined: replies come back in request order.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/fp8.h"
#include "common/layout.h"
#include "common/result.h"
#include "prefix_index/block_key.h"

namespace kvtier::protocol {

using prefix_index::BlockKey;

inline constexpr uint32_t kMagic = 0x3154564b;  // bytes "KVT1"
inline constexpr uint16_t kMinVersion = 1;
inline constexpr uint16_t kMaxVersion = 1;
inline constexpr size_t kHeaderBytes = 24;
// Hard caps. A daemon may configure lower ones; never higher.
inline constexpr uint32_t kMaxPayloadBytes = 256u << 20;  // 256 MiB
inline constexpr uint32_t kMaxKeys = 1u << 16;            // 65,536 keys per request
inline constexpr size_t kMaxStringBytes = 1024;           // model, salt, client name
inline constexpr size_t kNamespaceSecretBytes = 32;
// A CUDA IPC memory handle (cudaIpcMemHandle_t), carried as opaque bytes.
inline constexpr size_t kCudaIpcHandleBytes = 64;

enum class Opcode : uint16_t {
  kHello = 1,
  kLookup = 2,
  kAllocate = 3,
  kCommit = 4,
  kAbort = 5,
  kAcquire = 6,
  kRelease = 7,
  kPut = 8,
  kGet = 9,
  kRemove = 10,
  kStats = 11,
  kSetRetention = 12,
  kHint = 13,
  // Keys whose blocks the worker read straight from the arena (direct
  // reads), those of several reads at once: each present one counted as
  // served and made recent, as an ACQUIRE would, nothing pinned. Replied
  // with how many.
  kTouch = 14,
};
std::string_view OpcodeName(Opcode op);  // "HELLO", "LOOKUP", ...
bool IsKnownOpcode(uint16_t op);

// Header flag bits.
inline constexpr uint16_t kFlagReply = 1;
// The reply carries file descriptors (SCM_RIGHTS) with its first byte.
inline constexpr uint16_t kFlagFds = 2;

struct FrameHeader {
  uint16_t version = kMaxVersion;
  Opcode opcode = Opcode::kHello;
  uint64_t request_id = 0;
  uint32_t payload_bytes = 0;
  // StatusCode of the reply; 0 in requests.
  uint16_t status = 0;
  uint16_t flags = 0;
};

// Writes the 24-byte header. REQUIRES: out.size() >= kHeaderBytes.
void EncodeHeader(const FrameHeader& h, std::span<std::byte> out);
// Validates magic, version range, opcode and `payload_bytes <= max_payload`.
// InvalidArgument with a message naming the fault; never reads past `in`.
Result<FrameHeader> DecodeHeader(std::span<const std::byte> in, uint32_t max_payload);

// Where a block is to live or be read: the two tiers a worker can address.
// kRemote: only in LOOKUP replies, for blocks found in the remote tier
// (ACQUIRE reads them into the host tier); a request naming it is malformed.
enum class WireTier : uint8_t { kDevice = 0, kHost = 1, kSsd = 2, kRemote = 3 };

// What the daemon offers for the device tier.
enum class DeviceKind : uint8_t { kNone = 0, kEmulated = 1, kCuda = 2 };

// ---- requests ----------------------------------------------------------

struct HelloRequest {
  uint16_t min_version = kMinVersion;
  uint16_t max_version = kMaxVersion;
  std::string model;
  std::string salt;
  Layout layout;
  std::string client_name;
  // Quantize on demote for the namespace (docs/fp8.md). Optional on the
  // wire: a trailing u8 sent only when not kOff or when layout_kind follows,
  // so a daemon from before it still takes every HELLO that does not ask
  // for it. layout.kind travels as a further optional u8, layout_kind, after
  // it: sent only for kLatent (a daemon from before it refuses such a HELLO
  // as having trailing bytes, never mistakes it for a K/V namespace).
  Quantize quantize_lower = Quantize::kOff;
};

// LOOKUP, GET and REMOVE.
struct KeysRequest {
  std::vector<BlockKey> keys;
};

struct AllocateRequest {
  WireTier tier = WireTier::kHost;
  std::optional<BlockKey> parent;
  std::vector<BlockKey> keys;
};

// COMMIT, ABORT (allocation id) and RELEASE (lease id).
struct HandleRequest {
  uint64_t id = 0;
};

struct AcquireRequest {
  WireTier tier = WireTier::kHost;
  std::vector<BlockKey> keys;
};

// PUT: keys and their bytes inline, keys.size() x block_bytes of them.
// `data` views the decoded payload; it is valid as long as that buffer.
struct PutRequest {
  std::optional<BlockKey> parent;
  std::vector<BlockKey> keys;
  std::span<const std::byte> data;
};

struct StatsRequest {};

// SET_RETENTION: retention priorities for token ranges of a prompt whose
// full blocks are `keys` (its chain from the first block), with TensorRT-
// LLM's semantics: priority 0-100 (lower goes first; 35 is the default),
// falling back to 35 after `duration_ms` (0: no fallback). A block takes the
// highest priority of the ranges that overlap it.
inline constexpr uint32_t kMaxRetentionRanges = 1024;
struct RetentionRange {
  uint64_t token_begin = 0;
  uint64_t token_end = 0;  // exclusive; > token_begin
  uint8_t priority = 35;
  uint64_t duration_ms = 0;
};
struct RetentionRequest {
  std::vector<BlockKey> keys;
  std::vector<RetentionRange> ranges;
};

// HINT: the worker will soon run a request whose full blocks are `keys` (its
// chain from the first block). The daemon protects the leading cached
// blocks from eviction for `ttl_ms` (0: the daemon's default) or until they
// are acquired, and reads those on the ssd into the host. `withdraw` ends
// this session's hints on the keys instead (the request left the queue).
struct HintRequest {
  std::vector<BlockKey> keys;
  uint32_t ttl_ms = 0;
  bool withdraw = false;
};

using Request =
    std::variant<HelloRequest, KeysRequest, AllocateRequest, HandleRequest, AcquireRequest,
                 PutRequest, StatsRequest, RetentionRequest, HintRequest>;

// Appends header + payload of a request to `out`.
void EncodeHello(uint64_t request_id, const HelloRequest& r, std::vector<std::byte>* out);
// LOOKUP, GET or REMOVE.
void EncodeKeys(Opcode op, uint64_t request_id, std::span<const BlockKey> keys,
                std::vector<std::byte>* out);
void EncodeAllocate(uint64_t request_id, const AllocateRequest& r, std::vector<std::byte>* out);
// COMMIT, ABORT or RELEASE.
void EncodeHandle(Opcode op, uint64_t request_id, uint64_t id, std::vector<std::byte>* out);
void EncodeAcquire(uint64_t request_id, const AcquireRequest& r, std::vector<std::byte>* out);
void EncodePut(uint64_t request_id, std::optional<BlockKey> parent, std::span<const BlockKey> keys,
               std::span<const std::byte> data, std::vector<std::byte>* out);
void EncodeStats(uint64_t request_id, std::vector<std::byte>* out);
void EncodeSetRetention(uint64_t request_id, std::span<const BlockKey> keys,
                        std::span<const RetentionRange> ranges, std::vector<std::byte>* out);
void EncodeHint(uint64_t request_id, const HintRequest& r, std::vector<std::byte>* out);

// Decodes the payload of a request whose header was accepted. Checks every
// length against the payload and the caps (keys <= max_keys, strings <=
// kMaxStringBytes, a layout that Validate()s, PUT data = a whole number of
// blocks); InvalidArgument otherwise. Never reads past `payload`.
Result<Request> DecodeRequest(const FrameHeader& h, std::span<const std::byte> payload,
                              uint32_t max_keys);
// The same into `req`, whose key vector is reused when it holds a request
// with keys already (the daemon decodes each connection's requests into one
// Request: a LOOKUP allocates nothing once the vector has grown). On error
// `req` holds something unspecified.
Status DecodeRequest(const FrameHeader& h, std::span<const std::byte> payload, uint32_t max_keys,
                     Request* req);

// ---- replies -----------------------------------------------------------

struct HelloReply {
  uint16_t version = kMaxVersion;  // the version both sides speak
  uint64_t session_id = 0;
  uint32_t namespace_id = 0;
  uint64_t block_bytes = 0;
  uint64_t slot_bytes = 0;        // a block's slot in the host arena
  uint64_t host_arena_bytes = 0;  // size to mmap of the first fd
  DeviceKind device = DeviceKind::kNone;
  uint64_t device_arena_bytes = 0;  // size to mmap of the second fd (emulated)
  uint32_t max_keys = kMaxKeys;
  uint32_t max_payload_bytes = kMaxPayloadBytes;
  // Keys of this namespace are hashed with it (prefix_index::KeyHasher).
  std::array<std::byte, kNamespaceSecretBytes> namespace_secret{};
  // device == kCuda: the GPU's CUDA ordinal on the daemon's node and the
  // arena's IPC handle (cudaIpcOpenMemHandle maps device_arena_bytes of
  // it). Otherwise -1 and zeros.
  int32_t device_ordinal = -1;
  std::array<std::byte, kCudaIpcHandleBytes> device_ipc_handle{};
};

struct LookupReply {
  std::vector<WireTier> tiers;  // one per leading hit
};

enum class WireWriteState : uint8_t { kAllocated = 0, kExists = 1, kSkipped = 2 };

struct AllocateReply {
  uint64_t allocation_id = 0;
  WireTier tier = WireTier::kHost;
  std::vector<WireWriteState> states;  // one per requested key
  std::vector<uint64_t> offsets;       // arena offset per key; 0 unless kAllocated
};

struct AcquireReply {
  uint64_t lease_id = 0;
  WireTier tier = WireTier::kHost;
  std::vector<uint64_t> offsets;  // one per leased block, in key order
};

struct PutReply {
  std::vector<WireWriteState> states;
};

// GET: the leading present blocks' bytes, hits x block_bytes.
struct GetReply {
  uint32_t hits = 0;
  std::vector<std::byte> data;
};

struct CountReply {
  uint64_t count = 0;  // REMOVE: blocks removed; SET_RETENTION: blocks updated; else 0
};

// HINT: blocks now protected (withdraw: whose protection this session ended)
// and, of them, those being read from the ssd into the host.
struct HintReply {
  uint64_t blocks = 0;
  uint64_t prefetching = 0;
};

// STATS: "name value" pairs, one per metric; values are numbers or text.
struct StatsReply {
  std::vector<std::pair<std::string, std::string>> entries;
};

void EncodeHelloReply(uint64_t request_id, const HelloReply& r, bool fds,
                      std::vector<std::byte>* out);
void EncodeLookupReply(uint64_t request_id, const LookupReply& r, std::vector<std::byte>* out);
void EncodeAllocateReply(uint64_t request_id, const AllocateReply& r, std::vector<std::byte>* out);
void EncodeAcquireReply(uint64_t request_id, const AcquireReply& r, std::vector<std::byte>* out);
void EncodePutReply(uint64_t request_id, const PutReply& r, std::vector<std::byte>* out);
// Writes GET's header and `hits`, and reserves hits x block_bytes for the
// data, returned as a span to fill (so the daemon copies blocks straight in).
std::span<std::byte> EncodeGetReplyPrefix(uint64_t request_id, uint32_t hits, uint64_t block_bytes,
                                          std::vector<std::byte>* out);
void EncodeCountReply(Opcode op, uint64_t request_id, const CountReply& r,
                      std::vector<std::byte>* out);
void EncodeStatsReply(uint64_t request_id, const StatsReply& r, std::vector<std::byte>* out);
void EncodeHintReply(uint64_t request_id, const HintReply& r, std::vector<std::byte>* out);
// An error reply: status != OK, payload = the message (truncated to 4 KiB).
void EncodeError(Opcode op, uint64_t request_id, const Status& status, std::vector<std::byte>* out);

// Client side: decode a reply's payload (the header was decoded already and
// status == 0). InvalidArgument/Corruption-free: a malformed reply is
// InvalidArgument with a message.
Result<HelloReply> DecodeHelloReply(std::span<const std::byte> payload);
Result<LookupReply> DecodeLookupReply(std::span<const std::byte> payload);
Result<AllocateReply> DecodeAllocateReply(std::span<const std::byte> payload);
Result<AcquireReply> DecodeAcquireReply(std::span<const std::byte> payload);
Result<PutReply> DecodePutReply(std::span<const std::byte> payload);
// `data` of the result is copied out of the payload.
Result<GetReply> DecodeGetReply(std::span<const std::byte> payload, uint64_t block_bytes);
// The same into `out`, reusing the capacity of out->data.
Status DecodeGetReplyInto(std::span<const std::byte> payload, uint64_t block_bytes, GetReply* out);
Result<CountReply> DecodeCountReply(std::span<const std::byte> payload);
Result<StatsReply> DecodeStatsReply(std::span<const std::byte> payload);
Result<HintReply> DecodeHintReply(std::span<const std::byte> payload);
// The Status an error reply carries (code from the header, message from the payload).
Status DecodeError(const FrameHeader& h, std::span<const std::byte> payload);

}  // namespace kvtier::protocol

// The wire format, byte-exact in docs/protocol.md. Encoders append whole
// frames; decoders read through internal::ByteReader, which checks every
// length before it reads, so no input can make a decoder read out of bounds,
// overflow a size or allocate more than the input could describe.
#include "protocol/wire.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

#include "protocol/internal/byte_io.h"

namespace kvtier::protocol {
namespace {

using internal::ByteReader;
using internal::ByteWriter;

// Error messages longer than this are cut (at a UTF-8 character boundary).
constexpr size_t kMaxErrorBytes = 4096;
// Byte offsets of header fields.
constexpr size_t kPayloadBytesOffset = 16;
constexpr size_t kKeyBytes = 16;
constexpr uint8_t kMaxDType = static_cast<uint8_t>(DType::kFp8E5M2);
constexpr uint8_t kMaxTier = static_cast<uint8_t>(WireTier::kSsd);
constexpr uint8_t kMaxDeviceKind = static_cast<uint8_t>(DeviceKind::kCuda);
constexpr uint8_t kMaxWriteState = static_cast<uint8_t>(WireWriteState::kSkipped);
constexpr uint16_t kMaxStatusCode = static_cast<uint16_t>(StatusCode::kPermissionDenied);

std::string Hex(uint64_t v) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, 16);
  (void)ec;  // 16 hex digits always fit.
  return "0x" + std::string(buf, end);
}

std::string Num(uint64_t v) { return std::to_string(v); }

// ---- encoding ----------------------------------------------------------

// Appends a header with payload_bytes 0; EndFrame() fills it in.
size_t BeginFrame(Opcode op, uint64_t request_id, uint16_t version, uint16_t status, uint16_t flags,
                  std::vector<std::byte>* out) {
  const size_t start = out->size();
  out->resize(start + kHeaderBytes);
  FrameHeader h;
  h.version = version;
  h.opcode = op;
  h.request_id = request_id;
  h.status = status;
  h.flags = flags;
  EncodeHeader(h, std::span<std::byte>(*out).subspan(start));
  return start;
}

size_t BeginRequest(Opcode op, uint64_t request_id, std::vector<std::byte>* out) {
  return BeginFrame(op, request_id, kMaxVersion, 0, 0, out);
}

size_t BeginReply(Opcode op, uint64_t request_id, std::vector<std::byte>* out) {
  return BeginFrame(op, request_id, kMaxVersion, 0, kFlagReply, out);
}

void EndFrame(size_t start, std::vector<std::byte>* out) {
  const size_t payload = out->size() - start - kHeaderBytes;
  // REQUIRES of every encoder: the frame fits the hard cap.
  assert(payload <= kMaxPayloadBytes);
  internal::StoreLe(payload, 4, out->data() + start + kPayloadBytesOffset);
}

void WriteKey(ByteWriter& w, const BlockKey& k) {
  w.U64(k.lo);
  w.U64(k.hi);
}

void WriteOptionalKey(ByteWriter& w, const std::optional<BlockKey>& k) {
  w.U8(k.has_value() ? 1 : 0);
  if (k) WriteKey(w, *k);
}

void WriteKeys(ByteWriter& w, std::span<const BlockKey> keys) {
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const BlockKey& k : keys) WriteKey(w, k);
}

// A string longer than kMaxStringBytes is written as is (up to the u16
// limit), so the receiver refuses it with a clear error instead of acting on
// a silently truncated name.
void WriteString(ByteWriter& w, std::string_view s) {
  const size_t n = std::min<size_t>(s.size(), std::numeric_limits<uint16_t>::max());
  w.U16(static_cast<uint16_t>(n));
  w.Bytes(std::as_bytes(std::span(s.data(), n)));
}

void WriteLayout(ByteWriter& w, const Layout& l) {
  w.U32(l.layers);
  w.U32(l.kv_heads);
  w.U32(l.head_dim);
  w.U8(static_cast<uint8_t>(l.dtype));
  w.U32(l.block_tokens);
}

void WriteStates(ByteWriter& w, const std::vector<WireWriteState>& states) {
  for (WireWriteState s : states) w.U8(static_cast<uint8_t>(s));
}

// ---- decoding ----------------------------------------------------------

Status ReadKey(ByteReader& r, std::string_view field, BlockKey* k) {
  KVTIER_RETURN_IF_ERROR(r.Need(field, kKeyBytes));
  KVTIER_RETURN_IF_ERROR(r.U64(field, &k->lo));
  return r.U64(field, &k->hi);
}

Status ReadOptionalKey(ByteReader& r, std::string_view field, std::optional<BlockKey>* k) {
  uint8_t present = 0;
  KVTIER_RETURN_IF_ERROR(r.U8(field, &present));
  if (present > 1) {
    return InvalidArgumentError(std::string(field) + " presence byte is " + Num(present) +
                                ", not 0 or 1");
  }
  k->reset();
  if (present == 0) return Status::Ok();
  BlockKey key;
  KVTIER_RETURN_IF_ERROR(ReadKey(r, field, &key));
  *k = key;
  return Status::Ok();
}

// A u32 count of up to `max` items of at least `item_bytes` each. Checks both
// before anything is allocated for them.
Status ReadCount(ByteReader& r, std::string_view what, uint32_t max, size_t item_bytes,
                 uint32_t* count) {
  KVTIER_RETURN_IF_ERROR(r.U32(what, count));
  if (*count > max) {
    return InvalidArgumentError("too many " + std::string(what) + " (" + Num(*count) + " > " +
                                Num(max) + ")");
  }
  // 64-bit math: count < 2^32 and item_bytes <= 16 cannot overflow.
  const uint64_t need = uint64_t{*count} * item_bytes;
  if (need > r.remaining()) {
    return InvalidArgumentError("truncated: " + Num(*count) + " " + std::string(what) + " need " +
                                Num(need) + " bytes at offset " + Num(r.offset()) + ", " +
                                Num(r.remaining()) + " left");
  }
  return Status::Ok();
}

Status ReadKeys(ByteReader& r, uint32_t max_keys, std::vector<BlockKey>* keys) {
  uint32_t count = 0;
  KVTIER_RETURN_IF_ERROR(ReadCount(r, "keys", max_keys, kKeyBytes, &count));
  std::span<const std::byte> bytes;
  KVTIER_RETURN_IF_ERROR(r.Bytes("keys", size_t{count} * kKeyBytes, &bytes));
  // One bounds check for the whole array, then fixed-size loads: this loop
  // is the hot path of every LOOKUP, ACQUIRE and ALLOCATE.
  keys->resize(count);
  static_assert(std::endian::native == std::endian::little,
                "keys are copied as host integers; a big-endian port must swap");
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(&(*keys)[i].lo, bytes.data() + i * kKeyBytes, 8);
    std::memcpy(&(*keys)[i].hi, bytes.data() + i * kKeyBytes + 8, 8);
  }
  return Status::Ok();
}

Status ReadString(ByteReader& r, std::string_view field, std::string* s) {
  uint16_t n = 0;
  KVTIER_RETURN_IF_ERROR(r.U16(std::string(field) + " length", &n));
  if (n > kMaxStringBytes) {
    return InvalidArgumentError(std::string(field) + " of " + Num(n) +
                                " bytes exceeds the limit of " + Num(kMaxStringBytes));
  }
  std::span<const std::byte> bytes;
  KVTIER_RETURN_IF_ERROR(r.Bytes(field, n, &bytes));
  s->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return Status::Ok();
}

Status ReadLayout(ByteReader& r, Layout* l) {
  uint8_t dtype = 0;
  KVTIER_RETURN_IF_ERROR(r.U32("layout.layers", &l->layers));
  KVTIER_RETURN_IF_ERROR(r.U32("layout.kv_heads", &l->kv_heads));
  KVTIER_RETURN_IF_ERROR(r.U32("layout.head_dim", &l->head_dim));
  KVTIER_RETURN_IF_ERROR(r.U8("layout.dtype", &dtype));
  KVTIER_RETURN_IF_ERROR(r.U32("layout.block_tokens", &l->block_tokens));
  if (dtype > kMaxDType) return InvalidArgumentError("unknown dtype " + Num(dtype));
  l->dtype = static_cast<DType>(dtype);
  return l->Validate().WithContext("bad layout");
}

// A u8 enum whose values are 0..max.
template <typename E>
Status ReadEnum(ByteReader& r, std::string_view field, uint8_t max, E* e) {
  uint8_t v = 0;
  KVTIER_RETURN_IF_ERROR(r.U8(field, &v));
  if (v > max) {
    return InvalidArgumentError("unknown " + std::string(field) + " " + Num(v) + " (max " +
                                Num(max) + ")");
  }
  *e = static_cast<E>(v);
  return Status::Ok();
}

// `count` write states; once one key is skipped, every later key is too.
Status ReadStates(ByteReader& r, uint32_t count, std::vector<WireWriteState>* states) {
  states->resize(count);
  bool skipped = false;
  for (size_t i = 0; i < states->size(); ++i) {
    WireWriteState& s = (*states)[i];
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "write state", kMaxWriteState, &s));
    if (skipped && s != WireWriteState::kSkipped) {
      return InvalidArgumentError("key " + Num(i) + " follows a skipped key but is not skipped");
    }
    skipped = s == WireWriteState::kSkipped;
  }
  return Status::Ok();
}

Status DecodeHelloBody(ByteReader& r, HelloRequest* m) {
  KVTIER_RETURN_IF_ERROR(r.U16("min_version", &m->min_version));
  KVTIER_RETURN_IF_ERROR(r.U16("max_version", &m->max_version));
  if (m->min_version == 0 || m->min_version > m->max_version) {
    return InvalidArgumentError("bad client version range [" + Num(m->min_version) + ", " +
                                Num(m->max_version) + "]: versions start at 1 and min <= max");
  }
  KVTIER_RETURN_IF_ERROR(ReadString(r, "model", &m->model));
  KVTIER_RETURN_IF_ERROR(ReadString(r, "salt", &m->salt));
  KVTIER_RETURN_IF_ERROR(ReadLayout(r, &m->layout));
  return ReadString(r, "client_name", &m->client_name);
}

Status DecodeAllocateBody(ByteReader& r, uint32_t max_keys, AllocateRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTier, &m->tier));
  KVTIER_RETURN_IF_ERROR(ReadOptionalKey(r, "parent", &m->parent));
  return ReadKeys(r, max_keys, &m->keys);
}

Status DecodeRetentionBody(ByteReader& r, uint32_t max_keys, RetentionRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadKeys(r, max_keys, &m->keys));
  uint32_t count = 0;
  constexpr size_t kRangeBytes = 8 + 8 + 1 + 8;
  KVTIER_RETURN_IF_ERROR(ReadCount(r, "ranges", kMaxRetentionRanges, kRangeBytes, &count));
  m->ranges.resize(count);
  for (RetentionRange& range : m->ranges) {
    KVTIER_RETURN_IF_ERROR(r.U64("token_begin", &range.token_begin));
    KVTIER_RETURN_IF_ERROR(r.U64("token_end", &range.token_end));
    KVTIER_RETURN_IF_ERROR(r.U8("priority", &range.priority));
    KVTIER_RETURN_IF_ERROR(r.U64("duration_ms", &range.duration_ms));
    if (range.token_end <= range.token_begin) {
      return InvalidArgumentError("empty token range [" + Num(range.token_begin) + ", " +
                                  Num(range.token_end) + ")");
    }
    if (range.priority > 100) {
      return InvalidArgumentError("priority " + Num(range.priority) + " is above 100");
    }
  }
  return Status::Ok();
}

Status DecodeHintBody(ByteReader& r, uint32_t max_keys, HintRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadKeys(r, max_keys, &m->keys));
  KVTIER_RETURN_IF_ERROR(r.U32("ttl_ms", &m->ttl_ms));
  uint8_t withdraw = 0;
  KVTIER_RETURN_IF_ERROR(r.U8("withdraw", &withdraw));
  if (withdraw > 1) return InvalidArgumentError("withdraw is " + Num(withdraw) + ", not 0 or 1");
  m->withdraw = withdraw == 1;
  return Status::Ok();
}

Status DecodeAcquireBody(ByteReader& r, uint32_t max_keys, AcquireRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTier, &m->tier));
  return ReadKeys(r, max_keys, &m->keys);
}

Status DecodePutBody(ByteReader& r, uint32_t max_keys, PutRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadOptionalKey(r, "parent", &m->parent));
  KVTIER_RETURN_IF_ERROR(ReadKeys(r, max_keys, &m->keys));
  uint64_t block_bytes = 0;
  KVTIER_RETURN_IF_ERROR(r.U64("block_bytes", &block_bytes));
  m->data = r.Rest();
  const uint64_t n = m->keys.size();
  const uint64_t size = m->data.size();
  // Division first: n * block_bytes may not fit 64 bits.
  const bool whole =
      n == 0 ? size == 0 : block_bytes != 0 && block_bytes <= size / n && n * block_bytes == size;
  if (!whole) {
    return InvalidArgumentError("data of " + Num(size) + " bytes is not " + Num(n) + " blocks of " +
                                Num(block_bytes) + " bytes");
  }
  return Status::Ok();
}

// Decodes a reply payload with `body`, which must consume all of it.
template <typename T, typename F>
Result<T> DecodeReply(std::string_view what, std::span<const std::byte> payload, F body) {
  ByteReader r(payload);
  T m;
  Status s = body(r, &m);
  if (s.ok()) s = r.ExpectEnd();
  if (!s.ok()) return s.WithContext(std::string(what) + " reply");
  return m;
}

}  // namespace

std::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kHello:
      return "HELLO";
    case Opcode::kLookup:
      return "LOOKUP";
    case Opcode::kAllocate:
      return "ALLOCATE";
    case Opcode::kCommit:
      return "COMMIT";
    case Opcode::kAbort:
      return "ABORT";
    case Opcode::kAcquire:
      return "ACQUIRE";
    case Opcode::kRelease:
      return "RELEASE";
    case Opcode::kPut:
      return "PUT";
    case Opcode::kGet:
      return "GET";
    case Opcode::kRemove:
      return "REMOVE";
    case Opcode::kStats:
      return "STATS";
    case Opcode::kSetRetention:
      return "SET_RETENTION";
    case Opcode::kHint:
      return "HINT";
  }
  return "UNKNOWN";
}

bool IsKnownOpcode(uint16_t op) {
  return op >= static_cast<uint16_t>(Opcode::kHello) && op <= static_cast<uint16_t>(Opcode::kHint);
}

void EncodeHeader(const FrameHeader& h, std::span<std::byte> out) {
  assert(out.size() >= kHeaderBytes);
  std::byte* p = out.data();
  internal::StoreLe(kMagic, 4, p);
  internal::StoreLe(h.version, 2, p + 4);
  internal::StoreLe(static_cast<uint16_t>(h.opcode), 2, p + 6);
  internal::StoreLe(h.request_id, 8, p + 8);
  internal::StoreLe(h.payload_bytes, 4, p + 16);
  internal::StoreLe(h.status, 2, p + 20);
  internal::StoreLe(h.flags, 2, p + 22);
}

Result<FrameHeader> DecodeHeader(std::span<const std::byte> in, uint32_t max_payload) {
  if (in.size() < kHeaderBytes) {
    return InvalidArgumentError("short header: " + Num(in.size()) + " of " + Num(kHeaderBytes) +
                                " bytes");
  }
  ByteReader r(in.first(kHeaderBytes));
  uint32_t magic = 0;
  uint16_t opcode = 0;
  FrameHeader h;
  // The header is 24 bytes and the reads below add up to 24: none can fail.
  r.U32("magic", &magic).IgnoreError();
  r.U16("version", &h.version).IgnoreError();
  r.U16("opcode", &opcode).IgnoreError();
  r.U64("request_id", &h.request_id).IgnoreError();
  r.U32("payload_bytes", &h.payload_bytes).IgnoreError();
  r.U16("status", &h.status).IgnoreError();
  r.U16("flags", &h.flags).IgnoreError();
  if (magic != kMagic) {
    return InvalidArgumentError("bad magic " + Hex(magic) + " (expected " + Hex(kMagic) +
                                ", \"KVT1\"): not a kvtier frame");
  }
  if (h.version < kMinVersion || h.version > kMaxVersion) {
    return InvalidArgumentError("unsupported protocol version " + Num(h.version) +
                                " (this side speaks " + Num(kMinVersion) + " to " +
                                Num(kMaxVersion) + ")");
  }
  if (!IsKnownOpcode(opcode)) return InvalidArgumentError("unknown opcode " + Num(opcode));
  h.opcode = static_cast<Opcode>(opcode);
  const uint32_t cap = std::min(max_payload, kMaxPayloadBytes);
  if (h.payload_bytes > cap) {
    return InvalidArgumentError("payload of " + Num(h.payload_bytes) +
                                " bytes exceeds the cap of " + Num(cap));
  }
  return h;
}

// ---- requests ----------------------------------------------------------

void EncodeHello(uint64_t request_id, const HelloRequest& r, std::vector<std::byte>* out) {
  // The header carries the client's lowest version: any daemon that shares a
  // version with the client accepts it, whatever its own range.
  const size_t start = BeginFrame(Opcode::kHello, request_id, r.min_version, 0, 0, out);
  ByteWriter w(out);
  w.U16(r.min_version);
  w.U16(r.max_version);
  WriteString(w, r.model);
  WriteString(w, r.salt);
  WriteLayout(w, r.layout);
  WriteString(w, r.client_name);
  EndFrame(start, out);
}

void EncodeKeys(Opcode op, uint64_t request_id, std::span<const BlockKey> keys,
                std::vector<std::byte>* out) {
  assert(op == Opcode::kLookup || op == Opcode::kGet || op == Opcode::kRemove);
  const size_t start = BeginRequest(op, request_id, out);
  ByteWriter w(out);
  WriteKeys(w, keys);
  EndFrame(start, out);
}

void EncodeAllocate(uint64_t request_id, const AllocateRequest& r, std::vector<std::byte>* out) {
  const size_t start = BeginRequest(Opcode::kAllocate, request_id, out);
  ByteWriter w(out);
  w.U8(static_cast<uint8_t>(r.tier));
  WriteOptionalKey(w, r.parent);
  WriteKeys(w, r.keys);
  EndFrame(start, out);
}

void EncodeHandle(Opcode op, uint64_t request_id, uint64_t id, std::vector<std::byte>* out) {
  assert(op == Opcode::kCommit || op == Opcode::kAbort || op == Opcode::kRelease);
  const size_t start = BeginRequest(op, request_id, out);
  ByteWriter(out).U64(id);
  EndFrame(start, out);
}

void EncodeAcquire(uint64_t request_id, const AcquireRequest& r, std::vector<std::byte>* out) {
  const size_t start = BeginRequest(Opcode::kAcquire, request_id, out);
  ByteWriter w(out);
  w.U8(static_cast<uint8_t>(r.tier));
  WriteKeys(w, r.keys);
  EndFrame(start, out);
}

void EncodePut(uint64_t request_id, std::optional<BlockKey> parent, std::span<const BlockKey> keys,
               std::span<const std::byte> data, std::vector<std::byte>* out) {
  // REQUIRES: data holds keys.size() whole blocks. If it does not, the
  // block_bytes written here makes the receiver refuse the frame.
  assert(keys.empty() ? data.empty() : data.size() % keys.size() == 0);
  const uint64_t block_bytes = keys.empty() ? 0 : data.size() / keys.size();
  const size_t start = BeginRequest(Opcode::kPut, request_id, out);
  ByteWriter w(out);
  WriteOptionalKey(w, parent);
  WriteKeys(w, keys);
  w.U64(block_bytes);
  w.Bytes(data);
  EndFrame(start, out);
}

void EncodeStats(uint64_t request_id, std::vector<std::byte>* out) {
  EndFrame(BeginRequest(Opcode::kStats, request_id, out), out);
}

void EncodeSetRetention(uint64_t request_id, std::span<const BlockKey> keys,
                        std::span<const RetentionRange> ranges, std::vector<std::byte>* out) {
  const size_t start = BeginRequest(Opcode::kSetRetention, request_id, out);
  ByteWriter w(out);
  WriteKeys(w, keys);
  w.U32(static_cast<uint32_t>(ranges.size()));
  for (const RetentionRange& range : ranges) {
    w.U64(range.token_begin);
    w.U64(range.token_end);
    w.U8(range.priority);
    w.U64(range.duration_ms);
  }
  EndFrame(start, out);
}

void EncodeHint(uint64_t request_id, const HintRequest& r, std::vector<std::byte>* out) {
  const size_t start = BeginRequest(Opcode::kHint, request_id, out);
  ByteWriter w(out);
  WriteKeys(w, r.keys);
  w.U32(r.ttl_ms);
  w.U8(r.withdraw ? 1 : 0);
  EndFrame(start, out);
}

Result<Request> DecodeRequest(const FrameHeader& h, std::span<const std::byte> payload,
                              uint32_t max_keys) {
  const std::string context = std::string(OpcodeName(h.opcode)) + " request";
  if (payload.size() != h.payload_bytes) {
    return InvalidArgumentError(context + ": truncated payload: " + Num(payload.size()) +
                                " bytes, header says " + Num(h.payload_bytes));
  }
  if (h.flags != 0 || h.status != 0) {
    return InvalidArgumentError(context + ": flags " + Num(h.flags) + " and status " +
                                Num(h.status) + " must be 0 in a request");
  }
  const uint32_t key_cap = std::min(max_keys, kMaxKeys);
  ByteReader r(payload);
  Request req;
  Status s;
  switch (h.opcode) {
    case Opcode::kHello:
      s = DecodeHelloBody(r, &req.emplace<HelloRequest>());
      break;
    case Opcode::kLookup:
    case Opcode::kGet:
    case Opcode::kRemove:
      s = ReadKeys(r, key_cap, &req.emplace<KeysRequest>().keys);
      break;
    case Opcode::kAllocate:
      s = DecodeAllocateBody(r, key_cap, &req.emplace<AllocateRequest>());
      break;
    case Opcode::kCommit:
    case Opcode::kAbort:
    case Opcode::kRelease:
      s = r.U64("id", &req.emplace<HandleRequest>().id);
      break;
    case Opcode::kAcquire:
      s = DecodeAcquireBody(r, key_cap, &req.emplace<AcquireRequest>());
      break;
    case Opcode::kPut:
      s = DecodePutBody(r, key_cap, &req.emplace<PutRequest>());
      break;
    case Opcode::kStats:
      req.emplace<StatsRequest>();
      break;
    case Opcode::kSetRetention:
      s = DecodeRetentionBody(r, key_cap, &req.emplace<RetentionRequest>());
      break;
    case Opcode::kHint:
      s = DecodeHintBody(r, key_cap, &req.emplace<HintRequest>());
      break;
    default:
      s = InvalidArgumentError("unknown opcode " + Num(static_cast<uint16_t>(h.opcode)));
      break;
  }
  if (s.ok()) s = r.ExpectEnd();
  if (!s.ok()) return s.WithContext(context);
  return req;
}

// ---- replies -----------------------------------------------------------

void EncodeHelloReply(uint64_t request_id, const HelloReply& r, bool fds,
                      std::vector<std::byte>* out) {
  const uint16_t flags = fds ? static_cast<uint16_t>(kFlagReply | kFlagFds) : kFlagReply;
  const size_t start = BeginFrame(Opcode::kHello, request_id, r.version, 0, flags, out);
  ByteWriter w(out);
  w.U16(r.version);
  w.U64(r.session_id);
  w.U32(r.namespace_id);
  w.U64(r.block_bytes);
  w.U64(r.slot_bytes);
  w.U64(r.host_arena_bytes);
  w.U8(static_cast<uint8_t>(r.device));
  w.U64(r.device_arena_bytes);
  w.U32(r.max_keys);
  w.U32(r.max_payload_bytes);
  w.Bytes(r.namespace_secret);
  w.U32(static_cast<uint32_t>(r.device_ordinal));
  w.Bytes(r.device_ipc_handle);
  EndFrame(start, out);
}

void EncodeLookupReply(uint64_t request_id, const LookupReply& r, std::vector<std::byte>* out) {
  const size_t start = BeginReply(Opcode::kLookup, request_id, out);
  ByteWriter w(out);
  w.U32(static_cast<uint32_t>(r.tiers.size()));
  for (WireTier t : r.tiers) w.U8(static_cast<uint8_t>(t));
  EndFrame(start, out);
}

void EncodeAllocateReply(uint64_t request_id, const AllocateReply& r, std::vector<std::byte>* out) {
  assert(r.states.size() == r.offsets.size());
  const size_t start = BeginReply(Opcode::kAllocate, request_id, out);
  ByteWriter w(out);
  w.U64(r.allocation_id);
  w.U8(static_cast<uint8_t>(r.tier));
  w.U32(static_cast<uint32_t>(r.states.size()));
  WriteStates(w, r.states);
  for (uint64_t off : r.offsets) w.U64(off);
  EndFrame(start, out);
}

void EncodeAcquireReply(uint64_t request_id, const AcquireReply& r, std::vector<std::byte>* out) {
  const size_t start = BeginReply(Opcode::kAcquire, request_id, out);
  ByteWriter w(out);
  w.U64(r.lease_id);
  w.U8(static_cast<uint8_t>(r.tier));
  w.U32(static_cast<uint32_t>(r.offsets.size()));
  for (uint64_t off : r.offsets) w.U64(off);
  EndFrame(start, out);
}

void EncodePutReply(uint64_t request_id, const PutReply& r, std::vector<std::byte>* out) {
  const size_t start = BeginReply(Opcode::kPut, request_id, out);
  ByteWriter w(out);
  w.U32(static_cast<uint32_t>(r.states.size()));
  WriteStates(w, r.states);
  EndFrame(start, out);
}

std::span<std::byte> EncodeGetReplyPrefix(uint64_t request_id, uint32_t hits, uint64_t block_bytes,
                                          std::vector<std::byte>* out) {
  // REQUIRES: the reply fits the payload cap.
  assert(block_bytes == 0 || hits <= (kMaxPayloadBytes - 4) / block_bytes);
  const size_t start = BeginReply(Opcode::kGet, request_id, out);
  ByteWriter(out).U32(hits);
  const size_t data_at = out->size();
  const size_t data_bytes = static_cast<size_t>(uint64_t{hits} * block_bytes);
  out->resize(data_at + data_bytes);
  EndFrame(start, out);
  return std::span<std::byte>(*out).subspan(data_at, data_bytes);
}

void EncodeCountReply(Opcode op, uint64_t request_id, const CountReply& r,
                      std::vector<std::byte>* out) {
  assert(op == Opcode::kRemove || op == Opcode::kCommit || op == Opcode::kAbort ||
         op == Opcode::kSetRetention || op == Opcode::kRelease);
  const size_t start = BeginReply(op, request_id, out);
  ByteWriter(out).U64(r.count);
  EndFrame(start, out);
}

void EncodeStatsReply(uint64_t request_id, const StatsReply& r, std::vector<std::byte>* out) {
  const size_t start = BeginReply(Opcode::kStats, request_id, out);
  ByteWriter w(out);
  w.U32(static_cast<uint32_t>(r.entries.size()));
  for (const auto& [name, value] : r.entries) {
    WriteString(w, name);
    WriteString(w, value);
  }
  EndFrame(start, out);
}

void EncodeHintReply(uint64_t request_id, const HintReply& r, std::vector<std::byte>* out) {
  const size_t start = BeginReply(Opcode::kHint, request_id, out);
  ByteWriter w(out);
  w.U64(r.blocks);
  w.U64(r.prefetching);
  EndFrame(start, out);
}

void EncodeError(Opcode op, uint64_t request_id, const Status& status,
                 std::vector<std::byte>* out) {
  // REQUIRES: !status.ok(). An OK status still yields an error frame.
  assert(!status.ok());
  const uint16_t code = status.ok() ? static_cast<uint16_t>(StatusCode::kInternal)
                                    : static_cast<uint16_t>(status.code());
  std::string_view msg = status.ok() ? "error reply of an OK status" : status.message();
  if (msg.size() > kMaxErrorBytes) {
    size_t n = kMaxErrorBytes;
    // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is cut.
    while (n > 0 && (static_cast<unsigned char>(msg[n]) & 0xc0) == 0x80) --n;
    msg = msg.substr(0, n);
  }
  const size_t start = BeginFrame(op, request_id, kMaxVersion, code, kFlagReply, out);
  ByteWriter(out).Bytes(std::as_bytes(std::span(msg.data(), msg.size())));
  EndFrame(start, out);
}

Result<HelloReply> DecodeHelloReply(std::span<const std::byte> payload) {
  return DecodeReply<HelloReply>("HELLO", payload, [](ByteReader& r, HelloReply* m) -> Status {
    KVTIER_RETURN_IF_ERROR(r.U16("version", &m->version));
    if (m->version < kMinVersion || m->version > kMaxVersion) {
      return InvalidArgumentError("negotiated version " + Num(m->version) + " outside " +
                                  Num(kMinVersion) + " to " + Num(kMaxVersion));
    }
    KVTIER_RETURN_IF_ERROR(r.U64("session_id", &m->session_id));
    KVTIER_RETURN_IF_ERROR(r.U32("namespace_id", &m->namespace_id));
    KVTIER_RETURN_IF_ERROR(r.U64("block_bytes", &m->block_bytes));
    KVTIER_RETURN_IF_ERROR(r.U64("slot_bytes", &m->slot_bytes));
    KVTIER_RETURN_IF_ERROR(r.U64("host_arena_bytes", &m->host_arena_bytes));
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "device kind", kMaxDeviceKind, &m->device));
    KVTIER_RETURN_IF_ERROR(r.U64("device_arena_bytes", &m->device_arena_bytes));
    KVTIER_RETURN_IF_ERROR(r.U32("max_keys", &m->max_keys));
    KVTIER_RETURN_IF_ERROR(r.U32("max_payload_bytes", &m->max_payload_bytes));
    if (m->max_keys == 0 || m->max_keys > kMaxKeys || m->max_payload_bytes == 0 ||
        m->max_payload_bytes > kMaxPayloadBytes) {
      return InvalidArgumentError("caps max_keys=" + Num(m->max_keys) + " max_payload_bytes=" +
                                  Num(m->max_payload_bytes) + " not within 1 and the hard caps");
    }
    std::span<const std::byte> secret;
    KVTIER_RETURN_IF_ERROR(r.Bytes("namespace_secret", kNamespaceSecretBytes, &secret));
    std::copy(secret.begin(), secret.end(), m->namespace_secret.begin());
    uint32_t ordinal = 0;
    KVTIER_RETURN_IF_ERROR(r.U32("device_ordinal", &ordinal));
    m->device_ordinal = static_cast<int32_t>(ordinal);
    if ((m->device == DeviceKind::kCuda) != (m->device_ordinal >= 0)) {
      return InvalidArgumentError("device_ordinal " + std::to_string(m->device_ordinal) +
                                  " does not match the device kind");
    }
    std::span<const std::byte> handle;
    KVTIER_RETURN_IF_ERROR(r.Bytes("device_ipc_handle", kCudaIpcHandleBytes, &handle));
    std::copy(handle.begin(), handle.end(), m->device_ipc_handle.begin());
    return Status::Ok();
  });
}

Result<LookupReply> DecodeLookupReply(std::span<const std::byte> payload) {
  return DecodeReply<LookupReply>("LOOKUP", payload, [](ByteReader& r, LookupReply* m) {
    uint32_t hits = 0;
    KVTIER_RETURN_IF_ERROR(ReadCount(r, "hits", kMaxKeys, 1, &hits));
    m->tiers.resize(hits);
    for (WireTier& t : m->tiers) KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTier, &t));
    return Status::Ok();
  });
}

Result<AllocateReply> DecodeAllocateReply(std::span<const std::byte> payload) {
  return DecodeReply<AllocateReply>("ALLOCATE", payload, [](ByteReader& r, AllocateReply* m) {
    KVTIER_RETURN_IF_ERROR(r.U64("allocation_id", &m->allocation_id));
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTier, &m->tier));
    uint32_t count = 0;
    KVTIER_RETURN_IF_ERROR(ReadCount(r, "keys", kMaxKeys, 1 + 8, &count));
    KVTIER_RETURN_IF_ERROR(ReadStates(r, count, &m->states));
    m->offsets.resize(count);
    for (size_t i = 0; i < count; ++i) {
      KVTIER_RETURN_IF_ERROR(r.U64("offset", &m->offsets[i]));
      if (m->offsets[i] != 0 && m->states[i] != WireWriteState::kAllocated) {
        return InvalidArgumentError("key " + Num(i) + " is not allocated but has offset " +
                                    Num(m->offsets[i]));
      }
    }
    return Status::Ok();
  });
}

Result<AcquireReply> DecodeAcquireReply(std::span<const std::byte> payload) {
  return DecodeReply<AcquireReply>("ACQUIRE", payload, [](ByteReader& r, AcquireReply* m) {
    KVTIER_RETURN_IF_ERROR(r.U64("lease_id", &m->lease_id));
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTier, &m->tier));
    uint32_t count = 0;
    KVTIER_RETURN_IF_ERROR(ReadCount(r, "offsets", kMaxKeys, 8, &count));
    m->offsets.resize(count);
    for (uint64_t& off : m->offsets) KVTIER_RETURN_IF_ERROR(r.U64("offset", &off));
    return Status::Ok();
  });
}

Result<PutReply> DecodePutReply(std::span<const std::byte> payload) {
  return DecodeReply<PutReply>("PUT", payload, [](ByteReader& r, PutReply* m) {
    uint32_t count = 0;
    KVTIER_RETURN_IF_ERROR(ReadCount(r, "keys", kMaxKeys, 1, &count));
    return ReadStates(r, count, &m->states);
  });
}

Status DecodeGetReplyInto(std::span<const std::byte> payload, uint64_t block_bytes, GetReply* out) {
  ByteReader r(payload);
  Status s = r.U32("hits", &out->hits);
  if (s.ok()) {
    const uint64_t size = r.remaining();
    const bool whole = out->hits == 0 ? size == 0
                                      : block_bytes != 0 && block_bytes <= size / out->hits &&
                                            out->hits * block_bytes == size;
    if (whole) {
      auto data = r.Rest();
      out->data.assign(data.begin(), data.end());
    } else {
      s = InvalidArgumentError("data of " + Num(size) + " bytes is not " + Num(out->hits) +
                               " blocks of " + Num(block_bytes) + " bytes");
    }
  }
  if (!s.ok()) return s.WithContext("GET reply");
  return Status::Ok();
}

Result<GetReply> DecodeGetReply(std::span<const std::byte> payload, uint64_t block_bytes) {
  GetReply m;
  KVTIER_RETURN_IF_ERROR(DecodeGetReplyInto(payload, block_bytes, &m));
  return m;
}

Result<CountReply> DecodeCountReply(std::span<const std::byte> payload) {
  return DecodeReply<CountReply>(
      "count", payload, [](ByteReader& r, CountReply* m) { return r.U64("count", &m->count); });
}

Result<HintReply> DecodeHintReply(std::span<const std::byte> payload) {
  return DecodeReply<HintReply>("HINT", payload, [](ByteReader& r, HintReply* m) {
    KVTIER_RETURN_IF_ERROR(r.U64("blocks", &m->blocks));
    return r.U64("prefetching", &m->prefetching);
  });
}

Result<StatsReply> DecodeStatsReply(std::span<const std::byte> payload) {
  return DecodeReply<StatsReply>("STATS", payload, [](ByteReader& r, StatsReply* m) {
    uint32_t count = 0;
    // An entry is at least its two u16 lengths.
    KVTIER_RETURN_IF_ERROR(
        ReadCount(r, "entries", std::numeric_limits<uint32_t>::max(), 4, &count));
    m->entries.resize(count);
    for (auto& [name, value] : m->entries) {
      KVTIER_RETURN_IF_ERROR(ReadString(r, "name", &name));
      KVTIER_RETURN_IF_ERROR(ReadString(r, "value", &value));
    }
    return Status::Ok();
  });
}

Status DecodeError(const FrameHeader& h, std::span<const std::byte> payload) {
  const auto bytes = payload.first(std::min(payload.size(), kMaxErrorBytes));
  const std::string msg(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (h.status == 0) {
    return InternalError(std::string(OpcodeName(h.opcode)) +
                         " reply decoded as an error but has status 0");
  }
  if (h.status > kMaxStatusCode) {
    return InternalError("unknown status code " + Num(h.status) + ": " + msg);
  }
  return Status(static_cast<StatusCode>(h.status), msg);
}

}  // namespace kvtier::protocol

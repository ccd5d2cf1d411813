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
#include "protocol/internal/wire_codec.h"

namespace kvtier::protocol {
using namespace internal;  // NOLINT: the codec helpers (wire_codec.h)

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
    case Opcode::kTouch:
      return "TOUCH";
  }
  return "UNKNOWN";
}

bool IsKnownOpcode(uint16_t op) {
  return op >= static_cast<uint16_t>(Opcode::kHello) && op <= static_cast<uint16_t>(Opcode::kTouch);
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
  // Optional trailing fields (protocol/wire.h): quantize_lower is written
  // when it is not off or when layout_kind follows it; layout_kind only for
  // a layout other than K/V.
  const bool latent = r.layout.kind != KvKind::kKeyValue;
  if (latent || r.quantize_lower != Quantize::kOff) w.U8(static_cast<uint8_t>(r.quantize_lower));
  if (latent) w.U8(static_cast<uint8_t>(r.layout.kind));
  EndFrame(start, out);
}

void EncodeKeys(Opcode op, uint64_t request_id, std::span<const BlockKey> keys,
                std::vector<std::byte>* out) {
  assert(op == Opcode::kLookup || op == Opcode::kGet || op == Opcode::kRemove ||
         op == Opcode::kTouch);
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
  Request req;
  KVTIER_RETURN_IF_ERROR(DecodeRequest(h, payload, max_keys, &req));
  return req;
}

Status DecodeRequest(const FrameHeader& h, std::span<const std::byte> payload, uint32_t max_keys,
                     Request* into) {
  // (Built only for an error: most requests never need it.)
  const auto context = [&] { return std::string(OpcodeName(h.opcode)) + " request"; };
  if (payload.size() != h.payload_bytes) {
    return InvalidArgumentError(context() + ": truncated payload: " + Num(payload.size()) +
                                " bytes, header says " + Num(h.payload_bytes));
  }
  if (h.flags != 0 || h.status != 0) {
    return InvalidArgumentError(context() + ": flags " + Num(h.flags) + " and status " +
                                Num(h.status) + " must be 0 in a request");
  }
  const uint32_t key_cap = std::min(max_keys, kMaxKeys);
  ByteReader r(payload);
  Request& req = *into;
  Status s;
  switch (h.opcode) {
    case Opcode::kHello:
      s = DecodeHelloBody(r, &req.emplace<HelloRequest>());
      break;
    case Opcode::kLookup:
    case Opcode::kGet:
    case Opcode::kRemove:
    case Opcode::kTouch: {
      auto* keys = std::get_if<KeysRequest>(&req);
      s = ReadKeys(r, key_cap, &(keys != nullptr ? keys : &req.emplace<KeysRequest>())->keys);
      break;
    }
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
  if (!s.ok()) return s.WithContext(context());
  return Status::Ok();
}

}  // namespace kvtier::protocol

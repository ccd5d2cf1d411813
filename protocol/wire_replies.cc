// The wire format's replies, byte-exact in docs/protocol.md (the requests
// and frame headers are in wire.cc). Decoders read through
// internal::ByteReader, which checks every length before it reads.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "protocol/internal/byte_io.h"
#include "protocol/internal/wire_codec.h"
#include "protocol/wire.h"

namespace kvtier::protocol {

using namespace internal;  // NOLINT: the codec helpers (wire_codec.h)

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
  static_assert(sizeof(WireTier) == 1, "a tier is one byte on the wire");
  w.Bytes(std::as_bytes(std::span(r.tiers)));
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
         op == Opcode::kSetRetention || op == Opcode::kRelease || op == Opcode::kTouch);
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
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTargetTier, &m->tier));
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
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTargetTier, &m->tier));
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

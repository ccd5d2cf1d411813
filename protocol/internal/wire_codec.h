// The wire codec's shared pieces: frame building, field writers and
// checked field readers, used by the request codec (wire.cc) and the reply
// codec (wire_replies.cc). Internal to protocol/.
#pragma once

#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/internal/byte_io.h"
#include "protocol/wire.h"

namespace kvtier::protocol::internal {

// Error messages longer than this are cut (at a UTF-8 character boundary).
inline constexpr size_t kMaxErrorBytes = 4096;
// Byte offsets of header fields.
inline constexpr size_t kPayloadBytesOffset = 16;
inline constexpr size_t kKeyBytes = 16;
inline constexpr uint8_t kMaxDType = static_cast<uint8_t>(DType::kFp8E5M2);
// Tiers a request may name, and those a LOOKUP reply may (kRemote too).
inline constexpr uint8_t kMaxTargetTier = static_cast<uint8_t>(WireTier::kSsd);
inline constexpr uint8_t kMaxTier = static_cast<uint8_t>(WireTier::kRemote);
inline constexpr uint8_t kMaxDeviceKind = static_cast<uint8_t>(DeviceKind::kCuda);
inline constexpr uint8_t kMaxWriteState = static_cast<uint8_t>(WireWriteState::kSkipped);
inline constexpr uint16_t kMaxStatusCode = static_cast<uint16_t>(StatusCode::kPermissionDenied);

inline std::string Hex(uint64_t v) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, 16);
  (void)ec;  // 16 hex digits always fit.
  return "0x" + std::string(buf, end);
}

inline std::string Num(uint64_t v) { return std::to_string(v); }

// ---- encoding ----------------------------------------------------------

// Appends a header with payload_bytes 0; EndFrame() fills it in.
inline size_t BeginFrame(Opcode op, uint64_t request_id, uint16_t version, uint16_t status,
                         uint16_t flags, std::vector<std::byte>* out) {
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

inline size_t BeginRequest(Opcode op, uint64_t request_id, std::vector<std::byte>* out) {
  return BeginFrame(op, request_id, kMaxVersion, 0, 0, out);
}

inline size_t BeginReply(Opcode op, uint64_t request_id, std::vector<std::byte>* out) {
  return BeginFrame(op, request_id, kMaxVersion, 0, kFlagReply, out);
}

inline void EndFrame(size_t start, std::vector<std::byte>* out) {
  const size_t payload = out->size() - start - kHeaderBytes;
  // REQUIRES of every encoder: the frame fits the hard cap.
  assert(payload <= kMaxPayloadBytes);
  internal::StoreLe(payload, 4, out->data() + start + kPayloadBytesOffset);
}

inline void WriteKey(ByteWriter& w, const BlockKey& k) {
  w.U64(k.lo);
  w.U64(k.hi);
}

inline void WriteOptionalKey(ByteWriter& w, const std::optional<BlockKey>& k) {
  w.U8(k.has_value() ? 1 : 0);
  if (k) WriteKey(w, *k);
}

inline void WriteKeys(ByteWriter& w, std::span<const BlockKey> keys) {
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const BlockKey& k : keys) WriteKey(w, k);
}

// A string longer than kMaxStringBytes is written as is (up to the u16
// limit), so the receiver refuses it with a clear error instead of acting on
// a silently truncated name.
inline void WriteString(ByteWriter& w, std::string_view s) {
  const size_t n = std::min<size_t>(s.size(), std::numeric_limits<uint16_t>::max());
  w.U16(static_cast<uint16_t>(n));
  w.Bytes(std::as_bytes(std::span(s.data(), n)));
}

inline void WriteLayout(ByteWriter& w, const Layout& l) {
  w.U32(l.layers);
  w.U32(l.kv_heads);
  w.U32(l.head_dim);
  w.U8(static_cast<uint8_t>(l.dtype));
  w.U32(l.block_tokens);
}

inline void WriteStates(ByteWriter& w, const std::vector<WireWriteState>& states) {
  for (WireWriteState s : states) w.U8(static_cast<uint8_t>(s));
}

// ---- decoding ----------------------------------------------------------

inline Status ReadKey(ByteReader& r, std::string_view field, BlockKey* k) {
  KVTIER_RETURN_IF_ERROR(r.Need(field, kKeyBytes));
  KVTIER_RETURN_IF_ERROR(r.U64(field, &k->lo));
  return r.U64(field, &k->hi);
}

inline Status ReadOptionalKey(ByteReader& r, std::string_view field, std::optional<BlockKey>* k) {
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
// ReadCount's errors, out of line (the checks inline into the hot path).
[[gnu::cold, gnu::noinline]] inline Status CountError(const ByteReader& r, std::string_view what,
                                                      uint32_t count, uint32_t max, uint64_t need) {
  if (count > max) {
    return InvalidArgumentError("too many " + std::string(what) + " (" + Num(count) + " > " +
                                Num(max) + ")");
  }
  return InvalidArgumentError("truncated: " + Num(count) + " " + std::string(what) + " need " +
                              Num(need) + " bytes at offset " + Num(r.offset()) + ", " +
                              Num(r.remaining()) + " left");
}

inline Status ReadCount(ByteReader& r, std::string_view what, uint32_t max, size_t item_bytes,
                        uint32_t* count) {
  KVTIER_RETURN_IF_ERROR(r.U32(what, count));
  // 64-bit math: count < 2^32 and item_bytes <= 16 cannot overflow.
  const uint64_t need = uint64_t{*count} * item_bytes;
  if (*count > max || need > r.remaining()) [[unlikely]] {
    return CountError(r, what, *count, max, need);
  }
  return Status::Ok();
}

inline Status ReadKeys(ByteReader& r, uint32_t max_keys, std::vector<BlockKey>* keys) {
  uint32_t count = 0;
  KVTIER_RETURN_IF_ERROR(ReadCount(r, "keys", max_keys, kKeyBytes, &count));
  std::span<const std::byte> bytes;
  KVTIER_RETURN_IF_ERROR(r.Bytes("keys", size_t{count} * kKeyBytes, &bytes));
  // One bounds check for the whole array, then fixed-size loads: this loop
  // is the hot path of every LOOKUP, ACQUIRE and ALLOCATE.
  keys->resize(count);
  static_assert(std::endian::native == std::endian::little,
                "keys are copied as host integers; a big-endian port must swap");
  // (Through local pointers: stores through the vector's own would make the
  // compiler reload its data pointer after each, as bytes may alias it.)
  const std::byte* from = bytes.data();
  BlockKey* to = keys->data();
  for (size_t i = 0; i < count; ++i, from += kKeyBytes) {
    uint64_t lo, hi;
    std::memcpy(&lo, from, 8);
    std::memcpy(&hi, from + 8, 8);
    to[i].lo = lo;
    to[i].hi = hi;
  }
  return Status::Ok();
}

inline Status ReadString(ByteReader& r, std::string_view field, std::string* s) {
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

// The 17 bytes of a Layout, kind kKeyValue. Not validated: HELLO's optional
// layout_kind, after client_name, may still make it a latent layout.
inline Status ReadLayout(ByteReader& r, Layout* l) {
  uint8_t dtype = 0;
  KVTIER_RETURN_IF_ERROR(r.U32("layout.layers", &l->layers));
  KVTIER_RETURN_IF_ERROR(r.U32("layout.kv_heads", &l->kv_heads));
  KVTIER_RETURN_IF_ERROR(r.U32("layout.head_dim", &l->head_dim));
  KVTIER_RETURN_IF_ERROR(r.U8("layout.dtype", &dtype));
  KVTIER_RETURN_IF_ERROR(r.U32("layout.block_tokens", &l->block_tokens));
  if (dtype > kMaxDType) return InvalidArgumentError("unknown dtype " + Num(dtype));
  l->dtype = static_cast<DType>(dtype);
  l->kind = KvKind::kKeyValue;
  return Status::Ok();
}

// A u8 enum whose values are 0..max.
template <typename E>
inline Status ReadEnum(ByteReader& r, std::string_view field, uint8_t max, E* e) {
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
inline Status ReadStates(ByteReader& r, uint32_t count, std::vector<WireWriteState>* states) {
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

inline Status DecodeHelloBody(ByteReader& r, HelloRequest* m) {
  KVTIER_RETURN_IF_ERROR(r.U16("min_version", &m->min_version));
  KVTIER_RETURN_IF_ERROR(r.U16("max_version", &m->max_version));
  if (m->min_version == 0 || m->min_version > m->max_version) {
    return InvalidArgumentError("bad client version range [" + Num(m->min_version) + ", " +
                                Num(m->max_version) + "]: versions start at 1 and min <= max");
  }
  KVTIER_RETURN_IF_ERROR(ReadString(r, "model", &m->model));
  KVTIER_RETURN_IF_ERROR(ReadString(r, "salt", &m->salt));
  KVTIER_RETURN_IF_ERROR(ReadLayout(r, &m->layout));
  KVTIER_RETURN_IF_ERROR(ReadString(r, "client_name", &m->client_name));
  m->quantize_lower = Quantize::kOff;
  // Optional: u8 quantize_lower, then u8 layout_kind. Each is left out when
  // it is the default (off, kv) and nothing follows it, so that there is one
  // encoding of each HELLO and a daemon from before them takes every HELLO
  // that does not need them.
  if (r.remaining() > 0) {
    KVTIER_RETURN_IF_ERROR(ReadEnum(r, "quantize_lower", static_cast<uint8_t>(Quantize::kFp8E5M2),
                                    &m->quantize_lower));
    if (r.remaining() == 0 && m->quantize_lower == Quantize::kOff) {
      return InvalidArgumentError(
          "quantize_lower 0 (off) is sent by leaving the field out (it is written only before a "
          "layout_kind)");
    }
  }
  if (r.remaining() > 0) {
    uint8_t kind = 0;
    KVTIER_RETURN_IF_ERROR(r.U8("layout_kind", &kind));
    if (kind == static_cast<uint8_t>(KvKind::kKeyValue)) {
      return InvalidArgumentError("layout_kind 0 (kv) is sent by leaving the field out");
    }
    if (kind > kMaxKvKind) {
      return InvalidArgumentError("unknown layout_kind " + Num(kind) + " (0 kv, 1 latent)");
    }
    m->layout.kind = static_cast<KvKind>(kind);
  }
  KVTIER_RETURN_IF_ERROR(m->layout.Validate().WithContext("bad layout"));
  return CheckQuantize(m->layout, m->quantize_lower);
}

inline Status DecodeAllocateBody(ByteReader& r, uint32_t max_keys, AllocateRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTargetTier, &m->tier));
  KVTIER_RETURN_IF_ERROR(ReadOptionalKey(r, "parent", &m->parent));
  return ReadKeys(r, max_keys, &m->keys);
}

inline Status DecodeRetentionBody(ByteReader& r, uint32_t max_keys, RetentionRequest* m) {
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

inline Status DecodeHintBody(ByteReader& r, uint32_t max_keys, HintRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadKeys(r, max_keys, &m->keys));
  KVTIER_RETURN_IF_ERROR(r.U32("ttl_ms", &m->ttl_ms));
  uint8_t withdraw = 0;
  KVTIER_RETURN_IF_ERROR(r.U8("withdraw", &withdraw));
  if (withdraw > 1) return InvalidArgumentError("withdraw is " + Num(withdraw) + ", not 0 or 1");
  m->withdraw = withdraw == 1;
  return Status::Ok();
}

inline Status DecodeAcquireBody(ByteReader& r, uint32_t max_keys, AcquireRequest* m) {
  KVTIER_RETURN_IF_ERROR(ReadEnum(r, "tier", kMaxTargetTier, &m->tier));
  return ReadKeys(r, max_keys, &m->keys);
}

inline Status DecodePutBody(ByteReader& r, uint32_t max_keys, PutRequest* m) {
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
inline Result<T> DecodeReply(std::string_view what, std::span<const std::byte> payload, F body) {
  ByteReader r(payload);
  T m;
  Status s = body(r, &m);
  if (s.ok()) s = r.ExpectEnd();
  if (!s.ok()) return s.WithContext(std::string(what) + " reply");
  return m;
}

}  // namespace kvtier::protocol::internal

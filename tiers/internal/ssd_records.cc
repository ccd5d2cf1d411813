#include "tiers/internal/ssd_records.h"

#include <span>

#include "tiers/block_seal.h"

namespace kvtier::tiers::internal {
namespace {

// Version 2 adds the block's stored form (Quantize) after version 1's
// fields; a version 1 record is a block kept as written. Version 3 adds the
// block's seal (a 1, then EncodeSeal's bytes) and is written for sealed
// blocks alone, so that a store without keys still opens in a kvtierd from
// before seals.
constexpr uint8_t kRecordVersion = 2;
constexpr uint8_t kSealedRecordVersion = 3;
// Namespace version 2 adds the layout's kind (KvKind) after version 1's
// fields. A K/V namespace is still written as version 1, so that a store
// holding none but K/V namespaces still opens in a kvtierd from before kinds;
// a version 1 record is a K/V namespace.
constexpr uint8_t kNamespaceVersion = 2;

// --- Encoding. Keys are big-endian so they sort by (ns, key); values are
// little-endian with a leading version byte. ---

void PutBE(std::string& s, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutLE(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads little-endian fields off the front of a byte string; `ok` turns
// false (and stays) on reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  uint64_t LE(size_t bytes) {
    if (!ok_ || s_.size() < bytes) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s_[i])} << (8 * i);
    s_.remove_prefix(bytes);
    return v;
  }
  std::string_view Bytes(size_t n) {
    if (!ok_ || s_.size() < n) {
      ok_ = false;
      return {};
    }
    std::string_view out = s_.substr(0, n);
    s_.remove_prefix(n);
    return out;
  }
  bool done() const { return ok_ && s_.empty(); }

 private:
  std::string_view s_;
  bool ok_ = true;
};

}  // namespace

std::string RecordKey(NamespaceId ns, const BlockKey& key) {
  std::string k;
  k.reserve(21);
  k.push_back(kRecordPrefix);
  PutBE(k, ns, 4);
  PutBE(k, key.hi, 8);
  PutBE(k, key.lo, 8);
  return k;
}

std::string NamespaceKey(uint32_t id) {
  std::string k(1, kNamespacePrefix);
  PutBE(k, id, 4);
  return k;
}

std::string EncodeRecord(const SsdRecord& r) {
  std::string v;
  v.reserve(88 + 1 + kSealBytes);
  PutLE(v, r.seal ? kSealedRecordVersion : kRecordVersion, 1);
  PutLE(v, r.ns_id, 4);
  PutLE(v, r.key.hi, 8);
  PutLE(v, r.key.lo, 8);
  PutLE(v, r.has_parent ? 1 : 0, 1);
  PutLE(v, r.parent.hi, 8);
  PutLE(v, r.parent.lo, 8);
  PutLE(v, r.slot.slot_bytes, 8);
  PutLE(v, r.slot.page, 8);
  PutLE(v, r.block_bytes, 8);
  PutLE(v, r.checksum, 8);
  PutLE(v, r.priority, 1);
  PutLE(v, static_cast<uint64_t>(r.created_ns), 8);
  PutLE(v, static_cast<uint64_t>(r.last_access_ns), 8);
  PutLE(v, static_cast<uint8_t>(r.quantize), 1);
  if (r.seal) {
    PutLE(v, 1, 1);
    const auto seal = EncodeSeal(*r.seal);
    v.append(reinterpret_cast<const char*>(seal.data()), seal.size());
  }
  return v;
}

bool ValidSlotBytes(uint64_t slot_bytes) {
  return slot_bytes > 0 && slot_bytes % kBlockFileAlignment == 0 && slot_bytes <= kMaxSlotBytes;
}

bool DecodeRecord(std::string_view key, std::string_view value, SsdRecord* r) {
  Reader in(value);
  const uint64_t version = in.LE(1);
  if (version != 1 && version != kRecordVersion && version != kSealedRecordVersion) return false;
  r->ns_id = static_cast<NamespaceId>(in.LE(4));
  r->key.hi = in.LE(8);
  r->key.lo = in.LE(8);
  const uint64_t has_parent = in.LE(1);
  r->has_parent = has_parent == 1;
  r->parent.hi = in.LE(8);
  r->parent.lo = in.LE(8);
  r->slot.slot_bytes = in.LE(8);
  r->slot.page = in.LE(8);
  r->block_bytes = in.LE(8);
  r->checksum = in.LE(8);
  r->priority = static_cast<uint8_t>(in.LE(1));
  r->created_ns = static_cast<int64_t>(in.LE(8));
  r->last_access_ns = static_cast<int64_t>(in.LE(8));
  const uint64_t quantize = version == 1 ? 0 : in.LE(1);
  r->quantize = static_cast<Quantize>(quantize);
  r->seal.reset();
  if (version == kSealedRecordVersion) {
    if (in.LE(1) != 1) return false;
    const std::string_view bytes = in.Bytes(kSealBytes);
    Result<Seal> seal =
        DecodeSeal(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
    if (!seal) return false;
    r->seal = *seal;
  }
  return in.done() && has_parent <= 1 && quantize <= static_cast<uint8_t>(Quantize::kFp8E5M2) &&
         ValidSlotBytes(r->slot.slot_bytes) && r->block_bytes > 0 &&
         r->block_bytes <= r->slot.slot_bytes && key == RecordKey(r->ns_id, r->key);
}

std::string EncodeNamespace(const SsdNamespace& ns) {
  std::string v;
  const bool kv = ns.layout.kind == KvKind::kKeyValue;
  PutLE(v, kv ? 1 : kNamespaceVersion, 1);
  PutLE(v, ns.layout.layers, 4);
  PutLE(v, ns.layout.kv_heads, 4);
  PutLE(v, ns.layout.head_dim, 4);
  PutLE(v, static_cast<uint8_t>(ns.layout.dtype), 1);
  PutLE(v, ns.layout.block_tokens, 4);
  PutLE(v, ns.model.size(), 4);
  v += ns.model;
  PutLE(v, ns.salt.size(), 4);
  v += ns.salt;
  if (!kv) PutLE(v, static_cast<uint8_t>(ns.layout.kind), 1);
  return v;
}

bool DecodeNamespace(std::string_view value, SsdNamespace* ns) {
  Reader in(value);
  const uint64_t version = in.LE(1);
  if (version != 1 && version != kNamespaceVersion) return false;
  ns->layout.layers = static_cast<uint32_t>(in.LE(4));
  ns->layout.kv_heads = static_cast<uint32_t>(in.LE(4));
  ns->layout.head_dim = static_cast<uint32_t>(in.LE(4));
  ns->layout.dtype = static_cast<DType>(in.LE(1));
  ns->layout.block_tokens = static_cast<uint32_t>(in.LE(4));
  ns->model = std::string(in.Bytes(static_cast<size_t>(in.LE(4))));
  ns->salt = std::string(in.Bytes(static_cast<size_t>(in.LE(4))));
  const uint64_t kind = version == 1 ? 0 : in.LE(1);
  ns->layout.kind = static_cast<KvKind>(kind);
  // Version 2 is written for latent namespaces alone: one encoding each.
  return in.done() && (version == 1 || kind != 0) && kind <= kMaxKvKind &&
         ns->layout.Validate().ok();
}

}  // namespace kvtier::tiers::internal

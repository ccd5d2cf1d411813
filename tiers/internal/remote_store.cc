#include "tiers/internal/remote_store.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>

#include "common/hash.h"
#include "tiers/internal/checksum.h"

namespace kvtier::tiers::internal {
namespace {

constexpr uint32_t kMagic = 0x5254564b;  // "KVTR", little-endian

void Put64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
void Put32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
uint64_t Get64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t Get32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Header fields: magic u32 @0, version u16 @4, header bytes u16 @6, namespace
// id u64 @8, key hi/lo u64 @16/@24, layers/kv_heads/head_dim/block_tokens u32
// @32..@44, dtype u8 @48, layout kind u8 @49 (KvKind; 0, K/V, in the
// headers of kvtierds from before kinds) then 6 zero bytes, payload bytes
// u64 @56, XXH3-64 of the payload u64 @64. A reader compares @32..@55 with
// its namespace's, so a block of another kind reads as "another layout".
//
// A sealed value (version 2) has the same fields to @56, the write time u64
// @64 and the seal @72..@111 (kSealedRemoteHeaderBytes).
void EncodeHeader(const RemoteNamespace& ns, const BlockKey& key, uint64_t payload_bytes,
                  uint64_t checksum, std::byte* h, bool sealed = false) {
  const uint16_t version = sealed ? kSealedRemoteFormatVersion : kRemoteFormatVersion;
  const size_t header_bytes = sealed ? kSealedRemoteHeaderBytes : kRemoteHeaderBytes;
  std::memset(h, 0, header_bytes);
  Put32(h, kMagic);
  h[4] = static_cast<std::byte>(version & 0xff);
  h[5] = static_cast<std::byte>(version >> 8);
  h[6] = static_cast<std::byte>(header_bytes & 0xff);
  h[7] = static_cast<std::byte>(header_bytes >> 8);
  Put64(h + 8, ns.id);
  Put64(h + 16, key.hi);
  Put64(h + 24, key.lo);
  Put32(h + 32, ns.layout.layers);
  Put32(h + 36, ns.layout.kv_heads);
  Put32(h + 40, ns.layout.head_dim);
  Put32(h + 44, ns.layout.block_tokens);
  h[48] = static_cast<std::byte>(ns.layout.dtype);
  h[49] = static_cast<std::byte>(ns.layout.kind);
  Put64(h + 56, payload_bytes);
  Put64(h + 64, checksum);
}

uint16_t VersionOf(const char* h) {
  return static_cast<uint16_t>(static_cast<uint8_t>(h[4]) | (static_cast<uint8_t>(h[5]) << 8));
}

// Every field to @56 must be this block's: Corruption naming the first
// that differs (the magic and the version are checked before).
Status CheckHeaderFields(const char* h, const RemoteNamespace& ns, const BlockKey& key,
                         uint64_t payload_bytes, bool sealed) {
  std::byte expected[kSealedRemoteHeaderBytes];
  EncodeHeader(ns, key, payload_bytes, 0, expected, sealed);
  if (std::memcmp(h, expected, 56) == 0) return Status::Ok();
  const char* what = Get64(h + 8) != ns.id                                ? "namespace"
                     : Get64(h + 16) != key.hi || Get64(h + 24) != key.lo ? "block key"
                     : std::memcmp(h + 32, expected + 32, 24) != 0        ? "layout"
                                                                          : "header";
  return CorruptionError(std::string("remote value: another ") + what);
}

tiers::SealIdentity RemoteIdentity(const RemoteNamespace& ns, const BlockKey& key, uint64_t bytes,
                                   uint64_t written) {
  tiers::SealIdentity id;
  id.ns = ns.fingerprint;
  id.key = key;
  id.tier = tiers::kSealTierRemote;
  id.bytes = bytes;
  id.written = written;
  return id;
}

uint64_t SystemUnixSeconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

BlockKey MissingKey(uint64_t ns, const BlockKey& key) {
  return BlockKey{key.hi ^ Mix64(ns + kGoldenGamma), key.lo};
}

}  // namespace
}  // namespace kvtier::tiers::internal

namespace kvtier::tiers {

uint64_t RemoteNamespaceId(const std::string& model, const std::string& salt,
                           const Layout& layout) {
  // Length-prefixed fields, so no two (model, salt) pairs encode alike.
  std::vector<std::byte> in;
  auto add = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    in.insert(in.end(), b, b + n);
  };
  const uint64_t model_len = model.size(), salt_len = salt.size();
  add(&model_len, 8);
  add(model.data(), model.size());
  add(&salt_len, 8);
  add(salt.data(), salt.size());
  const uint32_t fields[] = {layout.layers, layout.kv_heads, layout.head_dim, layout.block_tokens,
                             static_cast<uint32_t>(layout.dtype)};
  add(fields, sizeof(fields));
  // The kind only where it is not K/V: the ids of K/V namespaces stay those
  // of kvtierds from before kinds, which share their blocks.
  if (layout.kind != KvKind::kKeyValue) {
    const uint32_t kind = static_cast<uint32_t>(layout.kind);
    add(&kind, sizeof(kind));
  }
  return internal::BlockChecksum(in);
}

}  // namespace kvtier::tiers

namespace kvtier::tiers::internal {

void EncodeRemoteHeader(const RemoteNamespace& ns, const BlockKey& key,
                        std::span<const std::byte> payload, std::span<std::byte> header) {
  EncodeHeader(ns, key, payload.size(), BlockChecksum(payload), header.data());
}

std::vector<std::byte> EncodeRemoteValue(const RemoteNamespace& ns, const BlockKey& key,
                                         std::span<const std::byte> payload) {
  std::vector<std::byte> value(kRemoteHeaderBytes + payload.size());
  std::memcpy(value.data() + kRemoteHeaderBytes, payload.data(), payload.size());
  EncodeRemoteHeader(ns, key, payload, std::span(value).first(kRemoteHeaderBytes));
  return value;
}

Status CheckRemoteValue(std::span<const std::byte> header, const RemoteNamespace& ns,
                        const BlockKey& key, std::span<const std::byte> payload) {
  const auto* h = reinterpret_cast<const char*>(header.data());
  if (Get32(h) != kMagic) return CorruptionError("remote value: not a kvtier block");
  if (const uint16_t version = VersionOf(h); version != kRemoteFormatVersion) {
    return CorruptionError(version == kSealedRemoteFormatVersion
                               ? "remote value: sealed, and this node has no block keys"
                               : "remote value: format version " + std::to_string(version));
  }
  KVTIER_RETURN_IF_ERROR(CheckHeaderFields(h, ns, key, payload.size(), /*sealed=*/false));
  if (BlockChecksum(payload) != Get64(h + 64)) {
    return CorruptionError("remote value: checksum mismatch");
  }
  return Status::Ok();
}

namespace {

// A sealed value's header: the seal with its tag left zero (the tag trails).
void EncodeSealedHeader(const RemoteNamespace& ns, const BlockKey& key, uint64_t payload_bytes,
                        uint64_t written, tiers::Seal seal, std::span<std::byte> header) {
  EncodeHeader(ns, key, payload_bytes, written, header.data(), /*sealed=*/true);
  seal.tag = {};
  const auto encoded = tiers::EncodeSeal(seal);
  std::memcpy(header.data() + kRemoteHeaderBytes, encoded.data(), encoded.size());
}

}  // namespace

Status SealRemoteValue(BlockSealer& sealer, const RemoteNamespace& ns, const BlockKey& key,
                       uint64_t written, std::span<const std::byte> payload,
                       std::span<std::byte> ciphertext, std::span<std::byte> header,
                       std::span<std::byte> trailer) {
  KVTIER_ASSIGN_OR_RETURN(
      const tiers::Seal seal,
      sealer.SealBlock(RemoteIdentity(ns, key, payload.size(), written), payload, ciphertext));
  EncodeSealedHeader(ns, key, payload.size(), written, seal, header);
  std::memcpy(trailer.data(), seal.tag.data(), kSealedRemoteTrailerBytes);
  return Status::Ok();
}

Result<BlockSealer::Opener> StartOpenRemoteValue(BlockSealer& sealer,
                                                 std::span<const std::byte> header,
                                                 const RemoteNamespace& ns, const BlockKey& key,
                                                 uint64_t payload_bytes, uint64_t now_s,
                                                 uint64_t max_age_s, RemoteFault* fault) {
  *fault = RemoteFault::kOther;
  const auto* h = reinterpret_cast<const char*>(header.data());
  if (Get32(h) != kMagic) return CorruptionError("remote value: not a kvtier block");
  if (const uint16_t version = VersionOf(h); version != kSealedRemoteFormatVersion) {
    if (version != kRemoteFormatVersion) {
      return CorruptionError("remote value: format version " + std::to_string(version));
    }
    *fault = RemoteFault::kSealing;
    return CorruptionError("remote value: in the clear (written by a node without block keys)");
  }
  KVTIER_RETURN_IF_ERROR(CheckHeaderFields(h, ns, key, payload_bytes, /*sealed=*/true));
  const uint64_t written = Get64(h + 64);
  KVTIER_ASSIGN_OR_RETURN(const tiers::Seal seal,
                          tiers::DecodeSeal(header.subspan(kRemoteHeaderBytes, kSealBytes)));
  if (seal.tag != decltype(seal.tag){}) {
    return CorruptionError("remote value: a tag in its header (the tag trails the payload)");
  }
  if (sealer.keys().Find(seal.key_id) == nullptr) {
    *fault = RemoteFault::kSealing;
    return CorruptionError("remote value: sealed under key " + std::to_string(seal.key_id) +
                           ", which is not in this node's key ring (rotated out?)");
  }
  if (written == 0) return CorruptionError("remote value: sealed without a write time");
  // The age is checked before the block is opened (a stale value costs no
  // decryption), but the time is authenticated: a value whose time was
  // changed does not open.
  if (max_age_s > 0 && now_s > written && now_s - written > max_age_s) {
    *fault = RemoteFault::kStale;
    return CorruptionError("remote value: stale, written " + std::to_string(now_s - written) +
                           " s ago (max_age " + std::to_string(max_age_s) + " s)");
  }
  return sealer.StartOpen(RemoteIdentity(ns, key, payload_bytes, written), seal);
}

Status OpenRemoteValue(BlockSealer& sealer, std::span<const std::byte> header,
                       const RemoteNamespace& ns, const BlockKey& key, std::span<std::byte> payload,
                       std::span<const std::byte> trailer, uint64_t now_s, uint64_t max_age_s,
                       RemoteFault* fault) {
  if (trailer.size() != kSealedRemoteTrailerBytes) {
    *fault = RemoteFault::kOther;
    return CorruptionError("remote value: its tag is cut short");
  }
  KVTIER_ASSIGN_OR_RETURN(
      BlockSealer::Opener opener,
      StartOpenRemoteValue(sealer, header, ns, key, payload.size(), now_s, max_age_s, fault));
  KVTIER_RETURN_IF_ERROR(opener.Update(payload));
  KVTIER_RETURN_IF_ERROR(opener.Finish(trailer.first<kSealedRemoteTrailerBytes>()));
  *fault = RemoteFault::kNone;
  return Status::Ok();
}

Status DecodeRemoteValue(std::string_view value, const RemoteNamespace& ns, const BlockKey& key,
                         std::span<std::byte> out) {
  if (value.size() != kRemoteHeaderBytes + out.size()) {
    return CorruptionError("remote value of " + std::to_string(value.size()) + " bytes, expected " +
                           std::to_string(kRemoteHeaderBytes + out.size()));
  }
  const auto bytes = std::as_bytes(std::span(value));
  if (!out.empty()) std::memcpy(out.data(), bytes.data() + kRemoteHeaderBytes, out.size());
  return CheckRemoteValue(bytes.first(kRemoteHeaderBytes), ns, key, out);
}

namespace {

// Opens a sealed value as it lands (RedisCommand::sink): once the header is
// in, its seal starts an opener, and each part of the payload is decrypted
// in place while the next is still on the wire, so that most of the
// decryption hides behind the transfer; the trailing tag finishes it.
class OpenAsLanded final : public LandingSink {
 public:
  OpenAsLanded(BlockSealer* sealer, std::span<const std::byte> header,
               std::span<const std::byte> trailer, const RemoteNamespace* ns, const BlockKey* key,
               uint64_t payload_bytes, uint64_t now_s, uint64_t max_age_s)
      : sealer_(sealer),
        header_(header),
        trailer_(trailer),
        ns_(ns),
        key_(key),
        payload_bytes_(payload_bytes),
        now_s_(now_s),
        max_age_s_(max_age_s) {}

  void Part(size_t span, std::span<std::byte> bytes) override {
    if (!status_.ok()) return;
    if (span == 0) {
      header_got_ += bytes.size();
      if (header_got_ < header_.size()) return;
      Result<BlockSealer::Opener> opener = StartOpenRemoteValue(
          *sealer_, header_, *ns_, *key_, payload_bytes_, now_s_, max_age_s_, &fault_);
      if (!opener) {
        status_ = opener.status();
        return;
      }
      opener_.emplace(std::move(opener).value());
      return;
    }
    if (span == 2) return;  // the tag, used once it is whole (Finish)
    if (!opener_) {
      status_ = CorruptionError("remote value: payload before its header");
      return;
    }
    status_ = opener_->Update(bytes);
  }

  // Once the whole value landed: OK when it opened as the block.
  Status Finish(RemoteFault* fault) {
    *fault = fault_;
    if (!status_.ok()) return status_;
    if (!opener_) return CorruptionError("remote value: its header never came");
    KVTIER_RETURN_IF_ERROR(opener_->Finish(trailer_.first<kSealedRemoteTrailerBytes>()));
    *fault = RemoteFault::kNone;
    return Status::Ok();
  }

 private:
  BlockSealer* sealer_;
  std::span<const std::byte> header_, trailer_;
  const RemoteNamespace* ns_;
  const BlockKey* key_;
  uint64_t payload_bytes_, now_s_, max_age_s_;
  size_t header_got_ = 0;
  RemoteFault fault_ = RemoteFault::kOther;
  Status status_;
  std::optional<BlockSealer::Opener> opener_;
};

// Seals a value as it is sent (RedisCommand::fill): each part of the
// payload is encrypted just before it goes, while the earlier parts
// travel; the last part's Fill writes the tag into the trailer, which is
// sent after it.
class SealAsSent final : public TailFiller {
 public:
  SealAsSent(BlockSealer::Sealing sealing, std::span<const std::byte> payload,
             std::span<std::byte> ciphertext, std::span<std::byte> trailer)
      : sealing_(std::move(sealing)), payload_(payload), out_(ciphertext), trailer_(trailer) {}

  Status Fill(size_t offset, size_t len) override {
    // A redirected command is sent again: its bytes are whole already.
    if (done_) return Status::Ok();
    if (offset != next_) return InternalError("remote value: sealed out of order");
    next_ = offset + len;
    KVTIER_RETURN_IF_ERROR(
        sealing_.Update(payload_.subspan(offset, len), out_.subspan(offset, len)));
    if (offset + len < payload_.size()) return Status::Ok();
    KVTIER_ASSIGN_OR_RETURN(const tiers::Seal seal, sealing_.Finish());
    std::memcpy(trailer_.data(), seal.tag.data(), kSealedRemoteTrailerBytes);
    done_ = true;
    return Status::Ok();
  }

 private:
  BlockSealer::Sealing sealing_;
  std::span<const std::byte> payload_;
  std::span<std::byte> out_, trailer_;
  size_t next_ = 0;
  bool done_ = false;
};

}  // namespace

// ---- RemoteStore -----------------------------------------------------------

Result<std::unique_ptr<RemoteStore>> RemoteStore::Open(
    const RemoteStoreOptions& options, std::span<const std::byte> deployment_secret) {
  if (options.key_prefix.empty() ||
      options.key_prefix.find_first_of(" \r\n{}") != std::string::npos) {
    return InvalidArgumentError("remote key prefix \"" + options.key_prefix +
                                "\": must be non-empty, without spaces or braces");
  }
  if (deployment_secret.size() < 16) {
    return InvalidArgumentError("the remote tier needs a deployment secret of at least 16 bytes");
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisCluster> cluster,
                          RedisCluster::Connect(options.redis));
  const std::string verifier = DeploymentSecretVerifier(deployment_secret);
  const std::string key = options.key_prefix + ":deployment";
  const std::string_view v = verifier;
  RedisCommand set{{"SET", key, v, "NX"}, 1};
  RedisCommand get{{"GET", key}, 1};
  auto replies = cluster->Run(std::span(&set, 1));
  if (!replies[0]) return replies[0].status();
  replies = cluster->Run(std::span(&get, 1));
  if (!replies[0]) return replies[0].status();
  if (replies[0]->type() != RedisReply::Type::kString) {
    return UnavailableError("remote tier: the deployment verifier at \"" + key +
                            "\" could not be read back: " + std::string(replies[0]->str()));
  }
  if (replies[0]->str() != v) {
    return FailedPreconditionError(
        "remote tier: the cluster holds blocks of another deployment secret under the prefix \"" +
        options.key_prefix +
        "\" (its verifier differs): give every node the same remote.secret_file, or use "
        "another remote.key_prefix");
  }
  // Whether the prefix's values are sealed: recorded by the first node with
  // keys; a node without keys is then refused.
  const std::string sealing_key = options.key_prefix + ":sealing";
  constexpr std::string_view kSealed = "aes-256-gcm";
  if (options.sealer) {
    RedisCommand mark{{"SET", sealing_key, kSealed}, 1};
    replies = cluster->Run(std::span(&mark, 1));
    if (!replies[0]) return replies[0].status();
  } else {
    RedisCommand ask{{"GET", sealing_key}, 1};
    replies = cluster->Run(std::span(&ask, 1));
    if (!replies[0]) return replies[0].status();
    if (replies[0]->type() == RedisReply::Type::kString && replies[0]->str() == kSealed) {
      return FailedPreconditionError(
          "remote tier: the cluster's blocks under the prefix \"" + options.key_prefix +
          "\" are sealed (other nodes have block keys) and this node has none: it would write "
          "prompts in the clear. Give it the same keys (server.block_keys_file), or use "
          "another remote.key_prefix");
    }
  }
  return std::unique_ptr<RemoteStore>(new RemoteStore(options, std::move(cluster)));
}

RemoteStore::RemoteStore(const RemoteStoreOptions& options, std::unique_ptr<RedisCluster> cluster)
    : opt_([&] {
        RemoteStoreOptions o = options;
        if (!o.unix_seconds) o.unix_seconds = SystemUnixSeconds;
        return o;
      }()),
      cluster_(std::move(cluster)) {}

Status RemoteStore::Unlanded(std::string_view whole, uint64_t payload_bytes,
                             RemoteFault* fault) const {
  // A value of another size than this node's form of the block: the other
  // form (sealed or clear) says so; anything else is garbage or another
  // layout's.
  *fault = RemoteFault::kOther;
  const size_t other =
      opt_.sealer ? kRemoteHeaderBytes : kSealedRemoteHeaderBytes + kSealedRemoteTrailerBytes;
  if (whole.size() == other + payload_bytes && whole.size() >= 8 && Get32(whole.data()) == kMagic &&
      VersionOf(whole.data()) ==
          (opt_.sealer ? kRemoteFormatVersion : kSealedRemoteFormatVersion)) {
    *fault = RemoteFault::kSealing;
    return CorruptionError(opt_.sealer
                               ? "remote value: in the clear (written by a node without block keys)"
                               : "remote value: sealed, and this node has no block keys");
  }
  return CorruptionError("remote value of " + std::to_string(whole.size()) + " bytes, expected " +
                         std::to_string(header_bytes() + payload_bytes + trailer_bytes()));
}

RemoteStore::~RemoteStore() = default;

std::string RemoteStore::KeyOf(uint64_t ns, const BlockKey& key) const {
  char ns_hex[17];
  std::snprintf(ns_hex, sizeof(ns_hex), "%016" PRIx64, ns);
  return opt_.key_prefix + ":" + ns_hex + ":" + key.ToHex();
}

bool RemoteStore::Paused() {
  TimeNs until = paused_until_.load();
  if (until == 0) return false;
  if (opt_.clock->Now() < until) return true;
  // The pause is over: this call is the probe. A failure pauses again.
  if (paused_until_.compare_exchange_strong(until, 0)) {
    if (opt_.note) opt_.note("remote tier: retrying the cluster after a pause");
  }
  return false;
}

void RemoteStore::Failed(const Status& status) {
  {
    std::lock_guard lock(mu_);
    ++stats_.errors;
    stats_.last_error = status.ToString();
  }
  const TimeNs now = opt_.clock->Now();
  TimeNs expected = 0;
  if (paused_until_.compare_exchange_strong(expected, now + opt_.pause_ns)) {
    {
      std::lock_guard lock(mu_);
      ++stats_.pauses;
    }
    Note(last_pause_note_, "remote tier paused for " + std::to_string(opt_.pause_ns / kNsPerSec) +
                               " s (lookups miss, demotions drop): " + status.ToString());
  }
}

void RemoteStore::Note(std::atomic<int64_t>& last, const std::string& line) {
  if (!opt_.note) return;
  const TimeNs now = opt_.clock->Now();
  int64_t prev = last.load();
  if (prev != INT64_MIN && now - prev < 10 * kNsPerSec) return;
  if (last.compare_exchange_strong(prev, now)) opt_.note(line);
}

bool RemoteStore::KnownMissing(uint64_t ns, const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = missing_.find(MissingKey(ns, key));
  if (it == missing_.end()) return false;
  if (opt_.clock->Now() >= it->second) {
    missing_.erase(it);
    return false;
  }
  return true;
}

void RemoteStore::RememberMissing(uint64_t ns, const BlockKey& key) {
  if (opt_.negative_ttl_ns <= 0) return;
  std::lock_guard lock(mu_);
  if (missing_.size() >= opt_.negative_entries) missing_.clear();
  missing_[MissingKey(ns, key)] = opt_.clock->Now() + opt_.negative_ttl_ns;
}

void RemoteStore::ForgetMissing(uint64_t ns, const BlockKey& key) {
  std::lock_guard lock(mu_);
  missing_.erase(MissingKey(ns, key));
}

size_t RemoteStore::CountLeading(uint64_t ns, std::span<const BlockKey> keys) {
  if (keys.empty() || Paused()) return 0;
  size_t ask = 0;
  while (ask < keys.size() && !KnownMissing(ns, keys[ask])) ++ask;
  if (ask == 0) {
    std::lock_guard lock(mu_);
    ++stats_.negative_hits;
    return 0;
  }
  std::vector<std::string> names;
  names.reserve(ask);
  std::vector<RedisCommand> cmds;
  cmds.reserve(ask);
  for (size_t i = 0; i < ask; ++i) names.push_back(KeyOf(ns, keys[i]));
  for (size_t i = 0; i < ask; ++i) cmds.push_back({{"EXISTS", names[i]}, 1});
  auto replies = cluster_->Run(cmds);
  size_t hits = 0;
  Status failure;
  while (hits < ask) {
    const Result<RedisReply>& r = replies[hits];
    if (!r) {
      failure = r.status();
      break;
    }
    if (r->type() != RedisReply::Type::kInteger) {
      failure = UnavailableError("remote EXISTS: " + std::string(r->str()));
      break;
    }
    if (r->integer() == 0) {
      RememberMissing(ns, keys[hits]);
      break;
    }
    ++hits;
  }
  if (!failure.ok()) Failed(failure);
  std::lock_guard lock(mu_);
  ++stats_.lookups;
  stats_.lookup_keys += ask;
  stats_.lookup_hits += hits;
  return hits;
}

size_t RemoteStore::ReadLeading(const RemoteNamespace& ns, std::span<const BlockKey> keys,
                                std::span<const std::span<std::byte>> outs) {
  if (keys.empty() || Paused()) return 0;
  size_t done = 0;
  while (done < keys.size()) {
    // One pipelined round of at most max_read_batch_bytes.
    size_t end = done;
    uint64_t bytes = 0;
    while (end < keys.size() &&
           (end == done || bytes + outs[end].size() <= opt_.max_read_batch_bytes)) {
      bytes += outs[end].size();
      ++end;
    }
    const size_t n = end - done;
    std::vector<std::string> names;
    std::vector<RedisCommand> cmds;
    // Each value is read from the socket straight into its place: the
    // header into `headers`, the payload into its `outs` slot (no copy),
    // then checked there as its reply arrives, while it is still in cache.
    std::vector<std::array<std::byte, kSealedRemoteHeaderBytes>> headers(n);
    std::vector<std::array<std::byte, kSealedRemoteTrailerBytes>> trailers(n);
    std::vector<std::array<std::span<std::byte>, 3>> into(n);
    names.reserve(n);
    cmds.reserve(n);
    // Sealed, each value is opened as it lands (OpenAsLanded).
    std::vector<OpenAsLanded> openers;
    if (opt_.sealer) openers.reserve(n);
    const uint64_t now_s = opt_.sealer ? opt_.unix_seconds() : 0;
    for (size_t i = 0; i < n; ++i) {
      names.push_back(KeyOf(ns.id, keys[done + i]));
      into[i] = {std::span(headers[i]).first(header_bytes()), outs[done + i],
                 std::span(trailers[i]).first(trailer_bytes())};
      RedisCommand get{{"GET", names.back()}, 1};
      get.reply_into = std::span(into[i]).first(opt_.sealer ? 3 : 2);
      if (opt_.sealer) {
        openers.emplace_back(opt_.sealer.get(), into[i][0], into[i][2], &ns, &keys[done + i],
                             outs[done + i].size(), now_s, opt_.max_age_s);
        get.sink = &openers.back();
      }
      cmds.push_back(std::move(get));
    }
    std::vector<Status> outcome(n);
    std::vector<uint8_t> kind(n, 0);  // 0 ok, 1 miss, 2 corrupt, 3 failure
    std::vector<RemoteFault> fault(n, RemoteFault::kNone);
    cluster_->RunEach(cmds, [&](size_t i, Result<RedisReply> r) {
      if (!r) {
        kind[i] = 3;
        outcome[i] = r.status();
      } else if (r->type() == RedisReply::Type::kNil) {
        kind[i] = 1;
      } else if (r->type() != RedisReply::Type::kString) {
        kind[i] = 3;
        outcome[i] = UnavailableError("remote GET: " + std::string(r->str()));
      } else if (Status s = !r->landed() ? Unlanded(r->str(), outs[done + i].size(), &fault[i])
                            : opt_.sealer
                                ? openers[i].Finish(&fault[i])
                                : CheckRemoteValue(into[i][0], ns, keys[done + i], outs[done + i]);
                 !s.ok()) {
        kind[i] = 2;
        outcome[i] = std::move(s);
      }
    });
    size_t got = 0;
    uint64_t got_bytes = 0, misses = 0, corrupt = 0, corrupt_sealing = 0, corrupt_stale = 0;
    Status failure;
    while (got < n && kind[got] == 0) got_bytes += outs[done + got++].size();
    if (got < n) {
      if (kind[got] == 1) {
        ++misses;
        RememberMissing(ns.id, keys[done + got]);
      } else if (kind[got] == 2) {
        ++corrupt;
        corrupt_sealing += fault[got] == RemoteFault::kSealing;
        corrupt_stale += fault[got] == RemoteFault::kStale;
        const size_t cause = fault[got] == RemoteFault::kSealing ? 1
                             : fault[got] == RemoteFault::kStale ? 2
                                                                 : 0;
        Note(last_corrupt_note_[cause], "remote tier: value " + names[got] + " is not the block: " +
                                            outcome[got].ToString() + "; a miss");
      } else {
        failure = outcome[got];
      }
    }
    if (!failure.ok()) Failed(failure);
    {
      std::lock_guard lock(mu_);
      stats_.reads += std::min(n, got + 1);
      stats_.read_hits += got;
      stats_.read_misses += misses;
      stats_.corrupt += corrupt;
      stats_.corrupt_sealing += corrupt_sealing;
      stats_.corrupt_stale += corrupt_stale;
      stats_.bytes_read += got_bytes;
    }
    done += got;
    if (got < n) break;
  }
  return done;
}

Status RemoteStore::Write(const RemoteNamespace& ns, const BlockKey& key,
                          std::span<const std::byte> payload) {
  if (Paused()) return UnavailableError("remote tier paused");
  if (payload.empty()) return InvalidArgumentError("remote tier: an empty block");
  // The header is the last argument and the payload goes on from where it
  // lies: nothing is copied on the way to the socket.
  // Sealed, the ciphertext goes from a buffer of the calling thread's, each
  // part sealed just before it is sent (SealAsSent), the tag after it.
  std::array<std::byte, kSealedRemoteHeaderBytes> header;
  std::array<std::byte, kSealedRemoteTrailerBytes> trailer{};
  std::span<const std::byte> body = payload;
  std::optional<SealAsSent> sealing;
  if (opt_.sealer) {
    thread_local std::vector<std::byte> ciphertext;
    ciphertext.resize(payload.size());
    const uint64_t written = opt_.unix_seconds();
    Result<BlockSealer::Sealing> started =
        opt_.sealer->StartSeal(RemoteIdentity(ns, key, payload.size(), written));
    if (!started) {
      std::lock_guard lock(mu_);
      ++stats_.write_failures;
      return started.status();
    }
    EncodeSealedHeader(ns, key, payload.size(), written, started->pending(), header);
    sealing.emplace(std::move(started).value(), payload, std::span(ciphertext), std::span(trailer));
    body = ciphertext;
  } else {
    EncodeRemoteHeader(ns, key, payload, std::span(header).first(kRemoteHeaderBytes));
  }
  const std::string name = KeyOf(ns.id, key);
  const std::string expire = std::to_string(opt_.max_age_s);
  RedisCommand set{
      {"SET", name, std::string_view(reinterpret_cast<const char*>(header.data()), header_bytes())},
      1};
  if (opt_.sealer && opt_.max_age_s > 0) {
    // SETEX: the value stays the last argument (its payload goes on from
    // where it lies).
    set.args = {"SETEX", name, expire,
                std::string_view(reinterpret_cast<const char*>(header.data()), header_bytes())};
  }
  set.last_arg_tail = std::string_view(reinterpret_cast<const char*>(body.data()), body.size());
  if (sealing) {
    set.fill = &*sealing;
    set.last_arg_trailer =
        std::string_view(reinterpret_cast<const char*>(trailer.data()), trailer.size());
  }
  auto replies = cluster_->Run(std::span(&set, 1));
  Status status;
  if (!replies[0]) {
    status = replies[0].status();
    Failed(status);
  } else if (replies[0]->type() == RedisReply::Type::kError) {
    const std::string text(replies[0]->str());
    status = text.starts_with("OOM") ? ResourceExhaustedError("remote SET: " + text)
                                     : UnavailableError("remote SET: " + text);
    if (!text.starts_with("OOM")) Failed(status);
  }
  if (status.ok()) ForgetMissing(ns.id, key);
  std::lock_guard lock(mu_);
  if (status.ok()) {
    ++stats_.writes;
    stats_.bytes_written += payload.size();
  } else {
    ++stats_.write_failures;
  }
  return status;
}

Status RemoteStore::Remove(uint64_t ns, std::span<const BlockKey> keys) {
  if (keys.empty() || Paused()) return Status::Ok();
  std::vector<std::string> names;
  std::vector<RedisCommand> cmds;
  for (const BlockKey& k : keys) names.push_back(KeyOf(ns, k));
  for (const std::string& n : names) cmds.push_back({{"DEL", n}, 1});
  for (const auto& r : cluster_->Run(cmds)) {
    if (!r) return r.status();
  }
  return Status::Ok();
}

RemoteStats RemoteStore::stats() const {
  std::lock_guard lock(mu_);
  RemoteStats s = stats_;
  const TimeNs until = paused_until_.load();
  s.paused = until != 0 && opt_.clock->Now() < until;
  return s;
}

bool RemoteStore::paused() const { return stats().paused; }

std::string RemoteStore::description() const {
  const std::vector<std::string> masters = cluster_->masters();
  std::string d = cluster_->cluster_mode()
                      ? "remote: redis cluster, " + std::to_string(masters.size()) + " masters ("
                      : "remote: redis server (";
  for (size_t i = 0; i < masters.size(); ++i) d += (i ? ", " : "") + masters[i];
  return d + "), prefix \"" + opt_.key_prefix + "\"";
}

}  // namespace kvtier::tiers::internal

namespace kvtier::tiers {

std::string DeploymentSecretVerifier(std::span<const std::byte> deployment_secret) {
  std::vector<std::byte> labelled;
  const std::string_view label = "kvtier deployment secret verifier v1";
  for (char c : label) labelled.push_back(static_cast<std::byte>(c));
  labelled.insert(labelled.end(), deployment_secret.begin(), deployment_secret.end());
  const uint64_t a = internal::BlockChecksum(labelled);
  labelled.push_back(std::byte{1});
  const uint64_t b = internal::BlockChecksum(labelled);
  char verifier[33];
  std::snprintf(verifier, sizeof(verifier), "%016" PRIx64 "%016" PRIx64, a, b);
  return std::string(verifier, 32);
}

Result<std::unique_ptr<RemoteTier>> NewRemoteTier(const RemoteTierOptions& options,
                                                  std::span<const std::byte> deployment_secret) {
  internal::RemoteStoreOptions o;
  if (options.seeds.empty()) return InvalidArgumentError("the remote tier needs seed nodes");
  for (const std::string& seed : options.seeds) {
    KVTIER_ASSIGN_OR_RETURN(internal::Endpoint e, internal::ParseEndpoint(seed));
    o.redis.seeds.push_back(std::move(e));
  }
  o.redis.username = options.username;
  o.redis.password = options.password;
  o.redis.tls = options.tls;
  o.redis.connections_per_node = options.connections_per_node;
  o.redis.connect_timeout = std::chrono::milliseconds(options.connect_timeout_ns / kNsPerMs);
  o.redis.command_timeout = std::chrono::milliseconds(options.command_timeout_ns / kNsPerMs);
  o.key_prefix = options.key_prefix;
  o.pause_ns = options.pause_ns;
  o.negative_ttl_ns = options.negative_ttl_ns;
  o.clock = options.clock;
  o.note = options.note;
  o.sealer = options.sealer;
  o.max_age_s = options.max_age_s;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<internal::RemoteStore> store,
                          internal::RemoteStore::Open(o, deployment_secret));
  return std::unique_ptr<RemoteTier>(std::move(store));
}

}  // namespace kvtier::tiers

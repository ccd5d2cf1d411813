#include "tiers/internal/remote_store.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>

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
void EncodeHeader(const RemoteNamespace& ns, const BlockKey& key, uint64_t payload_bytes,
                  uint64_t checksum, std::byte* h) {
  std::memset(h, 0, kRemoteHeaderBytes);
  Put32(h, kMagic);
  h[4] = static_cast<std::byte>(kRemoteFormatVersion & 0xff);
  h[5] = static_cast<std::byte>(kRemoteFormatVersion >> 8);
  h[6] = static_cast<std::byte>(kRemoteHeaderBytes & 0xff);
  h[7] = static_cast<std::byte>(kRemoteHeaderBytes >> 8);
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
  const uint16_t version =
      static_cast<uint16_t>(static_cast<uint8_t>(h[4]) | (static_cast<uint8_t>(h[5]) << 8));
  if (version != kRemoteFormatVersion) {
    return CorruptionError("remote value: format version " + std::to_string(version));
  }
  std::byte expected[kRemoteHeaderBytes];
  EncodeHeader(ns, key, payload.size(), Get64(h + 64), expected);
  // Every field but the checksum must be what this block's header holds.
  if (std::memcmp(h, expected, 64) != 0) {
    const char* what = Get64(h + 8) != ns.id                                ? "namespace"
                       : Get64(h + 16) != key.hi || Get64(h + 24) != key.lo ? "block key"
                       : std::memcmp(h + 32, expected + 32, 24) != 0        ? "layout"
                                                                            : "header";
    return CorruptionError(std::string("remote value: another ") + what);
  }
  if (BlockChecksum(payload) != Get64(h + 64)) {
    return CorruptionError("remote value: checksum mismatch");
  }
  return Status::Ok();
}

Status DecodeRemoteValue(std::string_view value, const RemoteNamespace& ns, const BlockKey& key,
                         std::span<std::byte> out) {
  if (value.size() != kRemoteHeaderBytes + out.size()) {
    return CorruptionError("remote value of " + std::to_string(value.size()) + " bytes, expected " +
                           std::to_string(kRemoteHeaderBytes + out.size()));
  }
  const auto bytes = std::as_bytes(std::span(value));
  std::memcpy(out.data(), bytes.data() + kRemoteHeaderBytes, out.size());
  return CheckRemoteValue(bytes.first(kRemoteHeaderBytes), ns, key, out);
}

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
  return std::unique_ptr<RemoteStore>(new RemoteStore(options, std::move(cluster)));
}

RemoteStore::RemoteStore(const RemoteStoreOptions& options, std::unique_ptr<RedisCluster> cluster)
    : opt_(options), cluster_(std::move(cluster)) {}

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
    std::vector<std::array<std::byte, kRemoteHeaderBytes>> headers(n);
    std::vector<std::array<std::span<std::byte>, 2>> into(n);
    names.reserve(n);
    cmds.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      names.push_back(KeyOf(ns.id, keys[done + i]));
      into[i] = {std::span(headers[i]), outs[done + i]};
      RedisCommand get{{"GET", names.back()}, 1};
      get.reply_into = into[i];
      cmds.push_back(std::move(get));
    }
    std::vector<Status> outcome(n);
    std::vector<uint8_t> kind(n, 0);  // 0 ok, 1 miss, 2 corrupt, 3 failure
    cluster_->RunEach(cmds, [&](size_t i, Result<RedisReply> r) {
      if (!r) {
        kind[i] = 3;
        outcome[i] = r.status();
      } else if (r->type() == RedisReply::Type::kNil) {
        kind[i] = 1;
      } else if (r->type() != RedisReply::Type::kString) {
        kind[i] = 3;
        outcome[i] = UnavailableError("remote GET: " + std::string(r->str()));
      } else if (Status s = r->landed()
                                ? CheckRemoteValue(headers[i], ns, keys[done + i], outs[done + i])
                                : DecodeRemoteValue(r->str(), ns, keys[done + i], outs[done + i]);
                 !s.ok()) {
        kind[i] = 2;
        outcome[i] = std::move(s);
      }
    });
    size_t got = 0;
    uint64_t got_bytes = 0, misses = 0, corrupt = 0;
    Status failure;
    while (got < n && kind[got] == 0) got_bytes += outs[done + got++].size();
    if (got < n) {
      if (kind[got] == 1) {
        ++misses;
        RememberMissing(ns.id, keys[done + got]);
      } else if (kind[got] == 2) {
        ++corrupt;
        Note(last_corrupt_note_, "remote tier: value " + names[got] +
                                     " is not the block: " + outcome[got].ToString() + "; a miss");
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
  // The header is the last argument and the payload goes on from where it
  // lies: nothing is copied on the way to the socket.
  std::array<std::byte, kRemoteHeaderBytes> header;
  EncodeRemoteHeader(ns, key, payload, header);
  const std::string name = KeyOf(ns.id, key);
  RedisCommand set{
      {"SET", name, std::string_view(reinterpret_cast<const char*>(header.data()), header.size())},
      1};
  set.last_arg_tail =
      std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size());
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
  o.redis.password = options.password;
  o.redis.connections_per_node = options.connections_per_node;
  o.redis.connect_timeout = std::chrono::milliseconds(options.connect_timeout_ns / kNsPerMs);
  o.redis.command_timeout = std::chrono::milliseconds(options.command_timeout_ns / kNsPerMs);
  o.key_prefix = options.key_prefix;
  o.pause_ns = options.pause_ns;
  o.negative_ttl_ns = options.negative_ttl_ns;
  o.clock = options.clock;
  o.note = options.note;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<internal::RemoteStore> store,
                          internal::RemoteStore::Open(o, deployment_secret));
  return std::unique_ptr<RemoteTier>(std::move(store));
}

}  // namespace kvtier::tiers

// The remote tier's store: blocks as values on a Redis Cluster that several
// kvtierd nodes share, each value a self-describing header and the payload,
// so that a value read back is served only when it is exactly the block
// asked for (format, namespace, key, layout, length and checksum all match;
// anything else is a miss, counted, never wrong bytes).
//
// With a BlockSealer (block keys configured) every value is sealed instead:
// the payload encrypted with AES-256-GCM, the header carrying the write time
// and the seal, and the block's identity (namespace fingerprint, key, tier,
// length, write time) as associated data. Whoever reads a node then learns
// nothing of the prompts, and whoever writes one cannot make a node serve a
// block it did not seal: another namespace's or key's value, changed bytes,
// garbage, a value under a rotated-out key and (with max_age_s) a value
// older than the tier keeps values are all misses. A value replayed within
// max_age_s under its own key is harmless: keys are content-addressed (the
// chained hash of the prefix), so every value ever sealed under a key holds
// that key's block. Nodes of one deployment either all seal or none do: the
// cluster records "sealed" under the prefix, and a node without keys is
// refused by it.
//
// Keys: "<prefix>:<namespace id, 16 hex>:<block key, 32 hex>". The
// namespace id is RemoteNamespaceId(model, salt, layout), the same on every
// node (an engine's own NamespaceId is not); the prefix lets several
// deployments share one cluster.
//
// The store never takes its caller down: a cluster that fails (a node gone,
// timeouts, CLUSTERDOWN) pauses the store for `pause`, during which every
// call answers at once (Unavailable: misses and dropped writes), and the
// first call after the pause tries again. A cluster that is full
// (maxmemory) refuses writes (ResourceExhausted) or evicts our values (a
// miss), both normal.
//
// Thread-safety: every method may be called from any thread, concurrently.
// Calls block on the network (bounded by the timeouts): the engine makes
// them on its remote I/O threads, never on its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/layout.h"
#include "common/result.h"
#include "prefix_index/block_key.h"
#include "tiers/internal/redis_cluster.h"
#include "tiers/remote_tier.h"

namespace kvtier::tiers::internal {

using prefix_index::BlockKey;
using tiers::BlockSealer;
using tiers::RemoteNamespace;
using tiers::RemoteStats;

// The value's header, before the payload: 72 bytes, little-endian.
inline constexpr size_t kRemoteHeaderBytes = 72;
inline constexpr uint16_t kRemoteFormatVersion = 1;
// A sealed value: a header of the same fields, the write time (u64 seconds
// since the epoch) where the checksum was, then the seal (EncodeSeal) with
// its tag zero; the ciphertext; the tag (16 bytes) last, so that a value is
// sent as it is sealed, part by part.
inline constexpr size_t kSealedRemoteHeaderBytes = kRemoteHeaderBytes + kSealBytes;
inline constexpr size_t kSealedRemoteTrailerBytes = kSealTagBytes;
inline constexpr uint16_t kSealedRemoteFormatVersion = 2;

// Why a value read back is not the block (RemoteStats' corrupt_* fields).
enum class RemoteFault : uint8_t {
  kNone,
  kOther,    // another block's value, damaged bytes, garbage
  kSealing,  // sealed where clear was expected or the reverse, or a rotated-out key
  kStale,    // sealed longer ago than max_age_s
};

// The header of `payload`'s value (its checksum computed here) into
// `header` (kRemoteHeaderBytes). REQUIRES: payload.size() == the layout's
// BlockBytes().
void EncodeRemoteHeader(const RemoteNamespace& ns, const BlockKey& key,
                        std::span<const std::byte> payload, std::span<std::byte> header);
// A whole value, header + payload (tests write such values themselves).
std::vector<std::byte> EncodeRemoteValue(const RemoteNamespace& ns, const BlockKey& key,
                                         std::span<const std::byte> payload);
// Checks a value read as `header` and `payload` (where it was read to)
// against the block asked for: Corruption, naming the first field that
// differs, for anything but exactly that block (then `payload` holds no
// block: discard it).
Status CheckRemoteValue(std::span<const std::byte> header, const RemoteNamespace& ns,
                        const BlockKey& key, std::span<const std::byte> payload);
// The same for a value in one piece, its payload copied into `out` (the
// block's size); a value of another size is Corruption.
Status DecodeRemoteValue(std::string_view value, const RemoteNamespace& ns, const BlockKey& key,
                         std::span<std::byte> out);

// Sealed values. SealRemoteValue encrypts `payload` into `ciphertext` (its
// size) and writes the header (kSealedRemoteHeaderBytes) and the trailer
// (the tag, kSealedRemoteTrailerBytes), `written` being the time to record
// (seconds since the epoch, non-zero).
Status SealRemoteValue(BlockSealer& sealer, const RemoteNamespace& ns, const BlockKey& key,
                       uint64_t written, std::span<const std::byte> payload,
                       std::span<std::byte> ciphertext, std::span<std::byte> header,
                       std::span<std::byte> trailer);
// Opens a sealed value read as `header`, `payload` (decrypted in place) and
// `trailer`:
// Corruption, saying why and setting `fault`, unless it is exactly the block
// asked for, sealed under a key of the ring, and (max_age_s > 0) written at
// most max_age_s before `now_s`. On failure `payload` holds no block.
// The first half of OpenRemoteValue, for a payload still on its way: the
// header checked and an opener started, to which the payload's parts go in
// order (Update), then Finish with the trailer's tag.
Result<BlockSealer::Opener> StartOpenRemoteValue(BlockSealer& sealer,
                                                 std::span<const std::byte> header,
                                                 const RemoteNamespace& ns, const BlockKey& key,
                                                 uint64_t payload_bytes, uint64_t now_s,
                                                 uint64_t max_age_s, RemoteFault* fault);
Status OpenRemoteValue(BlockSealer& sealer, std::span<const std::byte> header,
                       const RemoteNamespace& ns, const BlockKey& key, std::span<std::byte> payload,
                       std::span<const std::byte> trailer, uint64_t now_s, uint64_t max_age_s,
                       RemoteFault* fault);

struct RemoteStoreOptions {
  RedisOptions redis;
  // Put before every key, so deployments that share a cluster never meet.
  std::string key_prefix = "kvtier";
  // After a failure the store answers at once (misses, dropped writes) for
  // this long, then tries again. Default 5 s.
  TimeNs pause_ns = 5 * kNsPerSec;
  // A key found missing is not asked for again for this long (other nodes'
  // writes show up after it). Default 1 s.
  TimeNs negative_ttl_ns = kNsPerSec;
  // Bound of the negative cache; it starts afresh when full. Default 64 Ki.
  size_t negative_entries = 65536;
  // Values read in one pipelined round at most (bytes); a longer run is
  // read in several. Default 64 MiB.
  uint64_t max_read_batch_bytes = 64ULL << 20;
  const Clock* clock = &SystemClock();
  // Seals and opens every value (see the top of this file); null: clear.
  std::shared_ptr<BlockSealer> sealer;
  // With a sealer: values written longer ago (seconds) are stale misses,
  // and SET asks Redis to expire them after as long. 0: never stale.
  uint64_t max_age_s = 0;
  // Seconds since the epoch (the write time sealed into values). Default:
  // the system's real-time clock.
  std::function<uint64_t()> unix_seconds;
  // One line per event worth an operator's attention (paused, resumed, a
  // value that is not the block, per cause), at most one per kind every
  // 10 s. Empty: none.
  std::function<void(const std::string&)> note;
};

class RemoteStore final : public RemoteTier {
 public:
  // Connects (reads the slot map) and checks the deployment secret against
  // the one the cluster recorded under the prefix: the first node records
  // a verifier of it (a hash, not the secret); a node with another secret is
  // refused (FailedPrecondition), since its keys would never meet the
  // others'. A node with a sealer records that the prefix's values are
  // sealed; a node without one is then refused (FailedPrecondition): it
  // would write prompts in the clear where the others protect them.
  // Unavailable when no seed answers.
  static Result<std::unique_ptr<RemoteStore>> Open(const RemoteStoreOptions& options,
                                                   std::span<const std::byte> deployment_secret);
  ~RemoteStore() override;

  // How many leading `keys` the cluster holds: one pipelined round of EXISTS,
  // counted up to the first miss (a key the negative cache knows missing
  // ends the run without asking). 0 while paused.
  size_t CountLeading(uint64_t ns, std::span<const BlockKey> keys) override;

  // Reads the leading blocks of `keys` into `outs` (one span per key, each
  // the block's size), pipelined, stopping at the first block missing, not
  // exactly right, or not read. Returns how many were read and verified.
  size_t ReadLeading(const RemoteNamespace& ns, std::span<const BlockKey> keys,
                     std::span<const std::span<std::byte>> outs) override;

  // Writes one block. Unavailable while paused or when the cluster fails;
  // ResourceExhausted when it refuses (maxmemory with noeviction).
  Status Write(const RemoteNamespace& ns, const BlockKey& key,
               std::span<const std::byte> payload) override;

  // Deletes blocks (REMOVE of a worker). Best effort.
  Status Remove(uint64_t ns, std::span<const BlockKey> keys) override;

  RemoteStats stats() const override;
  bool paused() const override;
  std::string description()
      const override;  // "remote: redis cluster, 3 masters (127.0.0.1:7000, ...)"

  // The value key of a block (tests corrupt values through it).
  std::string KeyOf(uint64_t ns, const BlockKey& key) const;

 private:
  RemoteStore(const RemoteStoreOptions& options, std::unique_ptr<RedisCluster> cluster);
  bool Paused();
  void Failed(const Status& status);
  void Note(std::atomic<int64_t>& last, const std::string& line);
  bool KnownMissing(uint64_t ns, const BlockKey& key);
  void ForgetMissing(uint64_t ns, const BlockKey& key);
  void RememberMissing(uint64_t ns, const BlockKey& key);

  const RemoteStoreOptions opt_;
  std::unique_ptr<RedisCluster> cluster_;
  std::atomic<TimeNs> paused_until_{0};
  std::atomic<bool> pause_noted_{false};
  // The header and trailer bytes of the values this node writes and expects.
  size_t header_bytes() const {
    return opt_.sealer ? kSealedRemoteHeaderBytes : kRemoteHeaderBytes;
  }
  size_t trailer_bytes() const { return opt_.sealer ? kSealedRemoteTrailerBytes : 0; }
  // Why a value read in one piece (`whole`: not of this node's size for a
  // block of `payload_bytes`) is not the block: Corruption, `fault` set.
  Status Unlanded(std::string_view whole, uint64_t payload_bytes, RemoteFault* fault) const;

  std::atomic<int64_t> last_pause_note_{INT64_MIN};
  // One per RemoteFault but kNone.
  std::atomic<int64_t> last_corrupt_note_[3] = {INT64_MIN, INT64_MIN, INT64_MIN};

  mutable std::mutex mu_;
  RemoteStats stats_;  // guarded by mu_ (paused: computed)
  std::unordered_map<BlockKey, TimeNs, prefix_index::BlockKeyHash> missing_;  // guarded by mu_
};

}  // namespace kvtier::tiers::internal

// CacheEngine: the index, the tiers, one eviction policy per tier, and the
// leases (DESIGN.md §3). The module engine/ sits above the tier backends
// (tiers/) and below the daemon and the replay simulator, which both drive
// this one class; its implementation is one file per concern (see
// cache_engine.cc).
//
// Write path: Allocate(keys) reserves slots, invisible to lookups; the worker
// writes the bytes in place; Commit() publishes them (Abort() or dropping the
// Allocation frees them). Read path: Acquire(keys, tier) pins the leading
// present blocks, moving them into `tier` where needed, and returns a Lease;
// the worker reads; dropping the Lease (or Release()) unpins them.
//
// Guarantees:
// - A pinned block (leased, being written, or named by an open allocation)
//   is never evicted, moved or freed.
// - A tier's capacity is never exceeded: making room evicts the policy's
//   victims, demoting each to the next tier down (device -> host -> gone).
// - A block whose parent is gone never counts in a prefix hit; unpinned
//   descendants of a dropped block are dropped with it (they can never hit
//   again), pinned ones when their last pin goes.
// - A block is in exactly one tier at a time; a move copies the bytes and
//   then frees the old slot.
//
// Thread-safety: none. The engine, its Allocations and Leases are confined
// to one thread (the daemon's strand). Allocations and Leases must be
// destroyed before the engine.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/layout.h"
#include "common/page_allocator.h"
#include "common/result.h"
#include "engine/engine_options.h"
#include "engine/internal/chain_fingerprints.h"
#include "engine/io_executor.h"
#include "eviction/admission.h"
#include "eviction/eviction_policy.h"
#include "prefix_index/block_key.h"
#include "prefix_index/prefix_index.h"
#include "tiers/remote_tier.h"
#include "tiers/tier.h"

namespace kvtier::engine {

using prefix_index::BlockKey;
using prefix_index::NamespaceId;
// The tiers' vocabulary, which the engine's interface speaks (tiers/tier.h,
// tiers/remote_tier.h).
using tiers::BlockInfo;
using tiers::kNumTierKinds;
using tiers::RemoteNamespace;
using tiers::RemoteStats;
using tiers::RemoteTier;
using tiers::SlotId;
using tiers::Tier;
using tiers::TierKind;
using tiers::TierKindName;

// A key space with one block layout. Blocks of different namespaces never
// match, whatever their keys.
struct NamespaceSpec {
  std::string model;  // model id, e.g. "meta-llama/Llama-3.1-8B"
  std::string salt;   // tenant or cache salt; "" for none
  Layout layout;
  // Quantize on demote: how the ssd and remote tiers keep this namespace's
  // blocks (common/fp8.h; lossy when not kOff, docs/fp8.md). The bytes are
  // encoded and decoded on the I/O threads, never on the engine's; the ssd's
  // checksums cover the stored form. Each block on the ssd keeps its own
  // form, so changing this across restarts never misreads a block.
  Quantize quantize_lower = Quantize::kOff;
};

// Where one block of a result lives.
struct BlockLocation {
  TierKind tier = TierKind::kHost;
  SlotId slot = 0;
  uint64_t offset = 0;  // byte offset inside the tier's arena
};

struct LookupResult {
  size_t hits = 0;              // leading keys present
  std::vector<TierKind> tiers;  // tier of each of the `hits` blocks (kRemote: the remote tier)
};

// A change a router cares about: a block became readable in a tier (the
// remote tier included), or stopped being readable there.
struct BlockEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  Kind kind = Kind::kStored;
  NamespaceId ns = 0;
  TierKind tier = TierKind::kHost;
  BlockKey key;
  std::optional<BlockKey> parent;  // kStored: the block before it in its chain
};

struct TierStats {
  TierKind kind = TierKind::kHost;
  bool present = false;
  bool emulated = false;
  std::string description;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // slot bytes reserved
  uint64_t blocks = 0;      // blocks in the tier (committed and pending)
  uint64_t pinned_blocks = 0;
  uint64_t hits = 0;               // acquired blocks found in this tier
  uint64_t lookup_hits = 0;        // blocks found in this tier by lookups
  uint64_t evictions = 0;          // blocks moved out or dropped to make room
  uint64_t admission_refused = 0;  // blocks its admission filter kept out of it
  uint64_t demotions_in = 0;       // blocks that arrived from the tier above
  uint64_t promotions_in = 0;      // blocks that arrived from the tier below
  uint64_t bytes_in = 0;           // bytes copied into the tier by moves
  std::string policy;              // the eviction policy's name
  std::string admission;           // the admission filter's name ("off": none)
  // What the adaptive policy follows and why; absent for fixed policies.
  std::optional<eviction::AdaptiveReport> adaptive;
};

// What the workers of one namespace found and missed (EngineStats::
// namespace_use), in blocks; times the namespace's block_tokens, in tokens.
struct NamespaceUse {
  std::string model;
  uint32_t block_tokens = 0;
  // Blocks acquires found, by the tier they were in before any promotion
  // (indexed by TierKind): those read from the remote tier into the host,
  // for the acquire or for a hint, count under kRemote, not under the host.
  std::array<uint64_t, kNumTierKinds + 1> hit_blocks{};
  // Looked-up blocks past the cached run, by why the run ended there: its
  // first missing key was never cached here (or long forgotten), or it was
  // cached and has been dropped (evicted from the last tier, orphaned,
  // removed). Counted per lookup: a worker asking twice counts twice.
  uint64_t missed_never_stored = 0;
  uint64_t missed_evicted = 0;
  // Blocks an acquire found but could not hand out: a failed read or
  // checksum on the way up, or no room in the tier asked for.
  uint64_t failed_loads = 0;
};

struct EngineStats {
  std::array<TierStats, kNumTierKinds> tiers;
  std::vector<NamespaceUse> namespace_use;  // indexed by NamespaceId
  uint64_t namespaces = 0;
  uint64_t index_entries = 0;
  uint64_t index_bytes = 0;
  uint64_t pending_blocks = 0;  // allocated, not committed
  uint64_t open_allocations = 0;
  uint64_t open_leases = 0;
  uint64_t lookups = 0;
  uint64_t lookup_keys = 0;
  uint64_t lookup_hits = 0;  // leading keys found by lookups
  uint64_t acquired_blocks = 0;
  uint64_t acquired_tokens = 0;  // tokens of the acquired blocks: prefix tokens not recomputed
  uint64_t committed_blocks = 0;
  uint64_t aborted_blocks = 0;
  uint64_t dropped_blocks = 0;     // left the last tier (evicted or orphaned)
  uint64_t orphan_drops = 0;       // of which dropped because an ancestor went
  uint64_t removed_blocks = 0;     // by Remove()
  uint64_t checksum_failures = 0;  // blocks read back wrong: dropped, never served
  uint64_t io_errors = 0;          // failed reads and writes of io_bound tiers
  // Records of blocks that left the ssd, not deleted because the I/O queue
  // was full. Harmless: at a restart each either still points at its own
  // bytes (restored) or fails its checksum (a miss, dropped).
  uint64_t stale_records = 0;
  // Quantize on demote (NamespaceSpec::quantize_lower).
  uint64_t quantized_blocks = 0;    // blocks encoded to fp8 for the ssd or the remote tier
  uint64_t dequantized_blocks = 0;  // blocks restored from fp8 on their way up
  // Blocks holding NaN or infinity that no fp8 scale can keep: not written
  // below (dropped when they leave memory, so recomputed), never stored
  // as garbage.
  uint64_t quantize_refused = 0;
  uint64_t demotions_dropped = 0;      // dropped instead of demoted (no room, queue full, paused)
  uint64_t moves_in_flight = 0;        // asynchronous moves not yet completed
  bool ssd_paused = false;             // admission to the ssd tier stopped after an error
  uint64_t shadow_blocks = 0;          // write-through copies on the ssd of blocks in memory
  uint64_t write_through_skipped = 0;  // committed blocks not written through (full, paused)
  uint64_t ssd_budget_refused = 0;     // blocks not written to the ssd: its write budget spent
  // With block keys: the ssd tier's blocks by the key that sealed them.
  std::map<uint32_t, uint64_t> ssd_sealed_by_key;
  // The ssd tier's blocks read back and refused, by cause (of checksum_failures).
  std::map<std::string, uint64_t> ssd_rejected_by_cause;
  // Hints (CacheEngine::Hint).
  uint64_t hinted_blocks = 0;    // blocks a hint began to protect
  uint64_t hints_used = 0;       // hinted blocks acquired while protected
  uint64_t hints_expired = 0;    // protections that ran out unused
  uint64_t hints_yielded = 0;    // protections given up so a write or move found room
  uint64_t hints_withdrawn = 0;  // ended otherwise: Unhint, session end, the block removed
                                 // or dropped with an ancestor
  uint64_t hints_refused = 0;    // Hint calls refused: the owner's bound
  uint64_t prefetched_blocks =
      0;  // hinted blocks read from the ssd or the remote tier into the host ahead of use
  uint64_t prefetched_used = 0;  // of which acquired afterwards
  uint64_t hinted_now = 0;       // blocks protected by hints now (a gauge)
  // The remote tier (tiers/remote_tier.h).
  bool remote_present = false;
  std::string remote_description;
  RemoteStats remote;                  // the tier's own counters
  uint64_t remote_lookup_hits = 0;     // blocks lookups found only in the remote tier
  uint64_t remote_fetched_blocks = 0;  // read from it into the host tier by acquires
  uint64_t remote_written_blocks = 0;  // written to it from this node
  uint64_t remote_write_dropped = 0;   // not written: its queue full, paused or failed
  uint64_t remote_in_flight = 0;       // its calls not yet completed (a gauge)
};

// What a Hint did.
struct HintResult {
  size_t protected_blocks = 0;  // the chain's leading present blocks, now protected
  size_t prefetching = 0;       // of which on their way from the ssd to the host
};

class CacheEngine;

// What Allocate did for each key.
enum class WriteState : uint8_t {
  kAllocated,  // a slot is reserved: write the bytes, then Commit
  kExists,     // already cached: nothing to write
  kSkipped,    // not allocated: being written by another, or no room
};

// An open write: RAII, move-only. Destroying it without Commit() aborts.
class Allocation {
 public:
  Allocation() = default;
  Allocation(Allocation&& other) noexcept;
  Allocation& operator=(Allocation&& other) noexcept;
  ~Allocation();

  uint64_t id() const { return id_; }
  bool open() const { return engine_ != nullptr; }
  size_t size() const { return states_.size(); }
  WriteState state(size_t i) const { return states_[i]; }
  size_t allocated() const;
  // REQUIRES: state(i) == kAllocated.
  const BlockLocation& location(size_t i) const { return locations_[i]; }
  // The slot's bytes in this process (empty if the tier is not
  // host-addressable). REQUIRES: open(), state(i) == kAllocated.
  std::span<std::byte> Bytes(size_t i) const;

  // Publishes the allocated blocks. REQUIRES: open().
  Status Commit();
  // Frees the allocated slots. No-op when not open.
  void Abort();

 private:
  friend class CacheEngine;
  CacheEngine* engine_ = nullptr;
  uint64_t id_ = 0;
  uint64_t block_bytes_ = 0;
  std::vector<WriteState> states_;
  std::vector<BlockLocation> locations_;
};

// Pinned blocks for reading: RAII, move-only. Destroying it releases them.
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  ~Lease();

  uint64_t id() const { return id_; }
  bool open() const { return engine_ != nullptr; }
  // The leading present blocks, in key order, all in the acquired tier.
  size_t size() const { return locations_.size(); }
  const BlockLocation& location(size_t i) const { return locations_[i]; }
  // REQUIRES: open().
  std::span<const std::byte> Bytes(size_t i) const;

  void Release();

 private:
  friend class CacheEngine;
  CacheEngine* engine_ = nullptr;
  uint64_t id_ = 0;
  uint64_t block_bytes_ = 0;
  std::vector<BlockLocation> locations_;
};

class CacheEngine {
 public:
  // `host` is required; `device` and `ssd` may be null (no such tier).
  // `remote` may be null (no remote tier); with one, options.remote_io is
  // required.
  static Result<std::unique_ptr<CacheEngine>> Create(const EngineOptions& options,
                                                     std::unique_ptr<Tier> device,
                                                     std::unique_ptr<Tier> host,
                                                     std::unique_ptr<Tier> ssd = nullptr,
                                                     std::unique_ptr<RemoteTier> remote = nullptr);
  ~CacheEngine();
  CacheEngine(const CacheEngine&) = delete;
  CacheEngine& operator=(const CacheEngine&) = delete;

  // Warm restart: registers the namespaces and re-indexes the blocks a
  // persistent ssd tier kept from an earlier run. Blocks whose parent was
  // not kept can never hit and are dropped. Call once, before serving.
  // Returns how many blocks were restored.
  Result<size_t> Recover();

  // Registers a namespace, or returns the id of an identical one.
  // InvalidArgument for a bad layout, or a known (model, salt) with another
  // layout. Namespaces are never removed (they outlive restarts in the ssd
  // tier); a caller that caps them checks namespace_count() and
  // FindNamespace(model, salt) first.
  Result<NamespaceId> AddNamespace(const NamespaceSpec& spec);
  // nullptr if unknown.
  const NamespaceSpec* FindNamespace(NamespaceId ns) const;
  // The id registered for (model, salt), whatever its layout.
  std::optional<NamespaceId> FindNamespace(std::string_view model, std::string_view salt) const;
  size_t namespace_count() const { return namespaces_.size(); }

  // The leading run of `keys` present (committed) and where each block is.
  // Changes no recency.
  Result<LookupResult> Lookup(NamespaceId ns, std::span<const BlockKey> keys);
  // The same into `found`, whose vector keeps its capacity from one call to
  // the next (the daemon's LOOKUP: no allocation a request).
  Status Lookup(NamespaceId ns, std::span<const BlockKey> keys, LookupResult* found);

  // The blocks of `keys` present (each, not only a leading run), which a
  // worker read without a lease (direct reads, common/slot_generations.h):
  // made recent, last key first, and counted as served, as Acquire would,
  // with nothing pinned or moved. How many.
  Result<size_t> Touch(NamespaceId ns, std::span<const BlockKey> keys);

  // Like Lookup, and where the local run ends short of the chain, asks the
  // remote tier (on remote_io) for the rest: those blocks follow in the
  // result as kRemote. `done` runs on the engine's thread; at once without
  // a remote tier or when there is nothing to ask.
  void LookupAsync(NamespaceId ns, std::span<const BlockKey> keys,
                   std::function<void(Result<LookupResult>)> done);
  // Whether there is a remote tier (LookupAsync and AcquireAsync may wait).
  bool has_remote() const { return remote_ != nullptr; }

  // Reserves slots in `tier` for the blocks of a chain. `parent` is the key
  // before keys[0] (nullopt: keys[0] starts a prompt); when given it must be
  // cached, and it and every already-cached key of the chain stay pinned
  // until Commit or Abort. Keys are handled in order: a cached key is
  // kExists; a missing key gets a slot (evicting if needed); a key being
  // written by someone else, or one that finds no room, is kSkipped with
  // every key after it. ResourceExhausted if room was needed and none could
  // be made for even the first missing block.
  Result<Allocation> Allocate(NamespaceId ns, std::optional<BlockKey> parent,
                              std::span<const BlockKey> keys, TierKind tier);

  // Pins the leading present blocks of `keys` and moves each one not in
  // `tier` there. The lease stops before a block that cannot move: no room
  // in `tier`, or pinned in another tier by someone else.
  // Blocks on an io_bound tier (ssd) end the lease here: use AcquireAsync.
  Result<Lease> Acquire(NamespaceId ns, std::span<const BlockKey> keys, TierKind tier);

  // Like Acquire, but blocks only on an io_bound tier are promoted into
  // `tier` by the IoExecutor, and `done` runs (on the engine's thread) once
  // every promotion has finished: at once if none was needed. A block that
  // fails to come back (checksum mismatch, I/O error) ends the lease there;
  // while it moves, it stays visible where it was. With a remote tier, the
  // blocks after the local run that the cluster holds are first read into
  // the host tier (found, then read, on remote_io): a block missing, wrong
  // or not read ends the run there.
  void AcquireAsync(NamespaceId ns, std::span<const BlockKey> keys, TierKind tier,
                    std::function<void(Result<Lease>)> done);

  // Retention (TensorRT-LLM's semantics, DESIGN.md §4): gives each present
  // block of `keys` its priority (0-100, lower goes first), falling back to
  // the default at its expiry (eviction::kNoExpiry: never). REQUIRES:
  // priorities.size() == expires_at.size() == keys.size(). Returns how many
  // blocks were found and updated.
  Result<size_t> SetRetention(NamespaceId ns, std::span<const BlockKey> keys,
                              std::span<const uint8_t> priorities,
                              std::span<const TimeNs> expires_at);

  // Hints: `owner` (a worker's session) will soon run a request whose
  // chain is `keys`. The leading present blocks of the chain are protected
  // from eviction until `until` (the engine's clock), until the hint is
  // used, or until the owner withdraws it; those on an io_bound tier (the
  // ssd) are read into the host tier ahead of use, and so are the blocks
  // past the local run that the remote tier holds (then protected too, as
  // they arrive). Hints count: a block
  // hinted for two waiting requests (a shared prefix) stays protected until
  // both have used their hint; each acquire of a hinted block uses one hint
  // on it (whoever acquires: the process that reads a request's blocks need
  // not be the one that hinted it).
  // Protection is soft: when a tier is full of pinned and hinted blocks, a
  // write or move that needs room ends the protection of the hinted block
  // whose nearest request is furthest ahead (its earliest hint expires
  // last; the nearest requests' blocks are worth most), so hints never make
  // a write fail. A block
  // whose protection ends unused rejoins its policy as after an unpin (as
  // recently used). Keys never
  // cached are ignored. ResourceExhausted, with nothing changed, when the
  // owner would protect more than max_hinted_blocks_per_owner blocks.
  Result<HintResult> Hint(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys,
                          TimeNs until);
  // Withdraws one of the owner's hints on each block of `keys` (the request
  // left the queue). Returns how many blocks it withdrew a hint from.
  Result<size_t> Unhint(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys);
  // Withdraws every hint of the owner (its session ended).
  void DropHints(uint64_t owner);
  // Blocks the owner protects with hints now.
  uint64_t hinted_by(uint64_t owner) const;

  // Removes committed blocks (and, like any drop, their unpinned
  // descendants). A leased block disappears from lookups at once and is
  // freed at its last release. Returns how many of `keys` were removed.
  Result<size_t> Remove(NamespaceId ns, std::span<const BlockKey> keys);

  EngineStats Stats() const;

  // Moves the block events recorded since the last call (record_events)
  // into `out` (cleared first), in the order they happened.
  void TakeEvents(std::vector<BlockEvent>* out);

  // nullptr when the tier is absent.
  Tier* tier(TierKind kind) { return tiers_[Index(kind)].get(); }
  const Tier* tier(TierKind kind) const { return tiers_[Index(kind)].get(); }

  // Checks every internal invariant (tests). O(blocks).
  Status CheckInvariants() const;

 private:
  friend class Allocation;
  friend class Lease;

  using EntryId = prefix_index::EntryId;

  // kArriving: committed, on its way into an io_bound tier; invisible
  // until the write completes.
  enum class State : uint8_t { kPending, kReady, kDoomed, kArriving };

  // Per-block state, indexed by the index's EntryId, widest fields first
  // (56 bytes). It holds all its policy is told (MetaOf reads nothing
  // else: reading the index's node for the namespace and key was one more
  // cache miss per policy call in a tier larger than the caches).
  struct Block {
    TimeNs priority_until = eviction::kNoExpiry;
    uint64_t checksum = 0;     // from the io_bound tier's WriteBlock
    uint64_t fingerprint = 0;  // BlockMeta::fingerprint: PolicyFingerprint of its key
    NamespaceId ns = 0;        // as index_.ns()
    SlotId slot = 0;
    uint32_t pins = 0;
    uint32_t children_in_tier = 0;  // children living in this block's tier
    SlotId shadow = 0;              // the slot of its ssd copy, with has_shadow
    TierKind tier = TierKind::kHost;
    State state = State::kPending;
    uint8_t priority = eviction::kDefaultPriority;
    bool promoting = false;  // a read out of an io_bound tier is in flight
    // Write-through: a copy on the ssd while the block lives in memory.
    bool has_shadow = false;
    bool shadow_pending = false;  // its write is in flight (the block is pinned)
    bool hinted = false;          // protected by hints (hints_ has its owners)
    bool prefetched = false;      // read ahead by a hint (ssd, remote), not acquired since
    bool in_remote = false;       // written to (or read from) the remote tier: not written again
    bool from_remote = false;     // read from the remote tier, not acquired since
    // The form of its ssd copy (the block on the ssd, or its shadow).
    Quantize stored = Quantize::kOff;
  };
  static_assert(sizeof(Block) == 56);

  // The hints protecting one block: each owner with its count of hints on
  // it (one per request hinted), and when the last expires.
  struct HintState {
    TimeNs until = 0;    // the latest hint's expiry: protected until then
    TimeNs soonest = 0;  // the earliest: its nearest request, for YieldHint's order
    std::vector<std::pair<uint64_t, uint32_t>> owners;
  };

  // A promotion out of an io_bound tier: where the block goes, and the
  // asynchronous acquires waiting for it.
  struct Promotion {
    TierKind to = TierKind::kHost;
    SlotId slot = 0;
    std::vector<uint64_t> waiters;
    bool upload = false;  // from a memory tier into a copies_async() one, not a read from disk
  };

  // An AcquireAsync waiting for promotions.
  struct PendingAcquire {
    NamespaceId ns = 0;
    TierKind tier = TierKind::kHost;
    std::vector<EntryId> run;
    size_t outstanding = 0;
    std::function<void(Result<Lease>)> done;
  };

  struct AllocationRecord {
    NamespaceId ns = 0;
    std::vector<EntryId> pending;  // in chain order
    std::vector<EntryId> pinned;   // parent and kExists keys
  };

  CacheEngine(const EngineOptions& options, std::unique_ptr<Tier> device,
              std::unique_ptr<Tier> host, std::unique_ptr<Tier> ssd,
              std::unique_ptr<RemoteTier> remote);

  // ---- the core (cache_engine.cc)
  static size_t Index(TierKind kind) { return static_cast<size_t>(kind); }
  Status CheckNamespace(NamespaceId ns) const;
  // Before `more` inserts into the index: keeps its table at most half full.
  void MakeIndexRoom(size_t more = 1);
  // A new block's entry in blocks_, for `key` of `ns` just inserted in the
  // index as `id`.
  Block& NewBlock(EntryId id, NamespaceId ns, const BlockKey& key);
  // A block's fingerprint for its policy (BlockMeta::fingerprint): the same
  // in the tier's Insert as in the lookups' chains (Referenced), so that an
  // adaptive policy can tell which of the tier's blocks it samples.
  static uint64_t PolicyFingerprint(NamespaceId ns, const BlockKey& key);
  // Hands a lookup's chain to the policies that simulate (Referenced).
  void TellReferences(NamespaceId ns, std::span<const BlockKey> keys);
  // A tier that blocks can be allocated in and acquired into.
  Status CheckTarget(TierKind kind) const;
  // A block's bytes in memory (the namespace's layout).
  uint64_t BlockBytes(EntryId id) const;
  // Its bytes in the ssd when kept in form `q`, and in the tier it is in.
  uint64_t StoredBytes(NamespaceId ns, Quantize q) const;
  uint64_t BytesInTier(EntryId id) const;
  // The namespace's layout, and the fp8 form its blocks go down in.
  const Layout& LayoutOf(NamespaceId ns) const { return namespaces_[ns].layout; }
  Quantize LowerForm(NamespaceId ns) const { return namespaces_[ns].quantize_lower; }
  eviction::BlockMeta MetaOf(EntryId id) const;
  eviction::EvictionPolicy& PolicyOf(TierKind kind) { return *policies_[Index(kind)]; }
  BlockLocation LocationOf(EntryId id) const;
  std::optional<TierKind> LowerTier(TierKind kind) const;
  std::span<std::byte> BytesAt(const BlockLocation& loc, uint64_t bytes);
  // tell_policy false: the caller tells the block's policy itself, at once
  // (a Touch carrying the pinned state), before anything may ask it for a
  // victim.
  void Pin(EntryId id, bool tell_policy = true);
  // Drops the block if it became an unpinned orphan or doomed block.
  void Unpin(EntryId id);
  // Reserves a slot in `kind`, evicting victims until one is free; when
  // every block left is pinned or hinted, ends hint protections (unless
  // `yield_hints` is false: a prefetch never evicts another hint's block).
  // With `admit` (a new block's fingerprint), the tier's admission filter
  // and the one its policy follows decide whether it may take each victim's
  // room: ResourceExhausted when not, and *kept_out (if given) set true.
  Result<SlotId> MakeRoom(TierKind kind, uint64_t bytes, bool yield_hints = true,
                          std::optional<uint64_t> admit = std::nullopt, bool* kept_out = nullptr);
  // Whether the block of fingerprint `candidate` may take `victim`'s room in
  // the full tier `kind`: its own filter's say, then its policy's.
  bool Admitted(TierKind kind, uint64_t candidate, uint64_t victim);
  // Whether the ssd's admission filter lets block `id`, leaving the host,
  // be written to it (EngineOptions::ssd_admission); counts a refusal.
  bool SsdAdmits(EntryId id);
  // Whether the ssd's write budget has `bytes` left now (refilling it
  // first); false counts a refusal. SpendSsdBudget takes them once written.
  bool SsdBudgetAllows(uint64_t bytes);
  void SpendSsdBudget(uint64_t bytes);
  // Moves the victim to the next tier down, or drops it from the last.
  void Evict(EntryId id);
  // Copies the block into `to` and frees its old slot. REQUIRES: pinned.
  Status Move(EntryId id, TierKind to);
  // Removes an unpinned block and, iteratively, its unpinned descendants.
  void Drop(EntryId id);
  // Tier-membership bookkeeping shared by allocate, move and drop.
  void EnterTier(EntryId id, TierKind kind, SlotId slot);
  // `free_slot` false keeps the slot (it becomes the block's shadow).
  void LeaveTier(EntryId id, bool free_slot = true);
  void AdjustParentChildren(EntryId id, TierKind kind, int delta);

  // ---- the read path (lookup_acquire.cc)
  // Pins the leading visible blocks of `keys` and touches them, tail first.
  std::vector<EntryId> PinLeadingRun(NamespaceId ns, std::span<const BlockKey> keys);
  // The leading run of `keys` present (visible).
  std::vector<EntryId> LeadingRun(NamespaceId ns, std::span<const BlockKey> keys) const;
  // A run served to a worker: its policies touched (last block first), the
  // hits counted.
  void Served(NamespaceId ns, std::span<const EntryId> run);
  // AcquireAsync over what this node holds (the remote tier's part done).
  void AcquireLocal(NamespaceId ns, std::span<const BlockKey> keys, TierKind tier,
                    std::function<void(Result<Lease>)> done);
  void FinishAcquire(uint64_t pending_id);
  // Builds the lease of a pinned run: stops before the first block not in
  // `kind`, unpinning the rest.
  Lease MakeLease(NamespaceId ns, std::vector<EntryId> run, TierKind kind);
  void ReleaseLease(uint64_t id);

  // ---- the write path (writes.cc)
  Status CommitAllocation(uint64_t id);
  void AbortAllocation(uint64_t id);

  // ---- asynchronous moves: the ssd, async copies (moves.cc)
  // Moves an evicted block into the io_bound tier `to`: copies it out,
  // frees its slot at once, and writes it on the IoExecutor. False when it
  // cannot (no room, queue full, admission paused); the caller drops it.
  bool DemoteAsync(EntryId id, TierKind to);
  void OnDemoted(EntryId id, Status status);
  // A copy of a block's bytes in memory, made now (demotions and writes to
  // the ssd or the remote tier go from it, off the engine's thread).
  Status CopyOut(EntryId id, std::shared_ptr<std::vector<std::byte>>* out);
  // The I/O work that writes block `id` (copied out of memory now) to
  // `slot` of the io_bound tier `to`, in its namespace's lower form (encoded
  // on the I/O thread), the tier's checksum landing in *checksum. Marks the
  // block's ssd copy with that form. Empty when the copy failed.
  IoExecutor::Work SsdWriteWork(EntryId id, TierKind to, SlotId slot,
                                std::shared_ptr<uint64_t> checksum);
  // Starts reading a block out of its io_bound tier into `to`, for the
  // pending acquire `waiter` (0: a hint's prefetch, which nobody waits
  // for). False when it cannot start.
  bool StartPromotion(EntryId id, TierKind to, uint64_t waiter);
  // Whether moving `id` to `to` runs as an asynchronous promotion.
  bool PromotesAsync(EntryId id, TierKind to) const;
  // A block being promoted elsewhere cannot be leased where it is: the
  // promotion frees that slot when it lands.
  bool LeavingFor(EntryId id, TierKind kind) const;
  void OnPromoted(EntryId id, Status status);
  BlockInfo InfoOf(EntryId id) const;
  void IoFailed(const Status& status, bool pause, const char* what);
  // Quantize on demote's failures (on the engine's thread): a block that
  // could not be encoded (NaN, infinity), or decoded (a corrupt stored block).
  void QuantizeRefused(EntryId id, const Status& status);

  // ---- write-through (write_through.cc)
  // Starts writing a committed block's shadow copy.
  void StartShadow(EntryId id);
  void OnShadowWritten(EntryId id, Status status, uint64_t checksum);
  // Frees a block's shadow copy, if any.
  void FreeShadow(EntryId id);

  // ---- warm restart (recovery.cc)
  // The engine's namespace of an io_bound tier's namespace id, registering
  // it from the tier's table if no worker has attached to it yet.
  std::optional<NamespaceId> NamespaceForTierId(uint32_t tier_ns);

  // ---- hints (hints.cc)
  // Hint without the remote tier's read-ahead.
  Result<HintResult> HintLocal(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys,
                               TimeNs until);
  // Ends the hint protection of `id` (every owner), counting it in `counter`.
  void ReleaseHint(EntryId id, uint64_t* counter);
  // Ends the protections that have run out.
  void ExpireHints();
  // Ends the protection of the unpinned hinted block in `kind` whose
  // earliest hint expires last (it serves no request before the others'
  // blocks do). False when there is none.
  bool YieldHint(TierKind kind);
  // Counts hinted and prefetched blocks of an acquired run as used.
  void HintsUsed(std::span<const EntryId> run);

  // ---- the remote tier (remote.cc)
  // Where the local run of `keys` ends, if the remote tier may hold the
  // rest: the index of the first key not cached here at all. Always
  // nullopt without a remote tier (or while it is paused), so that nothing
  // else of this section runs on such a node.
  std::optional<size_t> RemoteStart(NamespaceId ns, std::span<const BlockKey> keys) const;
  // LookupAsync's remote part: how many of `rest` (the chain past the local
  // run) the cluster holds, appended to `local` as kRemote.
  void LookupRemote(NamespaceId ns, std::span<const BlockKey> rest, LookupResult local,
                    std::function<void(Result<LookupResult>)> done);
  // AcquireAsync's remote part: reads what the cluster holds of keys[from..]
  // into the host tier, then runs AcquireLocal over the whole chain.
  void AcquireWithRemote(NamespaceId ns, std::span<const BlockKey> keys, size_t from, TierKind kind,
                         std::function<void(Result<Lease>)> done);
  // Asks the remote tier how many of (*chain)[from..] it holds, reads those
  // into the host tier (committed, visible), then calls then(read) on the
  // engine's thread, read being how many arrived (0 also when the cluster
  // held none or the queue was full).
  using Chain = std::shared_ptr<const std::vector<BlockKey>>;
  void FetchRemote(NamespaceId ns, Chain chain, size_t from, std::function<void(size_t)> then);
  void ReadRemote(NamespaceId ns, Chain chain, size_t from, size_t count,
                  std::function<void(size_t)> then);
  // When the leading run of `keys` reaches a host slot being filled from
  // the remote tier (ReadRemote, for an acquire or a hint's read-ahead),
  // queues `then` to run once that read is done and returns true; false
  // (and `then` untouched) otherwise. A lookup or acquire of a chain being
  // read in waits for it rather than stop short there.
  bool WaitForRemoteRead(NamespaceId ns, std::span<const BlockKey> keys,
                         std::function<void()>& then);
  // Runs the waiters of remote read `read` (an allocation id).
  void RemoteReadDone(uint64_t read);
  // A hint's read-ahead from the remote tier: fetches what the cluster holds
  // past the chain's local run, then hints those blocks for `owner` too,
  // unless its hints were dropped meanwhile.
  void PrefetchRemote(uint64_t owner, NamespaceId ns, std::span<const BlockKey> keys, TimeNs until);
  // Writes a block to the remote tier from a copy of its bytes (made now),
  // unless it is there already.
  void WriteRemote(EntryId id);
  // Submits remote work, counting it in flight. False when the queue is full.
  bool SubmitRemote(IoExecutor::Work work, IoExecutor::Done done);

  // ---- block events (events.cc)
  // Records an event (record_events) of `id` in `tier`.
  void Emit(BlockEvent::Kind kind, EntryId id, TierKind tier);

  const Clock& clock_;
  std::array<std::unique_ptr<Tier>, kNumTierKinds> tiers_;
  std::array<std::unique_ptr<eviction::EvictionPolicy>, kNumTierKinds> policies_;
  bool references_wanted_ = false;  // a policy or filter wants Referenced()
  // Each tier's admission filter (null: every block admitted), the ones made
  // by name owned here; and the tier size each was last told (SetCapacity).
  std::array<std::unique_ptr<eviction::AdmissionFilter>, kNumTierKinds> owned_admission_;
  std::array<eviction::AdmissionFilter*, kNumTierKinds> admission_{};
  std::array<size_t, kNumTierKinds> admission_sized_{};
  internal::ChainFingerprints chains_;     // TellReferences' fingerprints
  std::vector<EntryId> drop_stack_;        // Drop's scratch
  std::vector<NamespaceSpec> namespaces_;  // indexed by NamespaceId
  std::vector<NamespaceUse> ns_use_;       // indexed by NamespaceId
  std::vector<EntryId> lookup_ids_;        // Lookup's, reused (no allocation a call)
  // Fingerprints of dropped blocks, direct-mapped (a newer one overwrites an
  // older): tells a miss of an evicted block from one of a block never
  // stored, in bounded memory (NamespaceUse).
  std::vector<uint64_t> dropped_;
  void RememberDropped(EntryId id);
  bool WasDropped(NamespaceId ns, const BlockKey& key) const;
  std::vector<uint64_t> block_bytes_;  // indexed by NamespaceId
  std::vector<uint32_t> tier_ns_;      // the io_bound tier's id of each namespace
  // False for a namespace restored from the ssd that no worker has attached
  // to yet: the first AddNamespace for it sets its quantize_lower.
  std::vector<bool> ns_decided_;
  prefix_index::PrefixIndex index_;
  size_t index_room_ = 0;     // entries the index holds at most half full (MakeIndexRoom)
  PageVector<Block> blocks_;  // indexed by EntryId (PageAllocator: grows with the blocks)
  std::unordered_map<uint64_t, AllocationRecord> allocations_;
  std::unordered_map<uint64_t, std::vector<EntryId>> leases_;
  uint64_t next_handle_id_ = 1;
  uint64_t pending_blocks_ = 0;
  IoExecutor* io_ = nullptr;
  IoExecutor* copy_ = nullptr;  // options.copy, else io_
  TimeNs ssd_pause_ns_ = 0;
  TimeNs ssd_paused_until_ = 0;
  // The ssd's write budget (EngineOptions::ssd_write_budget_per_day): bytes
  // per day, 0 = none; the bucket's bytes and when it was last refilled.
  uint64_t ssd_budget_per_day_ = 0;
  double ssd_budget_bytes_ = 0;
  TimeNs ssd_budget_at_ = 0;
  std::unordered_map<EntryId, Promotion> promotions_;
  std::unordered_map<uint64_t, PendingAcquire> pending_acquires_;
  uint64_t moves_in_flight_ = 0;
  bool write_through_ = false;
  uint64_t shadows_ = 0;
  uint64_t ssd_pauses_ = 0;
  Status last_io_error_;
  std::function<void(const std::string&)> log_;
  // The remote tier: the tier, its executor, each namespace as every node
  // names it (indexed by NamespaceId), its calls in flight.
  std::unique_ptr<RemoteTier> remote_;
  IoExecutor* remote_io_ = nullptr;
  bool remote_write_through_ = false;
  std::vector<RemoteNamespace> remote_ns_;
  uint64_t remote_in_flight_ = 0;
  bool record_events_ = false;
  std::function<void()> events_ready_;
  std::vector<BlockEvent> events_;
  // Rate limiting of log lines: when each kind last logged, and how many
  // events it has not reported since.
  struct LogLimit {
    TimeNs last = INT64_MIN;
    uint64_t unreported = 0;
  };
  LogLimit checksum_log_, io_log_, copy_log_, quantize_log_;
  void LogLimited(LogLimit& limit, const std::string& line);
  std::array<uint64_t, kNumTierKinds> pinned_in_tier_{};
  // Hints: per hinted block, its owners; the hinted blocks by expiry; how
  // many blocks each owner protects.
  uint64_t max_hinted_per_owner_ = 0;
  std::unordered_map<EntryId, HintState> hints_;
  std::set<std::pair<TimeNs, EntryId>> hint_expiry_;  // by HintState::until
  std::set<std::pair<TimeNs, EntryId>> hint_order_;   // by HintState::soonest
  // Remote read-aheads under way per hinting owner; DropHints forgets the
  // owner, so that what arrives later is not hinted for it.
  std::unordered_map<uint64_t, uint32_t> remote_prefetches_;
  // Host slots being filled from the remote tier, by the allocation (read)
  // filling them, and what waits for each read (WaitForRemoteRead).
  std::unordered_map<EntryId, uint64_t> remote_reading_;
  std::unordered_map<uint64_t, std::vector<std::function<void()>>> remote_read_waiters_;
  std::unordered_map<uint64_t, uint64_t> hinted_per_owner_;
  EngineStats stats_;  // counters; gauges are filled in by Stats()
};

}  // namespace kvtier::engine

// EvictionPolicy: which block of a tier goes next, decided from metadata
// alone (DESIGN.md §4). A policy knows no storage, no keys, no sockets.
//
// The engine keeps one policy per tier and tells it what happens to the
// blocks of that tier: Insert when a block enters, Touch on a hit, Update
// when its metadata changes without an access (pinned, children, priority),
// Erase when it leaves. Victim() names the next block to move down; the
// engine moves it and then calls Erase. Children that come and go while a
// block is pinned are told with its unpin (a pinned block is no victim,
// whatever its children): until then its children_in_tier is as last told.
//
// Every policy honours the same contract (tests/eviction/policy_contract_test.cc):
// a pinned block is never a victim; Victim() is nullopt only when no tracked
// block is evictable; an erased block is never named again.
//
// Thread-safety: none; a policy is confined to the engine's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "eviction/admission.h"

namespace kvtier::eviction {

// The engine's dense id of a block; stable while the block is tracked.
using BlockId = uint32_t;

inline constexpr uint8_t kMinPriority = 0;
inline constexpr uint8_t kMaxPriority = 100;
// TensorRT-LLM's default retention priority.
inline constexpr uint8_t kDefaultPriority = 35;
inline constexpr TimeNs kNoExpiry = INT64_MAX;

struct BlockMeta {
  uint64_t size_bytes = 0;
  // Retention priority 0-100: lower goes first. Falls back to
  // kDefaultPriority at priority_expires_at.
  uint8_t priority = kDefaultPriority;
  TimeNs priority_expires_at = kNoExpiry;
  // Leased or being written: never a victim while set.
  bool pinned = false;
  // Children of this block cached in the same tier. A prefix-aware policy
  // keeps blocks with children, since a child without its parent never hits.
  uint32_t children_in_tier = 0;
  // A stable fingerprint of the block's key (its hash, say), or 0 when not
  // known. The engine reuses ids after Erase, so a policy that remembers
  // blocks it no longer tracks (S3-FIFO's ghost queue) matches id and
  // fingerprint; with 0 it matches by id alone and a reused id may be taken
  // for the block that held it before.
  uint64_t fingerprint = 0;
};

// One candidate of an adaptive policy, as STATS and metrics show it.
struct CandidateReport {
  std::string name;
  // Hits over references to the sampled keys in the candidate's miniature
  // cache, recent ones weighing most (an exponential moving average).
  double sampled_hit_rate = 0;
  // The same over every sampled reference since the policy began, nothing
  // decayed or restarted: comparable with the hit rate a replay reports.
  double overall_sampled_hit_rate = 0;
  bool followed = false;
};

struct AdaptiveReport {
  std::vector<CandidateReport> candidates;
  uint64_t switches = 0;         // times the followed candidate changed
  uint64_t sampled_refs = 0;     // block references the miniature caches saw
  uint64_t sample_stride = 1;    // one key in sample_stride is sampled
  uint64_t sample_capacity = 0;  // blocks each miniature cache holds
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;

  // REQUIRES: id not tracked.
  virtual void Insert(BlockId id, const BlockMeta& meta) = 0;
  // The block was accessed. REQUIRES: id tracked.
  virtual void Touch(BlockId id, const BlockMeta& meta) = 0;
  // The block's metadata changed without an access. REQUIRES: id tracked.
  virtual void Update(BlockId id, const BlockMeta& meta) = 0;
  // REQUIRES: id tracked.
  virtual void Erase(BlockId id) = 0;

  // The next block to evict, or nullopt when no tracked block may be
  // evicted. Does not stop tracking it.
  virtual std::optional<BlockId> Victim() = 0;

  // Tracked blocks, pinned or not.
  virtual size_t size() const = 0;

  // Whether the policy wants Referenced(); the engine computes nothing for
  // the policies that do not.
  virtual bool wants_references() const { return false; }
  // A lookup asked for this chain of blocks: the fingerprints of its keys,
  // first block first, whether cached or not. The engine's Insert and Touch
  // tell only what it serves or writes; this is the demand itself (a policy
  // that simulates other policies needs it). Called before the lookup's
  // other effects.
  virtual void Referenced(std::span<const uint64_t> chain) { (void)chain; }

  // Whether the tier's victims go to a tier below (true) or are dropped
  // with their descendants (false, the default: the last tier). A policy
  // that simulates others may judge them differently.
  virtual void SetVictimsDemoted(bool demoted) { (void)demoted; }
  // Whether a tier above demotes its victims into this one. With either, a
  // block's chain spans tiers, which a policy judging its own tier alone
  // does not see (adaptive follows no leaf-first candidate then).
  virtual void SetBelowAnotherTier(bool below) { (void)below; }

  // Whether the policy may filter admission to its tier (admission(): an
  // adaptive policy with a candidate that filters); the engine computes a
  // new block's fingerprint for it only then.
  virtual bool filters_admission() const { return false; }
  // The admission filter the policy follows now, or null: the engine asks it
  // (after the tier's own filter, if any) whether a block not in the full
  // tier may take the victim's room, as it asks the tier's own.
  virtual AdmissionFilter* admission() { return nullptr; }

  // The adaptive policy starts following this policy, rebuilt from the
  // tier's blocks, after `simulated` (the same policy, in the candidate's
  // miniature cache) led: a policy that learns (learned) takes what that one
  // learned instead of starting from nothing. The others ignore it.
  virtual void Inherit(const EvictionPolicy& simulated) { (void)simulated; }

  // Whether the order it evicts in, until its first Victim(), is the order
  // its blocks last joined it (inserted or unpinned, or touched; a block
  // with children_in_tier > 0 as its own policy reads it), and nothing
  // else: LRU, and leaf first over LRU. The adaptive policy makes such a
  // candidate's miniature cache only when it first needs to evict
  // (internal/mini_caches.h, "The prelude").
  virtual bool recency_ordered() const { return false; }

  // What an adaptive policy follows and why; nullopt for the others.
  virtual std::optional<AdaptiveReport> adaptive_report() const { return std::nullopt; }
};

// Least recently used: the block whose last Touch (or Insert, or unpin) is
// oldest goes first.
std::unique_ptr<EvictionPolicy> NewLruPolicy();

struct LfuOptions {
  // Time for the weight of an access to halve (ns, > 0). Shorter forgets
  // popularity sooner and behaves more like LRU; longer keeps old heat and
  // behaves more like plain LFU, slow to let go of yesterday's hot prefix.
  TimeNs half_life = 60 * kNsPerSec;
};

// LFU with aging: the block with the lowest decayed access count goes first,
// where each access (Insert or Touch) counts 1 and halves every half_life of
// `clock`; equal counts go least recently used first. O(log n) per
// operation. `clock` must outlive the policy.
std::unique_ptr<EvictionPolicy> NewLfuPolicy(const Clock& clock, LfuOptions options = {});

struct S3FifoOptions {
  // Share of the unpinned blocks the small (probationary) FIFO may hold
  // before eviction turns to the main FIFO; the paper's 10 %.
  double small_fraction = 0.10;
  // Ghost entries (evicted ids remembered, no data) as a share of the
  // tracked blocks; the paper's 90 %.
  double ghost_fraction = 0.90;
};

// S3-FIFO (Yang et al., SOSP'23): new blocks enter a small FIFO and leave it
// for the ghost FIFO unless touched there, in which case they move to the
// main FIFO, a 2-bit CLOCK; a block inserted while its id is a ghost (same
// fingerprint) enters main directly. Amortised O(1) per operation.
std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(S3FifoOptions options = {});

// Priority retention with TensorRT-LLM's semantics: the lowest effective
// priority goes first, least recently used first within a priority; a
// priority counts as kDefaultPriority once priority_expires_at <= clock.Now().
// O(log n) per operation. `clock` must outlive the policy.
std::unique_ptr<EvictionPolicy> NewPriorityPolicy(const Clock& clock);

struct LearnedOptions {
  // Unpinned blocks drawn at random per eviction; the one predicted to be
  // needed furthest ahead goes.
  uint32_t sample = 16;
  // Labelled samples between fits, and the latest ones each fit reads.
  uint32_t refit = 2048;
  uint32_t window = 4096;
  // A drawn block is labelled by whether it is accessed again within this
  // many times the tracked blocks' worth of accesses.
  double horizon = 4.0;
  uint64_t seed = 0x6c65'6172'6e65'6421ULL;  // the draws' (replays repeat)
};

// Learned (after LRB, Song et al., NSDI'20): predicts for each drawn block
// the chance that it is not needed within the horizon, with a few
// regression trees over its recent access intervals, accesses and
// children, trained online on the tier's own history (a drawn block
// labelled by whether its key is accessed again in time), and evicts the
// likeliest. Sampled LRU until the first fit. O(sample) per
// Victim(), O(1) otherwise, plus a fit of well under a millisecond every
// `refit` evictions.
std::unique_ptr<EvictionPolicy> NewLearnedPolicy(LearnedOptions options = {});

// Leaf first (prefix-aware): `inner` decides among blocks without children
// in the tier; a block with children_in_tier > 0 is never a victim, as if
// pinned, and rejoins `inner` (as after an unpin) when it becomes a leaf.
// When every leaf is pinned, Victim() is nullopt. Named "leaf-<inner>".
std::unique_ptr<EvictionPolicy> NewLeafFirst(std::unique_ptr<EvictionPolicy> inner);

struct AdaptiveOptions {
  // The candidates, by NewPolicy() name, each optionally with an admission
  // filter ("lru/seen": LRU, and a block enters the full tier only if the
  // filter named after the slash, of AdmissionNames(), admits it; without
  // one every block is admitted); the first is followed until the
  // samples favour another. Priority retention applies on top of all. LRU
  // first: where the samples cannot tell the candidates apart, the policy
  // is the one a user would otherwise have run. A candidate reads of a
  // block's metadata pinned, priority and expiry, and (leaf first) whether
  // children_in_tier is 0, nothing more, as every policy NewPolicy() makes
  // does: the followed one hears of an Update only when that changes, and
  // a rebuilt one gets children_in_tier as 0 or 1.
  // "learned" and "leaf-learned" are not among the defaults: on the traces
  // the project carries they trailed LRU (docs/eviction.md, "A learned
  // candidate"), and added 10-60 % to the cost per reference; name them
  // ("adaptive:lru+leaf-lru+learned", NewPolicy) where the traffic repeats
  // what recency misses (a loop over more than the tier holds).
  std::vector<std::string> candidates = {"lru", "leaf-lru", "s3fifo", "lru/seen", "leaf-lru/seen"};
  // Blocks each miniature cache aims to hold: the sampling rate is about
  // sample_blocks / (the tier's largest size), at most 1 / min_stride (the
  // miniature caches' cost: 1 in 8 cost 1.4-1.9x LRU's time in replay, 1 in
  // 16 1.3-1.6x, and chose as well on the recorded traces).
  uint64_t sample_blocks = 2048;
  uint64_t min_stride = 16;  // a power of two
  // ... except in a tier so small that a miniature cache would hold fewer
  // than this many keys: there the rate is raised (up to every key). With
  // one or two keys a miniature cache cannot show a candidate dropping the
  // block before the one it writes under (a coding-agent session replayed
  // alone in 25 blocks lost 1.4 points to leaf-first LRU); tiers that small
  // are cheap to sample whole.
  uint64_t min_sample_blocks = 8;
  // The lead a candidate needs over the followed one, in sampled hits as a
  // share of the sampled references, before the policy switches to it ...
  double margin = 0.003;
  // ... at this many decisions in a row (one per eighth of a turnover of a
  // miniature cache).
  uint32_t streak = 1;
};

// Adaptive: runs a miniature simulation of each candidate on a hash-sampled
// subset of the keys the lookups ask for (Waldspurger et al., "Cache
// Modeling and Optimization using Miniature Simulations", ATC'17) and evicts
// as the candidate with the best recent sampled hit rate would, switching
// when another leads by `margin`. Blocks whose retention priority is not the
// default are ordered by priority first, as NewPriorityPolicy. Named
// "adaptive". `clock` must outlive the policy.
Result<std::unique_ptr<EvictionPolicy>> NewAdaptivePolicy(const Clock& clock,
                                                          AdaptiveOptions options = {});

// The names NewPolicy() accepts (and any "adaptive:<candidates>").
std::span<const std::string_view> PolicyNames();

// A policy by its configuration name: "adaptive", or "lru", "lfu", "s3fifo",
// "priority", "learned", each also as "leaf-<name>" (NewLeafFirst around
// it), or "adaptive:<candidates>": adaptive with AdaptiveOptions::candidates
// of its own, joined by '+' ("adaptive:lru+leaf-lru+learned"). `clock` must
// outlive it.
Result<std::unique_ptr<EvictionPolicy>> NewPolicy(std::string_view name, const Clock& clock);

// Ok if NewPolicy() makes a policy of `name`, else its InvalidArgument.
Status CheckPolicyName(std::string_view name);

}  // namespace kvtier::eviction

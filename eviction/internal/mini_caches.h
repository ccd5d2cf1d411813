// MiniCaches: the adaptive policy's miniature simulations (adaptive_policy.cc
// says why and how they decide): one MiniCache per candidate, all on the
// same hash-sampled keys of the chains the lookups ask for, sharing one
// SampleIndex, with each candidate's score: its sampled hits, decayed, and
// its lead over the followed candidate. The policy decides from the
// scores; this class keeps them and the sampling rate.
//
// The prelude. Until the tier first needs room every candidate keeps every
// key it is asked for: all hit alike, and only the order each would evict
// in differs. Running them all then costs as much as it does later, for
// nothing but that order, in a daemon whose tier has not filled (a new one,
// a large ssd): on the control-plane benchmark, where the tier never fills,
// the miniature caches took 29 % of kvtierd's instructions a LOOKUP. Where
// the order is the recency order (EvictionPolicy::recency_ordered: LRU,
// leaf-first LRU and their filtered variants, four of the five default
// candidates) a candidate's cache is not run until Start(): the prelude
// keeps each sampled key once, with its sampled parent and when it last
// joined the recency order (as the engine serves a request: the run read
// last block first, then the new blocks committed last first, then their
// parent), and scores those candidates with its leading run; Start() makes
// each of their caches from it (MiniCache::Load), holding exactly what it
// would have held, in the same order (tests/eviction/mini_caches_test.cc;
// replay's output, sampled hit rates included, was the same to the bit on
// every trace shape and hierarchy tried). One difference is left: where a
// lower sampling rate (Restride) leaves a leaf-first candidate's block
// without sampled children, a running cache moves it to the newest end of
// its leaves, the prelude keeps its place (either is an artefact of
// thinning: in the tier the block still has its children). The others
// (S3-FIFO's queues and frequencies) run throughout. Measured (callgrind,
// bench_control_plane at 8 clients x 64 keys, the tier never full):
// 19,700 instructions a LOOKUP before, 16,950 with the prelude.
//
// Thread-safety: none; confined to the owning policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/hash.h"
#include "eviction/admission.h"
#include "eviction/eviction_policy.h"
#include "eviction/internal/chain_sampler.h"
#include "eviction/internal/mini_cache.h"
#include "eviction/internal/sample_index.h"

namespace kvtier::eviction::internal {

class MiniCaches {
 public:
  // Candidate i is named names[i] and decides by policies[i], with
  // filters[i] (null: none) before each eviction; `owned` holds the
  // filters (they count the sampled keys only: Request).
  MiniCaches(std::span<const std::string> names,
             std::vector<std::unique_ptr<EvictionPolicy>> policies,
             std::span<AdmissionFilter* const> filters,
             std::vector<std::unique_ptr<AdmissionFilter>> owned);
  MiniCaches(const MiniCaches&) = delete;  // (the caches point at index_)
  MiniCaches& operator=(const MiniCaches&) = delete;

  size_t size() const { return caches_.size(); }
  MiniCache& operator[](size_t i) { return caches_[i]; }
  const MiniCache& operator[](size_t i) const { return caches_[i]; }
  auto begin() { return caches_.begin(); }
  auto end() { return caches_.end(); }

  // One key in stride() is sampled, by a hash of its fingerprint (a power
  // of two, 1 at the start).
  uint64_t stride() const { return stride_; }
  bool Sampled(uint64_t fp) const { return (Mix64(fp) & (stride_ - 1)) == 0; }

  // One lookup's chain served to every candidate (its sampled keys, each
  // cache holding at most `capacity`), each scored against candidate
  // `followed`. Returns how many sampled keys it had (0: none, nothing
  // done); Decay with that many next. A capacity other than SIZE_MAX
  // (the tier evicts) starts the caches first.
  size_t Request(std::span<const uint64_t> chain, size_t capacity, size_t followed);

  // Ends the prelude: the recency-ordered candidates' caches made from it.
  // Trim and Probe start the caches themselves.
  void Start();
  bool started() const { return started_; }

  // Ages every candidate's hits and lead and the reference count by `n`
  // references, with a half-life of `half_life` references.
  void Decay(size_t n, double half_life);

  // Scores restart (hits and leads 0, references 0): the tier first needs
  // room.
  void RestartScores();
  // Leads restart against a newly followed candidate.
  void RestartLeads();

  // Every cache cut to `capacity` by its own victims.
  void Trim(size_t capacity);

  // The last chain served, as sampled now, served once more with one block
  // added (as the next request of its session would be: unfiltered, not
  // scored), each cache cut to `capacity` first: for each candidate, how
  // much of the chain it then holds (its leading run). The block added is
  // forgotten again.
  const std::vector<size_t>& Probe(size_t capacity);

  // Raises the stride to `stride` (a larger power of two): each cache keeps
  // the keys still sampled, in its order, and the scores shrink with the
  // rate.
  void Restride(uint64_t stride);

  // The tier has held up to `blocks` blocks: the filters are sized to it
  // (at the sampling rate).
  void SizeFilters(uint64_t blocks);
  bool has_filters() const { return !filters_.empty(); }

  double refs() const { return refs_; }          // decayed
  double all_refs() const { return all_refs_; }  // since the start, scaled with the rate
  uint64_t sampled_refs() const { return sampled_refs_; }

 private:
  // The prelude's request (above): the length of `chain`'s leading run it
  // knows, the keys stamped and the new ones added.
  size_t PreludeRequest(std::span<const uint64_t> chain);
  // Restride's in the prelude: the keys no longer sampled forgotten, their
  // children moving up to their parents.
  void ThinPrelude();

  // rows_: the rows of `chain`'s keys in the index, up to the first that no
  // miniature cache holds (on agent traffic in a small tier, most of a long
  // chain: looking up every key cost more than the caches' own work).
  void LookUpRows(std::span<const uint64_t> chain);

  std::vector<std::unique_ptr<AdmissionFilter>> filters_;  // the candidates' (one a name)
  uint64_t filters_sized_ = 0;                             // the blocks last told them
  SampleIndex index_;                                      // the sampled keys every cache holds
  std::vector<MiniCache> caches_;                          // each its column of index_
  ChainSampler sampler_;                                   // the sampled keys of the chains
  std::vector<uint64_t> sampled_;                          // Request's scratch
  std::vector<uint32_t> rows_;         // ... and the sampled keys' rows in index_
  std::vector<uint64_t> last_chain_;   // the last request's sampled keys
  std::vector<uint64_t> probe_;        // Probe's request
  std::vector<size_t> kept_;           // ... and its answer
  std::vector<bool> deferred_;         // each candidate's: made at Start()
  bool started_ = false;               // (true from the start where none is deferred)
  std::vector<PreludeKey> prelude_;    // parents before children
  SampleIndex prelude_index_{1};       // their places in prelude_, by fingerprint
  uint64_t prelude_clock_ = 0;         // the last stamp
  std::vector<uint32_t> prelude_run_;  // PreludeRequest's scratch
  uint64_t stride_ = 1;
  double refs_ = 0;      // decayed count of sampled references
  double all_refs_ = 0;  // since the start, scaled at each restride
  uint64_t sampled_refs_ = 0;
};

}  // namespace kvtier::eviction::internal

// MiniCaches: the adaptive policy's miniature simulations (adaptive_policy.cc
// says why and how they decide): one MiniCache per candidate, all on the
// same hash-sampled keys of the chains the lookups ask for, sharing one
// SampleIndex, with each candidate's score: its sampled hits, decayed, and
// its lead over the followed candidate. The policy decides from the
// scores; this class keeps them and the sampling rate.
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
  // done); Decay with that many next.
  size_t Request(std::span<const uint64_t> chain, size_t capacity, size_t followed);

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
  std::vector<uint32_t> rows_;        // ... and the sampled keys' rows in index_
  std::vector<uint64_t> last_chain_;  // the last request's sampled keys
  std::vector<uint64_t> probe_;       // Probe's request
  std::vector<size_t> kept_;          // ... and its answer
  uint64_t stride_ = 1;
  double refs_ = 0;      // decayed count of sampled references
  double all_refs_ = 0;  // since the start, scaled at each restride
  uint64_t sampled_refs_ = 0;
};

}  // namespace kvtier::eviction::internal

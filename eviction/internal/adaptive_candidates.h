// The adaptive policy's candidates made from their names
// (AdaptiveOptions::candidates): each one's policy object, and its
// admission filter for a name "policy/filter" (lru/seen), the filters made
// once a name (twice: below) however many candidates share them.
//
// Thread-safety: none; the result is the policy's to own.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "eviction/admission.h"
#include "eviction/eviction_policy.h"

namespace kvtier::eviction::internal {

// Each filter is made twice: the miniature caches' (given the sampled keys)
// and the tier's (given every key, while the tier may filter).
struct AdaptiveCandidates {
  std::vector<std::unique_ptr<EvictionPolicy>> policies;  // candidate i's
  std::vector<AdmissionFilter*> filters;                // candidate i's miniature cache's, or null
  std::vector<AdmissionFilter*> tier_filters;           // the same filter, the tier's, or null
  std::vector<std::unique_ptr<AdmissionFilter>> owned;  // the miniature caches', one a name
  std::vector<std::unique_ptr<AdmissionFilter>> tier_owned;  // the tier's, one a name
};

// InvalidArgument, saying why, for: no candidates, "adaptive" among them,
// an unknown policy or filter, "policy/off", a filtered candidate whose
// policy is not a candidate too (it is followed as that policy's filter),
// or a filtered first candidate (the one followed at the start).
Result<AdaptiveCandidates> MakeAdaptiveCandidates(std::span<const std::string> names,
                                                  const Clock& clock);

}  // namespace kvtier::eviction::internal

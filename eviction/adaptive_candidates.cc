// MakeAdaptiveCandidates (internal/adaptive_candidates.h): the adaptive
// policy's candidates from their names.
#include "eviction/internal/adaptive_candidates.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace kvtier::eviction::internal {

Result<AdaptiveCandidates> MakeAdaptiveCandidates(std::span<const std::string> names,
                                                  const Clock& clock) {
  if (names.empty()) return InvalidArgumentError("adaptive: no candidates");
  AdaptiveCandidates out;
  // A filter's name: its two instances (the miniature caches', the tier's).
  std::unordered_map<std::string, std::pair<AdmissionFilter*, AdmissionFilter*>> by_name;
  for (const std::string& c : names) {
    const size_t slash = c.find('/');
    const std::string policy = c.substr(0, slash);
    if (policy == "adaptive") return InvalidArgumentError("adaptive: cannot be its own candidate");
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> p, NewPolicy(policy, clock));
    out.policies.push_back(std::move(p));
    AdmissionFilter* filter = nullptr;
    AdmissionFilter* tier_filter = nullptr;
    if (slash != std::string::npos) {
      if (std::find(names.begin(), names.end(), policy) == names.end()) {
        return InvalidArgumentError("adaptive: candidate '" + c + "' needs '" + policy +
                                    "' among the candidates: it is followed as that policy's "
                                    "filter");
      }
      const std::string name = c.substr(slash + 1);
      auto [it, added] = by_name.emplace(name, std::pair{nullptr, nullptr});
      if (added) {
        Result<std::unique_ptr<AdmissionFilter>> made = NewAdmissionFilter(name);
        if (!made) {
          return InvalidArgumentError("adaptive: candidate '" + c +
                                      "': " + std::string(made.status().message()));
        }
        if (*made == nullptr) {
          return InvalidArgumentError("adaptive: candidate '" + c +
                                      "': 'off' is no filter: name the policy alone");
        }
        Result<std::unique_ptr<AdmissionFilter>> twin = NewAdmissionFilter(name);
        if (!twin) return twin.status();
        it->second = {made->get(), twin->get()};
        out.owned.push_back(std::move(made).value());
        out.tier_owned.push_back(std::move(twin).value());
      }
      filter = it->second.first;
      tier_filter = it->second.second;
    }
    out.filters.push_back(filter);
    out.tier_filters.push_back(tier_filter);
  }
  if (out.filters.front() != nullptr) {
    return InvalidArgumentError(
        "adaptive: the first candidate, followed at the start, has no filter");
  }
  return out;
}

}  // namespace kvtier::eviction::internal

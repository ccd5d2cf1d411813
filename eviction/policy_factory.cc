#include <array>
#include <string>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction {
namespace {

constexpr std::string_view kLeafPrefix = "leaf-";
constexpr std::string_view kAdaptivePrefix = "adaptive:";

constexpr std::array<std::string_view, 11> kNames = {
    "adaptive", "lru",      "lfu",         "s3fifo",        "priority",    "learned",
    "leaf-lru", "leaf-lfu", "leaf-s3fifo", "leaf-priority", "leaf-learned"};

// A policy without the leaf-first wrapper, or null for an unknown name.
std::unique_ptr<EvictionPolicy> NewBasePolicy(std::string_view name, const Clock& clock) {
  if (name == "lru") return NewLruPolicy();
  if (name == "lfu") return NewLfuPolicy(clock);
  if (name == "s3fifo") return NewS3FifoPolicy();
  if (name == "priority") return NewPriorityPolicy(clock);
  if (name == "learned") return NewLearnedPolicy();
  return nullptr;
}

}  // namespace

std::span<const std::string_view> PolicyNames() { return kNames; }

Result<std::unique_ptr<EvictionPolicy>> NewPolicy(std::string_view name, const Clock& clock) {
  if (name == "adaptive") return NewAdaptivePolicy(clock);
  if (name.starts_with(kAdaptivePrefix)) {
    // adaptive:lru+leaf-lru+learned: those candidates instead of the default.
    AdaptiveOptions options;
    options.candidates.clear();
    std::string_view rest = name.substr(kAdaptivePrefix.size());
    while (true) {
      const size_t plus = rest.find('+');
      options.candidates.emplace_back(rest.substr(0, plus));
      if (options.candidates.back().empty()) {
        return InvalidArgumentError("eviction policy '" + std::string(name) +
                                    "': an empty candidate (adaptive:lru+learned names two)");
      }
      if (plus == std::string_view::npos) break;
      rest.remove_prefix(plus + 1);
    }
    return NewAdaptivePolicy(clock, std::move(options));
  }
  std::string_view base = name;
  const bool leaf_first = base.starts_with(kLeafPrefix);
  if (leaf_first) base.remove_prefix(kLeafPrefix.size());
  std::unique_ptr<EvictionPolicy> policy = NewBasePolicy(base, clock);
  if (policy != nullptr) return leaf_first ? NewLeafFirst(std::move(policy)) : std::move(policy);
  std::string msg = "unknown eviction policy '";
  msg.append(name).append("'; known:");
  for (std::string_view n : kNames) msg.append(" ").append(n);
  msg.append(", and adaptive:<candidates joined by +>");
  return InvalidArgumentError(msg);
}

Status CheckPolicyName(std::string_view name) { return NewPolicy(name, SystemClock()).status(); }

}  // namespace kvtier::eviction

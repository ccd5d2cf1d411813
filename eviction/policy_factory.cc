#include <array>
#include <string>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction {
namespace {

constexpr std::string_view kLeafPrefix = "leaf-";

constexpr std::array<std::string_view, 9> kNames = {"adaptive", "lru",         "lfu",
                                                    "s3fifo",   "priority",    "leaf-lru",
                                                    "leaf-lfu", "leaf-s3fifo", "leaf-priority"};

// A policy without the leaf-first wrapper, or null for an unknown name.
std::unique_ptr<EvictionPolicy> NewBasePolicy(std::string_view name, const Clock& clock) {
  if (name == "lru") return NewLruPolicy();
  if (name == "lfu") return NewLfuPolicy(clock);
  if (name == "s3fifo") return NewS3FifoPolicy();
  if (name == "priority") return NewPriorityPolicy(clock);
  return nullptr;
}

}  // namespace

std::span<const std::string_view> PolicyNames() { return kNames; }

Result<std::unique_ptr<EvictionPolicy>> NewPolicy(std::string_view name, const Clock& clock) {
  if (name == "adaptive") return NewAdaptivePolicy(clock);
  std::string_view base = name;
  const bool leaf_first = base.starts_with(kLeafPrefix);
  if (leaf_first) base.remove_prefix(kLeafPrefix.size());
  std::unique_ptr<EvictionPolicy> policy = NewBasePolicy(base, clock);
  if (policy != nullptr) return leaf_first ? NewLeafFirst(std::move(policy)) : std::move(policy);
  std::string msg = "unknown eviction policy '";
  msg.append(name).append("'; known:");
  for (std::string_view n : kNames) msg.append(" ").append(n);
  return InvalidArgumentError(msg);
}

}  // namespace kvtier::eviction

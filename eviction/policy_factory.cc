#include <array>
#include <string>

#include "eviction/eviction_policy.h"

namespace kvtier::eviction {
namespace {
constexpr std::array<std::string_view, 1> kNames = {"lru"};
}  // namespace

std::span<const std::string_view> PolicyNames() { return kNames; }

// LRU orders by events alone; the time-aware policies take the clock.
Result<std::unique_ptr<EvictionPolicy>> NewPolicy(std::string_view name,
                                                  [[maybe_unused]] const Clock& clock) {
  if (name == "lru") return NewLruPolicy();
  std::string msg = "unknown eviction policy '";
  msg.append(name).append("'; known:");
  for (std::string_view n : kNames) msg.append(" ").append(n);
  return InvalidArgumentError(msg);
}

}  // namespace kvtier::eviction

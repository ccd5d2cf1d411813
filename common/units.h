// Byte units and alignment helpers shared by the tiers, the CLI and benches.
#pragma once

#include <cstdint>

namespace kvtier {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// REQUIRES: alignment is a power of two.
constexpr uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) & ~(alignment - 1);
}

}  // namespace kvtier

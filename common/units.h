// Byte units and alignment helpers shared by the tiers, the CLI and benches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvtier {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// REQUIRES: alignment is a power of two.
constexpr uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) & ~(alignment - 1);
}

// "1.00 GiB", "64.0 MiB", "512 B": three significant digits, binary units.
std::string FormatBytes(uint64_t bytes);

// Parses a byte count: a plain integer ("4096") or an integer or decimal
// with a unit, B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal),
// with or without a space ("64MiB", "1.5 GiB"). InvalidArgument otherwise.
Result<uint64_t> ParseBytes(std::string_view text);

}  // namespace kvtier

// Test blocks for the tiers' tests: a block's bytes follow from a seed, in a
// buffer aligned for direct I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "common/hash.h"
#include "tiers/internal/block_file.h"

namespace kvtier::tiers::internal {

// splitmix64, so each block's bytes follow from its seed.
inline uint64_t SeedMix(uint64_t x) { return SplitMix64(&x); }

// A block's bytes in an aligned buffer; `skew` > 0 shifts the span off the
// 4 KiB alignment to exercise the bounce path.
struct Block {
  AlignedBuffer buf;
  size_t skew = 0;
  size_t size = 0;
  std::span<std::byte> span() const { return buf.span().subspan(skew, size); }
};

inline Block MakeBlock(uint64_t seed, size_t size, size_t skew = 0) {
  Block b;
  b.buf = std::move(AlignedBuffer::Allocate(size + skew)).value();
  b.skew = skew;
  b.size = size;
  std::span<std::byte> s = b.span();
  for (size_t i = 0; i < size; ++i)
    s[i] = static_cast<std::byte>(SeedMix(seed + i / 8) >> (i % 8 * 8));
  return b;
}

}  // namespace kvtier::tiers::internal

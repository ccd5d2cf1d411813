// The checksum every stored block carries (the ssd tier's records, the
// remote tier's values): XXH3-64 of the payload, with libxxhash's runtime
// dispatch where the library has it (AVX2 where the CPU has it: ~20 GB/s
// against ~10 GB/s for the SSE2 code a baseline x86-64 build inlines). The
// values are XXH3-64's either way, so stored checksums stay valid across
// machines and builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::tiers::internal {

uint64_t BlockChecksum(std::span<const std::byte> bytes);

// Copies `src` to `dst` (same size) and returns BlockChecksum(src), in one
// pass: chunk by chunk, each hashed and then copied while it is still in
// the cache, instead of a 2 MiB hash pass and a 2 MiB copy pass each from
// memory. REQUIRES: dst.size() == src.size(), no overlap.
uint64_t ChecksumAndCopy(std::span<std::byte> dst, std::span<const std::byte> src);

}  // namespace kvtier::tiers::internal

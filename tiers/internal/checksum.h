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

}  // namespace kvtier::tiers::internal

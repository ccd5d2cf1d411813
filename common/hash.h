// splitmix64 (Steele, Lea and Flood; Vigna's constants): a 64-bit mixing
// function and the stream built on it. Fast, deterministic, well mixed; not
// for secrets (block keys use keyed XXH3, prefix_index/block_key.h).
#pragma once

#include <cstdint>

namespace kvtier {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// splitmix64's finalizer: every input bit affects every output bit.
constexpr uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The next value of the splitmix64 stream whose state is *state.
constexpr uint64_t SplitMix64(uint64_t* state) { return Mix64(*state += kGoldenGamma); }

}  // namespace kvtier

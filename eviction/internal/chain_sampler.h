// ChainSampler: the keys of a chain that a sampling test accepts, for an
// adaptive policy's Referenced (adaptive_policy.cc). Consecutive chains
// share long prefixes (each request of an agent's session repeats the last
// one's chain and adds a few blocks), so it remembers the sampled positions
// of a few recent chains and tests only the keys past the longest prefix
// the new chain shares with one of them: comparing a key costs a fraction
// of hashing it, and on such traffic testing every key of every chain was
// most of adaptive's cost per block reference.
//
// Thread-safety: none; confined to the owning policy.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace kvtier::eviction::internal {

class ChainSampler {
 public:
  // Chains shorter than this are tested whole and not remembered (looking
  // for a shared prefix would cost more than it saves), and so are those
  // longer than kMaxRemembered (memory: at most kChains of them, 12 bytes
  // per key).
  static constexpr size_t kMinRemembered = 64;
  static constexpr size_t kMaxRemembered = size_t{1} << 15;
  static constexpr size_t kChains = 8;

  // The keys of `chain` that `sampled` accepts, in chain order, into *out.
  // `sampled` must answer the same for a key for as long as `epoch` is the
  // same (the caller changes it when its test changes).
  template <class Sampled>
  void Sample(std::span<const uint64_t> chain, uint64_t epoch, const Sampled& sampled,
              std::vector<uint64_t>* out) {
    out->clear();
    if (chain.size() < kMinRemembered) {
      for (uint64_t key : chain) {
        if (sampled(key)) out->push_back(key);
      }
      return;
    }
    SampleRemembering(chain, epoch, sampled, out);
  }

 private:
  // (Out of line: the short chains' loop above is the hot code.)
  template <class Sampled>
  [[gnu::noinline]] void SampleRemembering(std::span<const uint64_t> chain, uint64_t epoch,
                                           const Sampled& sampled, std::vector<uint64_t>* out) {
    ++clock_;
    // The remembered chain sharing the longest prefix with this one.
    Chain* best = nullptr;
    size_t shared = 0;
    for (Chain& c : chains_) {
      if (c.epoch != epoch || c.keys.empty() || c.keys[0] != chain[0]) continue;
      const size_t n = SharedPrefix(c.keys, chain);
      if (n > shared) {
        best = &c;
        shared = n;
      }
    }
    if (best != nullptr) {
      for (uint32_t at : best->sampled) {
        if (at >= shared) break;
        out->push_back(best->keys[at]);
      }
    }
    fresh_.clear();
    for (size_t i = shared; i < chain.size(); ++i) {
      if (!sampled(chain[i])) continue;
      out->push_back(chain[i]);
      fresh_.push_back(static_cast<uint32_t>(i));
    }
    if (chain.size() > kMaxRemembered) return;
    if (best == nullptr) {
      // The least recently used one (or an empty one) takes the chain.
      best = &*std::min_element(chains_.begin(), chains_.end(),
                                [](const Chain& a, const Chain& b) { return a.used < b.used; });
      best->epoch = epoch;
      shared = 0;
    }
    best->used = clock_;
    if (shared == chain.size()) return;  // a prefix of the one remembered: keep the longer
    // The chain as remembered from here on: the shared prefix, then this
    // chain's own keys.
    best->keys.resize(shared);
    best->keys.insert(best->keys.end(), chain.begin() + static_cast<ptrdiff_t>(shared),
                      chain.end());
    while (!best->sampled.empty() && best->sampled.back() >= shared) best->sampled.pop_back();
    best->sampled.insert(best->sampled.end(), fresh_.begin(), fresh_.end());
  }

  struct Chain {
    std::vector<uint64_t> keys;
    std::vector<uint32_t> sampled;  // positions in keys of the sampled ones
    uint64_t epoch = 0;
    uint64_t used = 0;  // clock_ when last used; 0: never
  };

  // The length of the longest common prefix of a and b: compared 64 keys
  // at a time (memcmp is vectorized), then one by one.
  static size_t SharedPrefix(std::span<const uint64_t> a, std::span<const uint64_t> b) {
    const size_t n = std::min(a.size(), b.size());
    constexpr size_t kStep = 64;
    size_t i = 0;
    while (i + kStep <= n && std::memcmp(&a[i], &b[i], kStep * sizeof(uint64_t)) == 0) i += kStep;
    while (i < n && a[i] == b[i]) ++i;
    return i;
  }

  std::array<Chain, kChains> chains_;
  std::vector<uint32_t> fresh_;  // Sample's: positions of the keys it tested and took
  uint64_t clock_ = 0;
};

}  // namespace kvtier::eviction::internal

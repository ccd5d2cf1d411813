// ChainFingerprints: the policy fingerprints of a lookup's chain of keys
// (CacheEngine::TellReferences), remembering a few recent chains so that a
// chain sharing a prefix with one of them hashes only its other keys. Each
// request of an agent's session repeats the last one's chain and adds
// blocks, and on such traffic hashing every key of every chain was the
// adaptive policy's largest cost per block reference after its own.
//
// Thread-safety: none; confined to the engine's thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "prefix_index/block_key.h"

namespace kvtier::engine::internal {

class ChainFingerprints {
 public:
  // Chains shorter than this are hashed whole and not remembered (looking
  // for a shared prefix would cost more than it saves), and so are those
  // longer than kMaxRemembered (memory: at most kChains of them, 24 bytes
  // per key).
  static constexpr size_t kMinRemembered = 64;
  static constexpr size_t kMaxRemembered = size_t{1} << 15;
  static constexpr size_t kChains = 8;

  using NamespaceId = prefix_index::NamespaceId;
  using BlockKey = prefix_index::BlockKey;

  // fingerprint(ns, key) of every key, in order; valid until the next
  // call. `fingerprint` must be the same function at every call.
  template <class Fingerprint>
  std::span<const uint64_t> Of(NamespaceId ns, std::span<const BlockKey> keys,
                               const Fingerprint& fingerprint) {
    if (keys.size() < kMinRemembered || keys.size() > kMaxRemembered) {
      if (scratch_.size() < keys.size()) scratch_.resize(keys.size());  // (no zeroing per call)
      for (size_t i = 0; i < keys.size(); ++i) scratch_[i] = fingerprint(ns, keys[i]);
      return std::span<const uint64_t>(scratch_).first(keys.size());
    }
    return OfRemembering(ns, keys, fingerprint);
  }

 private:
  // (Out of line: the short chains' loop above is the hot code.)
  template <class Fingerprint>
  [[gnu::noinline]] std::span<const uint64_t> OfRemembering(NamespaceId ns,
                                                            std::span<const BlockKey> keys,
                                                            const Fingerprint& fingerprint) {
    // The remembered chain sharing the longest prefix with this one.
    Chain* best = nullptr;
    size_t shared = 0;
    for (Chain& c : chains_) {
      if (c.ns != ns || c.keys.empty() || c.keys[0] != keys[0]) continue;
      const size_t n = SharedPrefix(c.keys, keys);
      if (n > shared) {
        best = &c;
        shared = n;
      }
    }
    if (best == nullptr) {  // the least recently used one (or an empty one) takes it
      best = &*std::min_element(chains_.begin(), chains_.end(),
                                [](const Chain& a, const Chain& b) { return a.used < b.used; });
      best->ns = ns;
      shared = 0;
    }
    best->used = ++clock_;
    if (shared < keys.size()) {  // (else a prefix of the one remembered: it keeps the longer)
      best->keys.resize(shared);
      best->keys.insert(best->keys.end(), keys.begin() + static_cast<ptrdiff_t>(shared),
                        keys.end());
      best->fingerprints.resize(keys.size());
      for (size_t i = shared; i < keys.size(); ++i)
        best->fingerprints[i] = fingerprint(ns, keys[i]);
    }
    return std::span<const uint64_t>(best->fingerprints).first(keys.size());
  }

  struct Chain {
    NamespaceId ns = 0;
    std::vector<BlockKey> keys;
    std::vector<uint64_t> fingerprints;  // of keys
    uint64_t used = 0;                   // clock_ when last used; 0: never
  };

  // The length of the longest common prefix of a and b: compared 32 keys
  // at a time (memcmp is vectorized), then one by one.
  static size_t SharedPrefix(std::span<const BlockKey> a, std::span<const BlockKey> b) {
    const size_t n = std::min(a.size(), b.size());
    constexpr size_t kStep = 32;
    size_t i = 0;
    while (i + kStep <= n && std::memcmp(&a[i], &b[i], kStep * sizeof(BlockKey)) == 0) i += kStep;
    while (i < n && a[i] == b[i]) ++i;
    return i;
  }

  std::array<Chain, kChains> chains_;
  std::vector<uint64_t> scratch_;  // the chains not remembered
  uint64_t clock_ = 0;
};

}  // namespace kvtier::engine::internal

// BlockKey: the 128-bit name of a block, which names its whole prefix
// (DESIGN.md §1). NamespaceId: the daemon's small integer for a namespace;
// the index is keyed by (namespace, key), so namespaces never collide.
#pragma once

#include <bit>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::prefix_index {

using NamespaceId = uint32_t;

struct BlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;

  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;

  // 32 lowercase hex digits, `hi` first.
  std::string ToHex() const;
  // Parses ToHex()'s format; nullopt for anything else.
  static std::optional<BlockKey> FromHex(std::string_view hex);
};

// For hash maps of keys. Real keys are outputs of a keyed hash, uniform
// already; structured ones (replay's (file, id), tests' counters) are not, and
// `hi ^ lo` sent 3.45 M of replay's keys onto 39 k values. So, as the index's
// own hash (PrefixIndex::HashOf): the halves combined without cancelling
// (hi rotated), then a multiply and an xorshift, bijections both.
struct BlockKeyHash {
  // `salt` is folded in before the mix (PrefixIndex::HashOf: the namespace).
  static uint64_t Mix(const BlockKey& k, uint64_t salt = 0) {
    uint64_t h = k.lo ^ std::rotl(k.hi, 32) ^ salt;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
  }
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(Mix(k)); }
};

}  // namespace kvtier::prefix_index

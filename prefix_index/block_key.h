// BlockKey: the 128-bit name of a block, which names its whole prefix
// (DESIGN.md §1). NamespaceId: the daemon's small integer for a namespace;
// the index is keyed by (namespace, key), so namespaces never collide.
#pragma once

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

// Keys are outputs of a keyed hash, so their bits are already uniform.
struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.lo ^ k.hi); }
};

}  // namespace kvtier::prefix_index

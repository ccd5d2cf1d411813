#include "prefix_index/block_key.h"

#include <cstdio>

namespace kvtier::prefix_index {

std::string BlockKey::ToHex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return std::string(buf, 32);
}

std::optional<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  uint64_t half[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t v;
    if (c >= '0' && c <= '9') {
      v = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v = static_cast<uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v = static_cast<uint64_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    half[i / 16] = (half[i / 16] << 4) | v;
  }
  return BlockKey{half[0], half[1]};
}

}  // namespace kvtier::prefix_index

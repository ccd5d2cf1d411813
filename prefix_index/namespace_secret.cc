#include "prefix_index/namespace_secret.h"

#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvtier::prefix_index {

std::array<std::byte, kNamespaceSecretBytes> DeriveNamespaceSecret(
    std::span<const std::byte> master, std::string_view model, std::string_view salt) {
  std::vector<std::byte> input(master.begin(), master.end());
  for (char c : model) input.push_back(static_cast<std::byte>(c));
  input.push_back(std::byte{0});
  for (char c : salt) input.push_back(static_cast<std::byte>(c));
  std::array<std::byte, kNamespaceSecretBytes> out;
  for (uint64_t half = 0; half < 2; ++half) {
    const XXH128_hash_t h = XXH3_128bits_withSeed(input.data(), input.size(), half);
    std::memcpy(out.data() + 16 * half, &h.low64, 8);
    std::memcpy(out.data() + 16 * half + 8, &h.high64, 8);
  }
  return out;
}

}  // namespace kvtier::prefix_index

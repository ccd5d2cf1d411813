// The secret of a namespace (model, salt), derived from a master secret:
//
//   secret = XXH3-128(master || model || 0x00 || salt, seed 0)
//         || XXH3-128(master || model || 0x00 || salt, seed 1)
//
// (each half little-endian low64 then high64): 32 bytes, stable for a
// namespace while the master is, unrelated across namespaces. kvtierd hands
// it to each worker at HELLO; a KV-aware router that holds the deployment
// secret (the master of every node sharing a remote tier) computes the same
// keys from a prompt's tokens without attaching to any node, to match them
// against the block hashes of the KV events (docs/operations.md).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string_view>

namespace kvtier::prefix_index {

inline constexpr size_t kNamespaceSecretBytes = 32;

std::array<std::byte, kNamespaceSecretBytes> DeriveNamespaceSecret(
    std::span<const std::byte> master, std::string_view model, std::string_view salt);

}  // namespace kvtier::prefix_index

// Pieces shared by the kvtier CLI's subcommands: connection and layout
// flags, token sources, the deterministic block pattern, output helpers.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "common/units.h"  // FormatBytes

namespace kvtier::cli {

// --socket --model --salt and the layout of the namespace.
struct ConnectFlags {
  std::string socket;  // "" until parsed: KVTIER_SOCKET, else kDefaultSocketPath
  std::string model = "kvtier-cli";
  std::string salt;
  uint32_t layers = 2;
  uint32_t kv_heads = 2;
  uint32_t head_dim = 64;
  std::string dtype = "fp16";
  uint32_t block_tokens = 16;
  std::string kind = "kv";  // KvKindName: kv | latent
  std::string quantize_lower = "off";
  uint32_t timeout_ms = 30000;
};
void AddConnectFlags(CLI::App* app, ConnectFlags* flags);
// Connects with the flags. The error is ready to print ("cannot connect to
// PATH: ... (is kvtierd running?)").
Result<std::unique_ptr<client::Client>> Connect(const ConnectFlags& flags, bool map_arenas);

// --tokens 1,2,3 | --random N --seed S (N blocks of random tokens).
struct TokenFlags {
  std::vector<uint32_t> tokens;
  uint64_t random_blocks = 0;
  uint64_t seed = 1;
};
void AddTokenFlags(CLI::App* app, TokenFlags* flags);
// The tokens the flags name; InvalidArgument when they name none or both.
Result<std::vector<client::TokenId>> MakeTokens(const TokenFlags& flags, uint32_t block_tokens);

// The bytes `put` writes for a block when no --file is given: a stream
// derived from the key alone, so `get --verify` needs nothing but the key.
void FillPattern(const client::BlockKey& key, std::span<std::byte> out);
bool MatchesPattern(const client::BlockKey& key, std::span<const std::byte> in);

// Splits [0, n) into runs of at most `chunk` (>= 1) for requests that must
// respect the daemon's per-request caps.
std::vector<std::pair<size_t, size_t>> Chunks(size_t n, size_t chunk);
// The largest number of blocks one request may carry inline.
size_t InlineChunk(const client::Client& c);

std::string_view TierName(client::WireTier tier);

// "1,234,567": a count with thousands separators, for tables.
std::string Int(uint64_t n);

// Prints "kvtier: <message>" to stderr and returns the exit code 1.
int Fail(const Status& status);

}  // namespace kvtier::cli

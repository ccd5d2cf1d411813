#include "cli/cli_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/hash.h"

namespace kvtier::cli {
namespace {

// Generates the pattern of `key` in 8-byte words, handing each piece to `fn`
// (bytes, offset) until it returns false.
template <typename Fn>
bool ForEachPatternWord(const client::BlockKey& key, size_t size, Fn&& fn) {
  uint64_t state = key.hi ^ (key.lo * 0x2545f4914f6cdd1dULL);
  for (size_t off = 0; off < size; off += 8) {
    const uint64_t word = SplitMix64(&state);
    if (!fn(word, off, std::min<size_t>(8, size - off))) return false;
  }
  return true;
}

}  // namespace

void AddConnectFlags(CLI::App* app, ConnectFlags* f) {
  app->add_option(
      "--socket", f->socket,
      "kvtierd's Unix socket [$KVTIER_SOCKET or " + std::string(client::kDefaultSocketPath) + "]");
  app->add_option("--model", f->model, "model id of the namespace")->capture_default_str();
  app->add_option("--salt", f->salt, "tenant / cache salt of the namespace");
  app->add_option("--layers", f->layers, "layout: layers")->capture_default_str();
  app->add_option("--kv-heads", f->kv_heads, "layout: KV heads")->capture_default_str();
  app->add_option("--head-dim", f->head_dim, "layout: head dimension")->capture_default_str();
  app->add_option("--dtype", f->dtype, "layout: fp16 | bf16 | fp32 | fp8_e4m3 | fp8_e5m2")
      ->capture_default_str();
  app->add_option("--block-tokens", f->block_tokens, "layout: tokens per block")
      ->capture_default_str();
  app->add_option("--kind", f->kind,
                  "layout: kv (K and V per layer) | latent (MLA: one latent vector per token and "
                  "layer, --kv-heads 1)")
      ->capture_default_str();
  app->add_option("--quantize-lower", f->quantize_lower,
                  "keep the namespace's blocks in the ssd and remote tiers as off | fp8_e4m3 | "
                  "fp8_e5m2 (lossy; docs/fp8.md)")
      ->capture_default_str();
  app->add_option("--timeout-ms", f->timeout_ms, "longest wait for the daemon, 0 = forever")
      ->capture_default_str();
}

Result<std::unique_ptr<client::Client>> Connect(const ConnectFlags& f, bool map_arenas) {
  client::ClientOptions o;
  o.socket_path = f.socket;
  if (o.socket_path.empty()) {
    const char* env = std::getenv("KVTIER_SOCKET");
    o.socket_path = env != nullptr && *env != '\0' ? env : client::kDefaultSocketPath;
  }
  o.model = f.model;
  o.salt = f.salt;
  o.client_name = "kvtier-cli";
  o.map_arenas = map_arenas;
  o.io_timeout_ms = f.timeout_ms;
  if (!ParseDType(f.dtype, &o.layout.dtype)) {
    return InvalidArgumentError("unknown --dtype '" + f.dtype + "'");
  }
  o.layout.layers = f.layers;
  o.layout.kv_heads = f.kv_heads;
  o.layout.head_dim = f.head_dim;
  o.layout.block_tokens = f.block_tokens;
  if (!ParseKvKind(f.kind, &o.layout.kind)) {
    return InvalidArgumentError("unknown --kind '" + f.kind + "': expected kv or latent");
  }
  if (!ParseQuantize(f.quantize_lower, &o.quantize_lower)) {
    return InvalidArgumentError("unknown --quantize-lower '" + f.quantize_lower +
                                "': expected off, fp8_e4m3 or fp8_e5m2");
  }
  auto c = client::Client::Connect(o);
  if (c.ok()) return c;
  // Turn "kvtierd at P: cannot connect: E" into the line an operator wants.
  const std::string msg(c.error().message());
  const std::string marker = ": cannot connect: ";
  if (const size_t at = msg.find(marker); at != std::string::npos) {
    return UnavailableError("cannot connect to " + o.socket_path + ": " +
                            msg.substr(at + marker.size()) + " (is kvtierd running?)");
  }
  return c.status();
}

void AddTokenFlags(CLI::App* app, TokenFlags* f) {
  auto* tokens =
      app->add_option("--tokens", f->tokens, "token ids, comma-separated")->delimiter(',');
  auto* random = app->add_option("--random", f->random_blocks, "N blocks of random tokens instead");
  tokens->excludes(random);
  app->add_option("--seed", f->seed, "seed of --random")->capture_default_str();
}

Result<std::vector<client::TokenId>> MakeTokens(const TokenFlags& f, uint32_t block_tokens) {
  if (!f.tokens.empty()) {
    if (f.tokens.size() < block_tokens) {
      return InvalidArgumentError(std::to_string(f.tokens.size()) +
                                  " tokens make no full block of " + std::to_string(block_tokens));
    }
    return f.tokens;
  }
  if (f.random_blocks == 0) return InvalidArgumentError("give --tokens or --random N");
  std::mt19937_64 rng(f.seed);
  std::vector<client::TokenId> tokens(f.random_blocks * block_tokens);
  for (auto& t : tokens) t = static_cast<client::TokenId>(rng() % 150000);  // a vocabulary's size
  return tokens;
}

void FillPattern(const client::BlockKey& key, std::span<std::byte> out) {
  ForEachPatternWord(key, out.size(), [&](uint64_t word, size_t off, size_t n) {
    std::memcpy(out.data() + off, &word, n);
    return true;
  });
}

bool MatchesPattern(const client::BlockKey& key, std::span<const std::byte> in) {
  return ForEachPatternWord(key, in.size(), [&](uint64_t word, size_t off, size_t n) {
    return std::memcmp(in.data() + off, &word, n) == 0;
  });
}

std::vector<std::pair<size_t, size_t>> Chunks(size_t n, size_t chunk) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t start = 0; start < n; start += chunk)
    out.emplace_back(start, std::min(n - start, chunk));
  return out;
}

size_t InlineChunk(const client::Client& c) {
  // Leave room for the keys and the request's fixed fields.
  const uint64_t per_block = c.block_bytes() + sizeof(client::BlockKey);
  const uint64_t room = c.session().max_payload_bytes - 64;
  return std::max<size_t>(1, std::min<size_t>(c.session().max_keys, room / per_block));
}

std::string Int(uint64_t n) {
  // Built front to back by appending: inserting "," into the string makes
  // g++ 12 at -O3 report a false -Wrestrict in char_traits.h (GCC bug 105651).
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string_view TierName(client::WireTier tier) {
  switch (tier) {
    case client::WireTier::kDevice:
      return "device";
    case client::WireTier::kHost:
      return "host";
    case client::WireTier::kSsd:
      return "ssd";
    case client::WireTier::kRemote:
      return "remote";
  }
  return "?";
}

int Fail(const Status& status) {
  std::fprintf(stderr, "kvtier: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace kvtier::cli

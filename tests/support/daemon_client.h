// Test support: a worker of the test daemon, through the real client
// library (client/client.h), with the set-up every daemon test shares.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/layout.h"
#include "protocol/wire.h"
#include "support/daemon_harness.h"

namespace kvtier::testing {

// The daemon tests' layout: 2 layers, 2 KV heads, head_dim 64, fp16, 16
// tokens: 16 KiB blocks.
inline Layout TestLayout() { return Layout{2, 2, 64, DType::kFloat16, 16}; }
inline constexpr uint64_t kTestBlockBytes = 16 * 1024;

// A client of the daemon at `socket`: `model`, TestLayout(), `client_name`,
// a 20 s I/O timeout. Tests change what they test.
client::ClientOptions TestClientOptions(const std::string& socket,
                                        const std::string& model = "llama-test",
                                        const std::string& client_name = "test");

// Connects; on failure, a test failure that says why (with `daemon`'s log
// when given) and null.
std::unique_ptr<client::Client> ConnectClient(const client::ClientOptions& options,
                                              const Daemon* daemon = nullptr);

// STATS as name -> value; a test failure, and empty, when the request fails.
std::map<std::string, std::string> StatsOf(client::Client& c);

// Waits (up to 5 s) until no move to or from the disk is in flight.
void Settle(client::Client& c);

// Writes every full block of `tokens` in place, each holding FillPattern of
// its key; returns the keys, or (a test failure) empty when the allocation
// or the commit fails.
std::vector<prefix_index::BlockKey> PutPattern(client::Client& c,
                                               const std::vector<prefix_index::TokenId>& tokens,
                                               protocol::WireTier tier = protocol::WireTier::kHost);

}  // namespace kvtier::testing

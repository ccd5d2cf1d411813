#include "support/daemon_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace kvtier::testing {

client::ClientOptions TestClientOptions(const std::string& socket, const std::string& model,
                                        const std::string& client_name) {
  client::ClientOptions o;
  o.socket_path = socket;
  o.model = model;
  o.layout = TestLayout();
  o.client_name = client_name;
  o.io_timeout_ms = 20'000;
  return o;
}

std::unique_ptr<client::Client> ConnectClient(const client::ClientOptions& options,
                                              const Daemon* daemon) {
  auto c = client::Client::Connect(options);
  EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << (daemon ? daemon->Log() : "");
  return c.ok() ? std::move(c).value() : nullptr;
}

std::map<std::string, std::string> StatsOf(client::Client& c) {
  auto s = c.Stats();
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::map<std::string, std::string> out;
  if (s.ok()) out.insert(s->begin(), s->end());
  return out;
}

void Settle(client::Client& c) {
  for (int i = 0; i < 500 && StatsOf(c)["moves_in_flight"] != "0"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<prefix_index::BlockKey> PutPattern(client::Client& c,
                                               const std::vector<prefix_index::TokenId>& tokens,
                                               protocol::WireTier tier) {
  const auto keys = c.Keys(tokens);
  auto w = c.Allocate(keys, std::nullopt, tier);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return {};
  for (size_t i = 0; i < w->size(); ++i) {
    if (w->state(i) == protocol::WireWriteState::kAllocated) FillPattern(w->Bytes(i), keys[i]);
  }
  const Status committed = w->Commit();
  EXPECT_TRUE(committed.ok()) << committed.ToString();
  if (!committed.ok()) return {};
  return keys;
}

}  // namespace kvtier::testing

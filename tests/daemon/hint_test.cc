// HINT through the real daemon and client: a hinted prefix outlives a
// turnover of the host tier until its request runs; hints past the
// session's bound are refused and change nothing; a hinted block on the
// SSD is read into the host before it is asked for; hints for keys never
// written are harmless; a session's hints end with it.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "client/client.h"
#include "support/daemon_client.h"

namespace kvtier::testing {
namespace {

using client::Client;
using prefix_index::BlockKey;
using prefix_index::TokenId;
using protocol::WireTier;
using protocol::WireWriteState;

class DaemonHintTest : public ::testing::Test {
 protected:
  void TearDown() override { daemon_.reset(); }
  // 1 MiB of host: 64 blocks of 16 KiB.
  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--host-capacity", "1MiB", "--host-slab", "256KiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = Daemon::Start(args);
    ASSERT_NE(daemon_, nullptr);
  }
  void StartWithSsd() {
    data_.emplace("/var/tmp/kvtier-hint-daemon");
    Start({"--ssd-dir", *data_ / "ssd", "--ssd-capacity", "64MiB", "--ssd-prepare", "foreground"});
  }
  std::unique_ptr<Client> Connect() {
    return ConnectClient(TestClientOptions(daemon_->socket()), daemon_.get());
  }
  static std::vector<BlockKey> Put(Client& c, uint32_t seed, size_t blocks = 8) {
    return PutPattern(c, RandomPrompt(seed, blocks));
  }
  static size_t Cached(Client& c, const std::vector<BlockKey>& keys) {
    auto r = c.Lookup(keys);
    return r.ok() ? r->tiers.size() : 0;
  }

  std::optional<TempDir> data_;  // the ssd tier's, when there is one
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonHintTest, AHintedPrefixOutlivesATurnoverUntilItsRequestRuns) {
  Start();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const auto waiting = Put(*c, 1);   // a request in the worker's queue
  const auto unhinted = Put(*c, 2);  // written at the same time, not hinted
  auto h = c->Hint(waiting, 30'000);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->blocks, 8u);
  EXPECT_EQ(h->prefetching, 0u);
  // 96 more blocks through a 64-block tier.
  for (uint32_t seed = 10; seed < 22; ++seed) Put(*c, seed);
  EXPECT_EQ(Cached(*c, unhinted), 0u);
  EXPECT_EQ(Cached(*c, waiting), 8u);
  // The request runs: its blocks are read, the hint is used.
  auto lease = c->Acquire(waiting);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), waiting[i]));
  ASSERT_TRUE(lease->Release().ok());
  auto s = StatsOf(*c);
  EXPECT_EQ(s["hinted_blocks"], "8");
  EXPECT_EQ(s["hints_used"], "8");
  EXPECT_EQ(s["hinted_now"], "0");
}

TEST_F(DaemonHintTest, HintsPastTheSessionsBoundAreRefusedAndChangeNothing) {
  Start({"--max-hinted-blocks-per-session", "12", "--hint-ttl-ms", "2000", "--max-hint-ttl-ms",
         "5000"});
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const auto a = Put(*c, 1), b = Put(*c, 2);
  ASSERT_TRUE(c->Hint(a).ok());
  auto refused = c->Hint(b);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("max_hinted_blocks_per_session"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("bound of 12"), std::string::npos)
      << refused.status().message();
  // A hint longer than the daemon allows is a clear error too.
  auto too_long = c->Hint(b, 60'000);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("server.max_hint_ttl_ms"), std::string::npos)
      << too_long.status().message();
  // The session goes on; nothing of b was protected.
  auto s = StatsOf(*c);
  EXPECT_EQ(s["hinted_now"], "8");
  EXPECT_EQ(s["refused.max_hinted_blocks_per_session"], "1");
  // Another worker has a bound of its own.
  auto other = Connect();
  ASSERT_NE(other, nullptr);
  auto h = other->Hint(b);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->blocks, 8u);
  // Withdrawing makes room under the bound again.
  auto withdrawn = c->Unhint(a);
  ASSERT_TRUE(withdrawn.ok()) << withdrawn.status().ToString();
  EXPECT_EQ(*withdrawn, 8u);
  EXPECT_TRUE(c->Hint(std::span(b).first(4)).ok());
  EXPECT_EQ(StatsOf(*c)["hinted_now"], "8");  // b's eight, hinted by both
}

TEST_F(DaemonHintTest, AHintedSsdBlockIsServedFromTheHost) {
  StartWithSsd();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const auto early = Put(*c, 1);
  for (uint32_t seed = 10; seed < 22; ++seed) Put(*c, seed);  // pushes it to disk
  Settle(*c);
  auto where = c->Lookup(early);
  ASSERT_TRUE(where.ok());
  ASSERT_EQ(where->tiers, std::vector<WireTier>(8, WireTier::kSsd));

  auto h = c->Hint(early);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->blocks, 8u);
  EXPECT_EQ(h->prefetching, 8u);
  Settle(*c);
  where = c->Lookup(early);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->tiers, std::vector<WireTier>(8, WireTier::kHost));
  auto before = StatsOf(*c);
  auto lease = c->Acquire(early);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(MatchesPattern(lease->Bytes(i), early[i]));
  ASSERT_TRUE(lease->Release().ok());
  auto after = StatsOf(*c);
  EXPECT_EQ(after["prefetched_blocks"], "8");
  EXPECT_EQ(after["prefetched_used"], "8");
  // The acquire itself read nothing from the disk.
  EXPECT_EQ(after["tier.host.promotions_in"], before["tier.host.promotions_in"]);
  EXPECT_EQ(after["checksum_failures"], "0");
}

TEST_F(DaemonHintTest, HintsForKeysNeverWrittenAreHarmless) {
  Start();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const auto written = Put(*c, 1);
  const auto never = c->Keys(RandomPrompt(999, 16));
  auto h = c->Hint(never);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->blocks, 0u);
  auto w = c->Unhint(never);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 0u);
  EXPECT_EQ(Cached(*c, never), 0u);
  EXPECT_EQ(Cached(*c, written), 8u);
  auto s = StatsOf(*c);
  EXPECT_EQ(s["hinted_blocks"], "0");
  EXPECT_EQ(s["request_errors"], "0");
}

TEST_F(DaemonHintTest, ASessionsHintsEndWithIt) {
  Start();
  auto watcher = Connect();
  ASSERT_NE(watcher, nullptr);
  {
    auto worker = Connect();
    ASSERT_NE(worker, nullptr);
    const auto a = Put(*worker, 1);
    ASSERT_TRUE(worker->Hint(a).ok());
    EXPECT_EQ(StatsOf(*watcher)["hinted_now"], "8");
  }
  // The worker's connection is closed: its waiting queue is gone.
  std::string now;
  for (int i = 0; i < 500 && (now = StatsOf(*watcher)["hinted_now"]) != "0"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(now, "0");
  EXPECT_EQ(StatsOf(*watcher)["hints_withdrawn"], "8");
}

}  // namespace
}  // namespace kvtier::testing

// The SSD tier through the real daemon and client: blocks forced down to
// disk come back after a clean stop and after kill -9; a crash loop never
// serves a wrong byte.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
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

class SsdRestartTest : public ::testing::Test {
 protected:
  void TearDown() override { daemon_.reset(); }
  void Start(bool write_through = false) {
    // 1 MiB of host holds 64 blocks of 16 KiB; the rest goes to disk, whose
    // file is written before serving so that no demotion finds it unready.
    std::vector<std::string> args = {"--ssd-dir",       data_ / "ssd", "--ssd-capacity", "256MiB",
                                     "--host-capacity", "1MiB",        "--host-slab",    "256KiB",
                                     "--ssd-prepare",   "foreground"};
    if (write_through) args.push_back("--ssd-write-through");
    daemon_ = Daemon::Start(args);
    ASSERT_NE(daemon_, nullptr);
  }
  std::unique_ptr<Client> Connect() {
    return ConnectClient(TestClientOptions(daemon_->socket()), daemon_.get());
  }
  static std::vector<BlockKey> Put(Client& c, const std::vector<TokenId>& tokens) {
    const auto keys = c.Keys(tokens);
    auto w = c.Allocate(keys);
    if (!w.ok()) return {};
    for (size_t i = 0; i < w->size(); ++i) {
      if (w->state(i) == WireWriteState::kAllocated) FillPattern(w->Bytes(i), keys[i]);
    }
    if (!w->Commit().ok()) return {};
    return keys;
  }

  TempDir data_{"/var/tmp/kvtier-ssd-daemon"};  // the ssd tier's
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(SsdRestartTest, BlocksForcedToDiskComeBackAfterARestart) {
  Start();
  std::vector<std::vector<BlockKey>> chains;
  {
    auto c = Connect();
    for (uint32_t seed = 0; seed < 24; ++seed) chains.push_back(Put(*c, RandomPrompt(seed, 8)));
    Settle(*c);
    // 192 blocks into a host tier of 64: the early chains went to disk.
    auto where = c->Lookup(chains[0]);
    ASSERT_EQ(where->tiers.size(), 8u);
    EXPECT_EQ(where->tiers[0], WireTier::kSsd);
  }
  for (int sig : {SIGTERM, SIGKILL}) {
    const int status = daemon_->Stop(sig);
    if (sig == SIGTERM) {
      ASSERT_TRUE(WIFEXITED(status));
      ASSERT_EQ(WEXITSTATUS(status), 0) << daemon_->Log();
    }
    Start();
    auto c = Connect();
    EXPECT_NE(daemon_->Log().find("warm restart"), std::string::npos) << daemon_->Log();
    // The same tokens give the same keys (the secret lives in the data dir),
    // and the chains that were on disk are there with their bytes.
    EXPECT_EQ(c->Keys(RandomPrompt(0, 8)), chains[0]);
    for (size_t i = 0; i < 8; ++i) {
      auto lease = c->Acquire(chains[i]);
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      ASSERT_EQ(lease->size(), 8u) << "chain " << i << " after signal " << sig;
      for (size_t b = 0; b < 8; ++b) EXPECT_TRUE(MatchesPattern(lease->Bytes(b), chains[i][b]));
    }
    EXPECT_EQ(StatsOf(*c)["checksum_failures"], "0");
    // Push them down again for the next round.
    for (uint32_t seed = 100; seed < 112; ++seed) Put(*c, RandomPrompt(seed, 8));
    Settle(*c);
  }
}

TEST_F(SsdRestartTest, WriteThroughLosesNothingCommittedToAKill) {
  Start(/*write_through=*/true);
  std::vector<std::vector<BlockKey>> chains;
  {
    auto c = Connect();
    for (uint32_t seed = 0; seed < 6; ++seed) chains.push_back(Put(*c, RandomPrompt(seed, 8)));
    Settle(*c);  // the writes have landed (no clean stop follows)
    auto where = c->Lookup(chains[5]);
    EXPECT_EQ(where->tiers[0], WireTier::kHost);  // still served from memory
    EXPECT_EQ(StatsOf(*c)["shadow_blocks"], "48");
  }
  daemon_->Stop(SIGKILL);
  Start(true);
  auto c = Connect();
  for (const auto& chain : chains) {
    auto lease = c->Acquire(chain);
    ASSERT_TRUE(lease.ok());
    ASSERT_EQ(lease->size(), 8u);
    for (size_t b = 0; b < 8; ++b) EXPECT_TRUE(MatchesPattern(lease->Bytes(b), chain[b]));
  }
}

// An MLA latent namespace's blocks on disk come back after kill -9 as
// latent blocks: the namespace table keeps the layout's kind.
TEST_F(SsdRestartTest, ALatentNamespaceComesBackAsLatent) {
  client::ClientOptions o = TestClientOptions("", "deepseek-test");
  o.layout = Layout{2, 1, 128, DType::kBFloat16, 16, KvKind::kLatent};
  Start(/*write_through=*/true);
  std::vector<std::vector<BlockKey>> chains;
  {
    o.socket_path = daemon_->socket();
    auto c = ConnectClient(o, daemon_.get());
    ASSERT_NE(c, nullptr);
    for (uint32_t seed = 0; seed < 3; ++seed) chains.push_back(Put(*c, RandomPrompt(seed, 8)));
    Settle(*c);
  }
  daemon_->Stop(SIGKILL);
  Start(true);
  o.socket_path = daemon_->socket();
  client::ClientOptions kv = o;
  kv.layout.kind = KvKind::kKeyValue;
  auto refused = client::Client::Connect(kv);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("kind=latent"), std::string::npos)
      << refused.status().ToString();
  auto c = ConnectClient(o, daemon_.get());
  ASSERT_NE(c, nullptr);
  for (const auto& chain : chains) {
    auto lease = c->Acquire(chain);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_EQ(lease->size(), 8u);
    for (size_t b = 0; b < 8; ++b) EXPECT_TRUE(MatchesPattern(lease->Bytes(b), chain[b]));
  }
}

TEST_F(SsdRestartTest, CrashLoopNeverServesAWrongByte) {
  std::set<std::pair<uint32_t, size_t>> written;  // (prompt seed, blocks)
  std::mt19937 rng(42);
  uint64_t served = 0, lost = 0;
  uint32_t next_seed = 0;
  for (int round = 0; round < 10; ++round) {
    Start();
    {
      // Check everything written so far: a hit must carry exactly its bytes.
      auto c = Connect();
      ASSERT_NE(c, nullptr);
      for (const auto& [seed, blocks] : written) {
        const auto keys = c->Keys(RandomPrompt(seed, blocks));
        auto got = c->GetInline(keys);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        for (size_t i = 0; i < got->hits; ++i) {
          ASSERT_TRUE(MatchesPattern(
              std::span(got->data).subspan(i * c->block_bytes(), c->block_bytes()), keys[i]))
              << "wrong byte in round " << round;
        }
        served += got->hits;
        lost += keys.size() - got->hits;
      }
      EXPECT_EQ(StatsOf(*c)["checksum_failures"], "0");
    }
    // Write continuously from a client, and kill -9 the daemon at a random moment.
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      auto c = Connect();
      if (!c) return;
      while (!stop.load()) {
        const uint32_t seed = next_seed++;
        const size_t blocks = 1 + seed % 8;
        if (Put(*c, RandomPrompt(seed, blocks)).empty()) break;  // the daemon is gone
        written.insert({seed, blocks});
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 250));
    daemon_->Stop(SIGKILL);
    stop = true;
    writer.join();
  }
  RecordProperty("blocks_served", std::to_string(served));
  RecordProperty("blocks_lost", std::to_string(lost));
  std::printf("crash loop: %zu prompts written, %lu blocks served back, %lu lost\n", written.size(),
              static_cast<unsigned long>(served), static_cast<unsigned long>(lost));
  EXPECT_GT(served, 0u);
}

}  // namespace
}  // namespace kvtier::testing

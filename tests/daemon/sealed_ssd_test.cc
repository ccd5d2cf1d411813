// Block keys through the real daemon and client (server.block_keys_file):
// blocks forced down to the SSD are sealed there (no plaintext in the slot
// file) and come back whole; a restart with the keys rotated keeps them; a
// restart without the keys, or with a key file others may read, is refused
// with a clear error; a wrong key makes misses, never wrong bytes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "support/daemon_client.h"
#include "support/process.h"

namespace kvtier::testing {
namespace {

using client::Client;
using prefix_index::BlockKey;
using protocol::WireTier;

// "<id>:<64 hex digits>" from a seed.
std::string KeyEntry(uint32_t id, char fill) {
  return std::to_string(id) + ":" + std::string(64, fill);
}

class SealedSsdTest : public ::testing::Test {
 protected:
  void TearDown() override { daemon_.reset(); }
  std::vector<std::string> Args() const {
    // 1 MiB of host holds 64 blocks of 16 KiB; the rest goes to disk.
    return {"--ssd-dir",       data_ / "ssd", "--ssd-capacity",    "256MiB",
            "--host-capacity", "1MiB",        "--host-slab",       "256KiB",
            "--ssd-prepare",   "foreground",  "--block-keys-file", keys_};
  }
  void WriteKeys(const std::string& text, mode_t mode = 0600) {
    {
      std::ofstream f(keys_, std::ios::trunc);
      f << text << "\n";
    }
    ASSERT_EQ(::chmod(keys_.c_str(), mode), 0);
  }
  void Start() {
    daemon_ = Daemon::Start(Args());
    ASSERT_NE(daemon_, nullptr);
  }
  // Starts kvtierd expecting it to refuse; returns what it said.
  std::string StartRefused(std::vector<std::string> args) {
    std::string err;
    args.insert(args.end(), {"--socket", data_ / "refused.sock", "--no-reserve-memory",
                             "--metrics-address", ""});
    const int status = RunDaemonToExit(args, &err);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << err;
    return err;
  }
  std::unique_ptr<Client> Connect() {
    return ConnectClient(TestClientOptions(daemon_->socket()), daemon_.get());
  }

  TempDir data_{"/var/tmp/kvtier-sealed-ssd"};
  std::string keys_ = data_ / "block-keys";
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(SealedSsdTest, SealedOnDiskBackAfterRotationRefusedWithoutKeys) {
  WriteKeys(KeyEntry(1, 'a'));
  Start();
  EXPECT_NE(daemon_->Log().find("are sealed (AES-256-GCM, "), std::string::npos) << daemon_->Log();
  EXPECT_NE(daemon_->Log().find(") under block key 1;"), std::string::npos) << daemon_->Log();
  std::vector<std::vector<BlockKey>> chains;
  size_t block_bytes = 0;
  uint64_t under_1 = 0;
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    block_bytes = c->block_bytes();
    for (uint32_t seed = 0; seed < 24; ++seed)
      chains.push_back(PutPattern(*c, RandomPrompt(seed, 8)));
    Settle(*c);
    auto where = c->Lookup(chains[0]);
    ASSERT_TRUE(where.ok());
    ASSERT_EQ(where->tiers.size(), 8u);
    EXPECT_EQ(where->tiers[0], WireTier::kSsd);
    auto lease = c->Acquire(chains[0]);  // promoted from the disk: opened
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_EQ(lease->size(), 8u);
    for (size_t b = 0; b < 8; ++b) EXPECT_TRUE(MatchesPattern(lease->Bytes(b), chains[0][b]));
    EXPECT_EQ(StatsOf(*c)["checksum_failures"], "0");
    // Every block on the disk's record is under key 1 (records of freed
    // blocks not yet overwritten included: a restart would bring them back).
    // The promotion above made room by demoting others: once they are on
    // the disk (a block in flight counts in the tier before its record
    // does).
    Settle(*c);
    auto stats = StatsOf(*c);
    under_1 = std::stoull("0" + stats["tier.ssd.sealed_blocks.key_1"]);
    EXPECT_GT(under_1, 0u);
    EXPECT_GE(under_1, std::stoull(stats["tier.ssd.blocks"]));
    EXPECT_EQ(stats.count("tier.ssd.sealed_blocks.key_2"), 0u);
  }
  ASSERT_EQ(daemon_->Stop(SIGTERM), 0) << daemon_->Log();
  // No block's bytes in the clear in the slot file.
  {
    std::ifstream in(data_ / "ssd/blocks.dat", std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), {});
    for (size_t i = 1; i < 4; ++i) {
      std::vector<std::byte> plain(block_bytes);
      FillPattern(plain, chains[i][3]);
      const std::string_view run(reinterpret_cast<const char*>(plain.data()) + block_bytes / 2, 64);
      EXPECT_EQ(file.find(run), std::string::npos) << "chain " << i << " in the clear on disk";
    }
  }

  // A key file others may read: refused at start, saying what to do.
  WriteKeys(KeyEntry(1, 'a'), 0644);
  std::string err = StartRefused(Args());
  EXPECT_NE(err.find("mode 0644"), std::string::npos) << err;
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  // No keys at all over sealed blocks: refused, naming the key and the settings.
  std::vector<std::string> no_keys = Args();
  no_keys.resize(no_keys.size() - 2);
  err = StartRefused(no_keys);
  EXPECT_NE(err.find("sealed under key 1"), std::string::npos) << err;
  EXPECT_NE(err.find("server.block_keys_file"), std::string::npos) << err;
  // A key file named but missing: refused.
  ::unlink(keys_.c_str());
  err = StartRefused(Args());
  EXPECT_NE(err.find(keys_), std::string::npos) << err;

  // Rotated: a new current key, the old one behind it. The blocks on disk
  // come back; new ones are sealed under key 2.
  WriteKeys(KeyEntry(2, 'b') + "\n" + KeyEntry(1, 'a'));
  Start();
  EXPECT_NE(daemon_->Log().find("under key 1"), std::string::npos) << daemon_->Log();
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    // The count by key survives the restart (blocks promoted from the disk
    // below leave it).
    EXPECT_EQ(std::stoull("0" + StatsOf(*c)["tier.ssd.sealed_blocks.key_1"]), under_1);
    for (size_t i = 1; i < 4; ++i) {
      auto lease = c->Acquire(chains[i]);
      ASSERT_TRUE(lease.ok());
      ASSERT_EQ(lease->size(), 8u) << "chain " << i;
      for (size_t b = 0; b < 8; ++b) EXPECT_TRUE(MatchesPattern(lease->Bytes(b), chains[i][b]));
    }
    EXPECT_EQ(StatsOf(*c)["checksum_failures"], "0");
    // New demotions are under key 2, and the blocks under key 1 only drain (the operator removes
    // key 1 once it has none).
    for (uint32_t seed = 100; seed < 116; ++seed) PutPattern(*c, RandomPrompt(seed, 8));
    Settle(*c);
    auto stats = StatsOf(*c);
    const uint64_t under_2 = std::stoull("0" + stats["tier.ssd.sealed_blocks.key_2"]);
    EXPECT_GT(under_2, 0u);
    EXPECT_LE(std::stoull("0" + stats["tier.ssd.sealed_blocks.key_1"]), under_1);
    // `kvtier stats` says the same.
    auto [code, out] = Shell(std::string(KVTIER_CLI_PATH) + " stats --socket " + daemon_->socket());
    EXPECT_EQ(code, 0) << out;
    EXPECT_NE(out.find(std::to_string(under_2) + " under key 2"), std::string::npos) << out;
  }
  ASSERT_EQ(daemon_->Stop(SIGKILL) & 0x7f, SIGKILL);

  // Key 1's material replaced by another (an operator's mistake): the blocks
  // do not open. Misses, counted, never a wrong byte; the daemon serves on.
  WriteKeys(KeyEntry(2, 'b') + "\n" + KeyEntry(1, 'c'));
  Start();
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  size_t served = 0;
  for (size_t i = 4; i < 12; ++i) {
    auto lease = c->Acquire(chains[i]);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    for (size_t b = 0; b < lease->size(); ++b) {
      EXPECT_TRUE(MatchesPattern(lease->Bytes(b), chains[i][b]));
      ++served;
    }
  }
  EXPECT_LT(served, 8u * 8);
  EXPECT_NE(StatsOf(*c)["checksum_failures"], "0");
  EXPECT_EQ(PutPattern(*c, RandomPrompt(500, 4)).size(), 4u);
}

}  // namespace
}  // namespace kvtier::testing

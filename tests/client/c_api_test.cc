// The C API against FakeDaemon: the same session driven through kvtier_c.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "client/kvtier_c.h"
#include "fake_daemon.h"

namespace kvtier::client {
namespace {

TEST(CApiTest, FullSession) {
  testing::FakeDaemon daemon(Layout{2, 2, 8, DType::kFloat16, 4}, 16);
  const kvtier_layout layout{2, 2, 8, KVTIER_DTYPE_FP16, 4, KVTIER_KIND_KV};
  kvtier_client* c = nullptr;
  ASSERT_EQ(kvtier_connect(daemon.path().c_str(), "m", nullptr, &layout, &c), KVTIER_OK)
      << kvtier_last_error(nullptr);
  const uint64_t bb = kvtier_block_bytes(c);
  ASSERT_EQ(bb, 512u);

  std::vector<uint32_t> tokens(12);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  kvtier_key keys[3];
  size_t n = 0;
  EXPECT_EQ(kvtier_keys(c, tokens.data(), tokens.size(), keys, 1, &n), KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(n, 3u);
  ASSERT_EQ(kvtier_keys(c, tokens.data(), tokens.size(), keys, 3, &n), KVTIER_OK);

  std::vector<unsigned char> data(bb, 0x5a);
  size_t written = 0;
  ASSERT_EQ(kvtier_put(c, keys, 1, data.data(), data.size(), &written), KVTIER_OK);
  EXPECT_EQ(written, 1u);

  kvtier_write* w = nullptr;
  ASSERT_EQ(kvtier_allocate(c, keys, 3, KVTIER_TIER_HOST, &w), KVTIER_OK) << kvtier_last_error(c);
  void* ptr = nullptr;
  int state = -1;
  ASSERT_EQ(kvtier_write_block(w, 0, &ptr, &state), KVTIER_OK);
  EXPECT_EQ(state, KVTIER_WRITE_EXISTS);
  EXPECT_EQ(ptr, nullptr);
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_EQ(kvtier_write_block(w, i, &ptr, &state), KVTIER_OK);
    ASSERT_EQ(state, KVTIER_WRITE_ALLOCATED);
    std::memset(ptr, static_cast<int>(i), bb);
  }
  EXPECT_EQ(kvtier_write_block(w, 3, &ptr, &state), KVTIER_INVALID_ARGUMENT);
  ASSERT_EQ(kvtier_commit(w), KVTIER_OK);

  size_t hits = 0;
  ASSERT_EQ(kvtier_lookup(c, keys, 3, &hits), KVTIER_OK);
  EXPECT_EQ(hits, 3u);

  kvtier_read* r = nullptr;
  ASSERT_EQ(kvtier_acquire(c, keys, 3, KVTIER_TIER_HOST, &r), KVTIER_OK);
  ASSERT_EQ(kvtier_read_count(r), 3u);
  const void* block = nullptr;
  ASSERT_EQ(kvtier_read_block(r, 2, &block), KVTIER_OK);
  EXPECT_EQ(static_cast<const unsigned char*>(block)[bb - 1], 2);
  ASSERT_EQ(kvtier_release(r), KVTIER_OK);

  std::vector<unsigned char> out(3 * bb);
  EXPECT_EQ(kvtier_get(c, keys, 3, out.data(), bb, &hits), KVTIER_INVALID_ARGUMENT);
  ASSERT_EQ(kvtier_get(c, keys, 3, out.data(), out.size(), &hits), KVTIER_OK);
  EXPECT_EQ(hits, 3u);
  EXPECT_EQ(out[0], 0x5a);
  EXPECT_EQ(out[bb], 1);
  std::fill(out.begin(), out.end(), 0);
  EXPECT_EQ(kvtier_copy(c, keys, 3, out.data(), bb, &hits), KVTIER_INVALID_ARGUMENT);
  ASSERT_EQ(kvtier_copy(c, keys, 3, out.data(), out.size(), &hits), KVTIER_OK)
      << kvtier_last_error(c);
  EXPECT_EQ(hits, 3u);
  EXPECT_EQ(out[0], 0x5a);
  EXPECT_EQ(out[2 * bb + bb - 1], 2);

  char json[256];
  size_t len = 0;
  EXPECT_EQ(kvtier_stats_json(c, json, 4, &len), KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(std::strlen(json), 3u);
  ASSERT_EQ(kvtier_stats_json(c, json, sizeof(json), &len), KVTIER_OK);
  EXPECT_EQ(std::string(json),
            R"({"sessions":1,"tier.host.blocks":3,"tier.host.description":"fake \"arena\""})");

  EXPECT_EQ(kvtier_acquire(c, keys, 3, 2, &r), KVTIER_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvtier_last_error(c)).find("not addressable"), std::string::npos);
  uint64_t removed = 0;
  ASSERT_EQ(kvtier_remove(c, keys, 3, &removed), KVTIER_OK);
  EXPECT_EQ(removed, 3u);
  kvtier_close(c);
}

// An MLA latent layout reaches the daemon as latent (the fake compares the
// whole layout); an unknown kind never leaves the process.
TEST(CApiTest, TheLayoutKindIsMappedAndUnknownOnesRefused) {
  testing::FakeDaemon daemon(Layout{2, 1, 576, DType::kBFloat16, 4, KvKind::kLatent}, 16);
  kvtier_layout layout{2, 1, 576, KVTIER_DTYPE_BF16, 4, KVTIER_KIND_LATENT};
  kvtier_client* c = nullptr;
  ASSERT_EQ(kvtier_connect(daemon.path().c_str(), "m", nullptr, &layout, &c), KVTIER_OK)
      << kvtier_last_error(nullptr);
  EXPECT_EQ(kvtier_block_bytes(c), 2u * 576 * 4 * 2);
  kvtier_close(c);
  layout.kind = KVTIER_KIND_KV;
  EXPECT_EQ(kvtier_connect(daemon.path().c_str(), "m", nullptr, &layout, &c),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  layout.kind = 7;
  EXPECT_EQ(kvtier_connect(daemon.path().c_str(), "m", nullptr, &layout, &c),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvtier_last_error(nullptr)).find("unknown layout kind 7"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier::client

#include "prefix_index/key_hasher.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>
#include <string_view>

namespace kvtier::prefix_index {
namespace {

std::vector<std::byte> Secret(std::string_view s) {
  std::vector<std::byte> out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

KeyHasher MakeHasher(std::string_view secret, uint32_t block_tokens) {
  auto h = KeyHasher::Create(Secret(secret), block_tokens);
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return *h;
}

std::vector<TokenId> RandomTokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> dist(0, 150'000);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

TEST(KeyHasherTest, SameTokensAndSecretGiveSameKeys) {
  const auto tokens = RandomTokens(16 * 10, 1);
  const KeyHasher a = MakeHasher("namespace-secret-0001", 16);
  const KeyHasher b = MakeHasher("namespace-secret-0001", 16);
  const auto ka = a.Chain(tokens);
  ASSERT_EQ(ka.size(), 10u);
  EXPECT_EQ(ka, b.Chain(tokens));
  EXPECT_EQ(a.root(), b.root());
  // All keys of one chain are distinct.
  EXPECT_EQ(std::set<BlockKey>(ka.begin(), ka.end()).size(), ka.size());
}

TEST(KeyHasherTest, ChangingOneTokenChangesThatBlockAndEveryLaterOne) {
  const KeyHasher h = MakeHasher("namespace-secret-0001", 16);
  const auto tokens = RandomTokens(16 * 8, 2);
  const auto base = h.Chain(tokens);
  for (size_t pos : {size_t{0}, size_t{17}, size_t{16 * 5 + 3}, size_t{16 * 8 - 1}}) {
    auto changed = tokens;
    changed[pos] ^= 1;
    const auto keys = h.Chain(changed);
    const size_t block = pos / 16;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i < block) {
        EXPECT_EQ(keys[i], base[i]) << "pos " << pos << " block " << i;
      } else {
        EXPECT_NE(keys[i], base[i]) << "pos " << pos << " block " << i;
      }
    }
  }
}

TEST(KeyHasherTest, AnotherSecretSharesNoKey) {
  const auto tokens = RandomTokens(16 * 64, 3);
  const auto a = MakeHasher("tenant-a-secret-xyz", 16).Chain(tokens);
  const auto b = MakeHasher("tenant-b-secret-xyz", 16).Chain(tokens);
  std::set<BlockKey> sa(a.begin(), a.end());
  for (const BlockKey& k : b) EXPECT_EQ(sa.count(k), 0u);
  EXPECT_NE(MakeHasher("tenant-a-secret-xyz", 16).root(),
            MakeHasher("tenant-b-secret-xyz", 16).root());
}

TEST(KeyHasherTest, PartialLastBlockGetsNoKey) {
  const KeyHasher h = MakeHasher("namespace-secret-0001", 16);
  EXPECT_EQ(h.Chain(RandomTokens(15, 4)).size(), 0u);
  EXPECT_EQ(h.Chain(RandomTokens(16, 4)).size(), 1u);
  const auto tokens = RandomTokens(16 * 3 + 7, 5);
  const auto keys = h.Chain(tokens);
  ASSERT_EQ(keys.size(), 3u);
  // The trailing partial block does not disturb the full ones.
  EXPECT_EQ(keys, h.Chain(std::span(tokens).first(48)));
}

TEST(KeyHasherTest, ChainCanContinueFromAParent) {
  const KeyHasher h = MakeHasher("namespace-secret-0001", 16);
  const auto tokens = RandomTokens(16 * 6, 6);
  const auto whole = h.Chain(tokens);
  std::vector<BlockKey> tail;
  h.AppendChain(whole[1], std::span(tokens).subspan(32), {}, &tail);
  ASSERT_EQ(tail.size(), 4u);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), whole.begin() + 2));
}

TEST(KeyHasherTest, ExtraBytesSeparateOtherwiseEqualBlocks) {
  const KeyHasher h = MakeHasher("namespace-secret-0001", 16);
  const auto tokens = RandomTokens(32, 7);
  const auto lora1 = Secret("lora:1");
  const auto lora2 = Secret("lora:2");
  EXPECT_NE(h.Chain(tokens, lora1), h.Chain(tokens, lora2));
  EXPECT_NE(h.Chain(tokens, lora1), h.Chain(tokens));
  EXPECT_EQ(h.Chain(tokens, lora1), h.Chain(tokens, lora1));
}

TEST(KeyHasherTest, BlockSizeIsPartOfTheChain) {
  const auto tokens = RandomTokens(64, 8);
  const auto k16 = MakeHasher("namespace-secret-0001", 16).Chain(tokens);
  const auto k32 = MakeHasher("namespace-secret-0001", 32).Chain(tokens);
  EXPECT_NE(k16[1], k32[0]);
}

TEST(KeyHasherTest, RejectsShortSecretsAndZeroBlockTokens) {
  EXPECT_EQ(KeyHasher::Create(Secret("short"), 16).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KeyHasher::Create(Secret("namespace-secret-0001"), 0).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KeyHasherTest, LargeBlocksHashEveryToken) {
  // Blocks above the hasher's on-stack buffer take the heap path.
  const KeyHasher h = MakeHasher("namespace-secret-0001", 2048);
  auto tokens = RandomTokens(4096, 9);
  const auto base = h.Chain(tokens);
  tokens[2047] ^= 1;
  const auto changed = h.Chain(tokens);
  EXPECT_NE(base[0], changed[0]);
  EXPECT_NE(base[1], changed[1]);
}

TEST(BlockKeyTest, HexRoundTrip) {
  const BlockKey k{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(k.ToHex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(BlockKey::FromHex(k.ToHex()), k);
  EXPECT_EQ(BlockKey::FromHex("0123456789ABCDEFFEDCBA9876543210"), k);
  EXPECT_FALSE(BlockKey::FromHex("0123"));
  EXPECT_FALSE(BlockKey::FromHex("0123456789abcdeffedcba987654321g"));
}

// The key format is frozen: these vectors were computed once and pinned.
// If this test fails, keys stored by earlier versions (the SSD tier) no
// longer match; change the format only with a format-version bump. Root and
// key[0] were checked against a separate C program calling libxxhash with the
// format documented in key_hasher.h.
TEST(KeyHasherTest, KnownVectors) {
  const KeyHasher h = MakeHasher("kvtier-test-vector-secret", 4);
  std::vector<TokenId> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 1000);
  const auto keys = h.Chain(tokens);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(h.root().ToHex(), "edd40a7bab76879ab450777db2d85c98");
  EXPECT_EQ(keys[0].ToHex(), "567ae219d619fb75b4a4c4e536eb02a1");
  EXPECT_EQ(keys[1].ToHex(), "d1438676f8a6da0ad00dee29fd1847c1");
  EXPECT_EQ(keys[2].ToHex(), "2eb2621776f02a87e07a7a7d9b4f522a");
  const auto extra = Secret("lora:7");
  EXPECT_EQ(h.Chain(tokens, extra)[2].ToHex(), "102aba1d18386885564abbbc58ba4404");
  const KeyHasher h16 = MakeHasher("kvtier-test-vector-secret", 16);
  std::vector<TokenId> t16(16, 7);
  EXPECT_EQ(h16.Chain(t16)[0].ToHex(), "3bcf25a6139c13edd4d4007a3bb9fe6c");
}

}  // namespace
}  // namespace kvtier::prefix_index

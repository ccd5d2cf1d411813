// Block seals (tiers/block_seal.h): AES-256-GCM under keys derived per
// namespace and writer, the block's identity as associated data. Every
// change to the bytes, the seal or the identity must fail to open; nothing
// but the sealed block ever opens.
#include "tiers/block_seal.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace kvtier::tiers {
namespace {

// A key's text: 64 hex digits from a seed.
std::string KeyHex(uint64_t seed) {
  std::string hex;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < 32; ++i) {
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    char b[3];
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned>(x >> 56));
    hex += b;
  }
  return hex;
}

KeyRing Ring(const std::string& text) {
  Result<KeyRing> ring = KeyRing::Parse(text);
  EXPECT_TRUE(ring.ok()) << ring.status().ToString();
  return *ring;
}

std::vector<std::byte> Bytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  uint64_t x = seed + 7;
  for (auto& b : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::byte>(x >> 56);
  }
  return v;
}

SealIdentity Identity(size_t bytes) {
  SealIdentity id;
  id.ns = NamespaceFingerprint("llama", "tenant-a", "layers=2 heads=4");
  id.key = {0x1234, 0x5678};
  id.form = 0;
  id.tier = 2;
  id.bytes = bytes;
  return id;
}

TEST(BlockSealTest, ASealedBlockOpensToItsBytesInPlaceAndInParts) {
  BlockSealer sealer(Ring("1:" + KeyHex(1)));
  for (size_t n : {size_t{1}, size_t{4096}, size_t{256 << 10} + 3}) {
    const std::vector<std::byte> plain = Bytes(n, n);
    const SealIdentity id = Identity(n);
    std::vector<std::byte> sealed(n);
    Result<Seal> seal = sealer.SealBlock(id, plain, sealed);
    ASSERT_TRUE(seal.ok()) << seal.status().ToString();
    EXPECT_EQ(seal->key_id, 1u);
    EXPECT_EQ(seal->writer, sealer.writer());
    if (n >= 16) {
      EXPECT_NE(std::memcmp(sealed.data(), plain.data(), n), 0);
    }

    std::vector<std::byte> whole = sealed;
    ASSERT_TRUE(sealer.Open(id, *seal, whole).ok());
    EXPECT_EQ(whole, plain);

    // In parts of 4 KiB, as the SSD's reads land.
    std::vector<std::byte> parts = sealed;
    Result<BlockSealer::Opener> opener = sealer.StartOpen(id, *seal);
    ASSERT_TRUE(opener.ok());
    for (size_t at = 0; at < n; at += 4096) {
      ASSERT_TRUE(
          opener->Update(std::span(parts).subspan(at, std::min<size_t>(4096, n - at))).ok());
    }
    ASSERT_TRUE(opener->Finish().ok());
    EXPECT_EQ(parts, plain);

    // In place, the other way round.
    std::vector<std::byte> in_place = plain;
    Result<Seal> again = sealer.SealBlock(id, in_place, in_place);
    ASSERT_TRUE(again.ok());
    ASSERT_TRUE(sealer.Open(id, *again, in_place).ok());
    EXPECT_EQ(in_place, plain);
  }
}

// Every byte of the ciphertext, every field of the seal and of the identity:
// changing any one of them makes the block fail to open (Corruption).
TEST(BlockSealTest, AnyChangeToBytesSealOrIdentityFailsToOpen) {
  BlockSealer sealer(Ring("3:" + KeyHex(3) + " 1:" + KeyHex(1)));
  const size_t n = 8192;
  const std::vector<std::byte> plain = Bytes(n, 9);
  const SealIdentity id = Identity(n);
  std::vector<std::byte> sealed(n);
  Result<Seal> seal = sealer.SealBlock(id, plain, sealed);
  ASSERT_TRUE(seal.ok());
  auto opens = [&](const SealIdentity& i, const Seal& s, std::vector<std::byte> bytes) {
    Status st = sealer.Open(i, s, bytes);
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    }
    return st.ok();
  };
  ASSERT_TRUE(opens(id, *seal, sealed));

  for (size_t at : {size_t{0}, size_t{1}, n / 2, n - 1}) {
    for (int bit : {0, 7}) {
      std::vector<std::byte> flipped = sealed;
      flipped[at] ^= std::byte(1u << bit);
      EXPECT_FALSE(opens(id, *seal, flipped)) << "byte " << at << " bit " << bit;
    }
  }
  for (size_t t = 0; t < kSealTagBytes; ++t) {
    Seal s = *seal;
    s.tag[t] ^= std::byte{0x40};
    EXPECT_FALSE(opens(id, s, sealed)) << "tag byte " << t;
  }
  {
    Seal s = *seal;
    s.counter += 1;
    EXPECT_FALSE(opens(id, s, sealed));
    s = *seal;
    s.writer ^= 1;
    EXPECT_FALSE(opens(id, s, sealed));
    s = *seal;
    s.key_id = 1;  // another key of the ring
    EXPECT_FALSE(opens(id, s, sealed));
    s.key_id = 2;  // not in the ring
    EXPECT_FALSE(opens(id, s, sealed));
  }
  SealIdentity other = id;
  other.ns = NamespaceFingerprint("llama", "tenant-b", "layers=2 heads=4");
  EXPECT_FALSE(opens(other, *seal, sealed));
  other = id;
  other.ns = NamespaceFingerprint("llama", "tenant-a", "layers=2 heads=8");
  EXPECT_FALSE(opens(other, *seal, sealed));
  other = id;
  other.key.lo ^= 1;
  EXPECT_FALSE(opens(other, *seal, sealed));
  other = id;
  other.form = 1;
  EXPECT_FALSE(opens(other, *seal, sealed));
  other = id;
  other.tier = 3;
  EXPECT_FALSE(opens(other, *seal, sealed));
  // Cut short: the identity says how long the block is.
  other = id;
  other.bytes = n - 4096;
  EXPECT_FALSE(opens(other, *seal, std::vector<std::byte>(sealed.begin(), sealed.end() - 4096)));
  // Fewer bytes through the opener than the identity names.
  Result<BlockSealer::Opener> opener = sealer.StartOpen(id, *seal);
  ASSERT_TRUE(opener.ok());
  std::vector<std::byte> head(sealed.begin(), sealed.begin() + 4096);
  ASSERT_TRUE(opener->Update(head).ok());
  EXPECT_EQ(opener->Finish().code(), StatusCode::kCorruption);
  // The seal that belongs to another block of the same namespace.
  std::vector<std::byte> sealed2(n);
  Result<Seal> seal2 = sealer.SealBlock(id, Bytes(n, 10), sealed2);
  ASSERT_TRUE(seal2.ok());
  EXPECT_FALSE(opens(id, *seal2, sealed));
  EXPECT_FALSE(opens(id, *seal, sealed2));
}

// No nonce twice under one data key: each seal takes the next counter, the
// same bytes sealed twice differ, and two sealers (processes) draw writers
// of their own, hence data keys of their own.
TEST(BlockSealTest, EverySealTakesANewNonce) {
  const KeyRing ring = Ring("1:" + KeyHex(1));
  BlockSealer a(ring), b(ring);
  EXPECT_NE(a.writer(), b.writer());
  const std::vector<std::byte> plain = Bytes(4096, 1);
  const SealIdentity id = Identity(plain.size());
  std::set<uint64_t> counters;
  std::vector<std::byte> first(plain.size()), second(plain.size()), other(plain.size());
  Result<Seal> s1 = a.SealBlock(id, plain, first);
  Result<Seal> s2 = a.SealBlock(id, plain, second);
  Result<Seal> s3 = b.SealBlock(id, plain, other);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  EXPECT_NE(s1->counter, s2->counter);
  EXPECT_NE(first, second);
  EXPECT_NE(first, other);
  for (int i = 0; i < 1000; ++i) {
    std::vector<std::byte> out(16);
    Result<Seal> s = a.SealBlock(Identity(16), Bytes(16, 2), out);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(counters.insert(s->counter).second);
  }
  // Each process opens the other's blocks: the writer is in the seal.
  ASSERT_TRUE(b.Open(id, *s1, first).ok());
  EXPECT_EQ(first, plain);
}

// Rotation: a ring with a new current key and the old one behind it seals
// under the new key and still opens the old blocks; a ring without the old
// key says so.
TEST(BlockSealTest, ARotatedRingOpensOldBlocksAndSealsUnderTheNewKey) {
  BlockSealer old_ring(Ring("1:" + KeyHex(1)));
  BlockSealer rotated(Ring("2:" + KeyHex(2) + "\n1:" + KeyHex(1) + "\n"));
  BlockSealer only_new(Ring("2:" + KeyHex(2)));
  const std::vector<std::byte> plain = Bytes(4096, 3);
  const SealIdentity id = Identity(plain.size());
  std::vector<std::byte> sealed(plain.size());
  Result<Seal> old_seal = old_ring.SealBlock(id, plain, sealed);
  ASSERT_TRUE(old_seal.ok());

  std::vector<std::byte> copy = sealed;
  ASSERT_TRUE(rotated.Open(id, *old_seal, copy).ok());
  EXPECT_EQ(copy, plain);
  std::vector<std::byte> resealed(plain.size());
  Result<Seal> new_seal = rotated.SealBlock(id, plain, resealed);
  ASSERT_TRUE(new_seal.ok());
  EXPECT_EQ(new_seal->key_id, 2u);

  copy = sealed;
  Status st = only_new.Open(id, *old_seal, copy);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("key 1"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("rotated"), std::string::npos) << st.ToString();
  // Same id, other key material: does not open.
  BlockSealer impostor(Ring("1:" + KeyHex(99)));
  copy = sealed;
  EXPECT_EQ(impostor.Open(id, *old_seal, copy).code(), StatusCode::kCorruption);
}

TEST(BlockSealTest, SealsRoundTripAndMalformedOnesAreRefused) {
  Seal seal;
  seal.key_id = 7;
  seal.writer = 0x0102030405060708ull;
  seal.counter = 42;
  for (size_t i = 0; i < kSealTagBytes; ++i) seal.tag[i] = std::byte(i * 17);
  const auto bytes = EncodeSeal(seal);
  Result<Seal> back = DecodeSeal(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, seal);

  EXPECT_EQ(DecodeSeal(std::span(bytes).first(kSealBytes - 1)).status().code(),
            StatusCode::kCorruption);
  auto bad = bytes;
  bad[0] = std::byte{2};  // another version
  EXPECT_NE(DecodeSeal(bad).status().message().find("version 2"), std::string::npos);
  bad = bytes;
  bad[2] = std::byte{1};  // reserved
  EXPECT_FALSE(DecodeSeal(bad).ok());
  Seal zero = seal;
  zero.key_id = 0;
  EXPECT_FALSE(DecodeSeal(EncodeSeal(zero)).ok());
  zero = seal;
  zero.counter = 0;
  EXPECT_FALSE(DecodeSeal(EncodeSeal(zero)).ok());
}

TEST(BlockSealTest, KeyTextIsParsedAndBadTextNamesTheEntryNotTheKey) {
  Result<KeyRing> ring =
      KeyRing::Parse("# keys\n 5:" + KeyHex(5) + "  # current\n,3:" + KeyHex(3) + "\n");
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_EQ(ring->current_id(), 5u);
  EXPECT_EQ(ring->ids(), (std::vector<uint32_t>{5, 3}));
  EXPECT_NE(ring->Find(3), nullptr);
  EXPECT_EQ(ring->Find(4), nullptr);

  const std::string secret = KeyHex(8);
  struct Case {
    std::string text, says;
  };
  for (const Case& c : std::vector<Case>{
           {"", "no key"},
           {"# only a comment\n", "no key"},
           {secret, "expected <id>:<64 hex digits>"},
           {"x1:" + secret, "not a number"},
           {"0:" + secret, "1 to 4294967295"},
           {"4294967296:" + secret, "1 to 4294967295"},
           {"1:" + secret.substr(2), "64 hex digits, not 62"},
           {"1:" + secret.substr(2) + "zz", "not a hex digit"},
           {"1:" + secret + " 1:" + KeyHex(9), "appears twice"},
       }) {
    Result<KeyRing> r = KeyRing::Parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().ToString();
    EXPECT_EQ(r.status().message().find(secret.substr(4, 40)), std::string::npos)
        << "the message echoes key material: " << r.status().ToString();
  }
}

TEST(BlockSealTest, AKeyFileOthersMayReadIsRefused) {
  kvtier::testing::TempDir dir(::testing::TempDir() + "block_seal_keys_test");
  const std::string path = dir / "keys";
  {
    std::ofstream f(path);
    f << "2:" << KeyHex(2) << "\n1:" << KeyHex(1) << "\n";
  }
  for (mode_t mode : {0600u, 0400u}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    Result<KeyRing> ring = LoadKeyRing(path);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    EXPECT_EQ(ring->current_id(), 2u);
  }
  for (mode_t mode : {0644u, 0640u, 0604u, 0620u}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    Result<KeyRing> ring = LoadKeyRing(path);
    ASSERT_FALSE(ring.ok());
    EXPECT_EQ(ring.status().code(), StatusCode::kPermissionDenied);
    char m[8];
    std::snprintf(m, sizeof(m), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(ring.status().message().find(m), std::string::npos) << ring.status().ToString();
    EXPECT_NE(ring.status().message().find("chmod 600"), std::string::npos);
  }
  EXPECT_EQ(LoadKeyRing(dir / "missing").status().code(), StatusCode::kIoError);
  EXPECT_EQ(LoadKeyRing(dir.path()).status().code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(::symlink(path.c_str(), (dir / "link").c_str()), 0);
  EXPECT_FALSE(LoadKeyRing(dir / "link").ok());  // a link is not followed
  {
    std::ofstream f(dir / "bad");
    f << "1:nothex\n";
  }
  ASSERT_EQ(::chmod((dir / "bad").c_str(), 0600), 0);
  Result<KeyRing> bad = LoadKeyRing(dir / "bad");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(dir / "bad"), std::string::npos);

  // No file named: the environment, else nothing configured.
  ASSERT_EQ(::unsetenv(kBlockKeysEnv), 0);
  EXPECT_EQ(LoadKeyRing("").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(::setenv(kBlockKeysEnv, ("4:" + KeyHex(4)).c_str(), 1), 0);
  Result<KeyRing> env = LoadKeyRing("");
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->current_id(), 4u);
  ASSERT_EQ(::setenv(kBlockKeysEnv, "4:short", 1), 0);
  EXPECT_NE(LoadKeyRing("").status().message().find(kBlockKeysEnv), std::string::npos);
  ASSERT_EQ(::unsetenv(kBlockKeysEnv), 0);
}

}  // namespace
}  // namespace kvtier::tiers

// AES-256-GCM engines (tiers/internal/aes_gcm.h): each gives the GCM
// specification's answers, the engines give each other's ciphertext and tag
// for any split of a message into parts, and a changed byte of the message,
// its associated data or its tag never verifies. Blocks sealed through one
// engine open through the other (tiers/block_seal.h).
#include "tiers/internal/aes_gcm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tiers/block_seal.h"

namespace kvtier::tiers::internal {
namespace {

std::vector<std::byte> Hex(std::string_view hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::vector<std::byte> Bytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 3;
  for (auto& b : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::byte>(x >> 56);
  }
  return v;
}

struct Sealed {
  std::vector<std::byte> text;
  std::array<std::byte, kGcmTagBytes> tag{};
};

// `in` through `engine` in parts of the sizes `parts` gives in turn (the
// last repeated), in place when `in_place`.
Sealed Through(GcmEngine engine, bool encrypt, const std::vector<std::byte>& key,
               const std::vector<std::byte>& nonce, const std::vector<std::byte>& ad,
               const std::vector<std::byte>& in, const std::vector<size_t>& parts, bool in_place,
               const std::array<std::byte, kGcmTagBytes>* verify = nullptr,
               bool* verified = nullptr) {
  auto k = GcmKey::Make(engine, std::span<const std::byte, kGcmKeyBytes>(key.data(), kGcmKeyBytes));
  auto stream = GcmStream::Start(
      k, encrypt, std::span<const std::byte, kGcmNonceBytes>(nonce.data(), kGcmNonceBytes), ad);
  EXPECT_NE(stream, nullptr);
  Sealed out;
  out.text = in_place ? in : std::vector<std::byte>(in.size());
  const std::byte* src = in_place ? out.text.data() : in.data();
  size_t at = 0, p = 0;
  while (at < in.size()) {
    const size_t n = std::min(parts[std::min(p++, parts.size() - 1)], in.size() - at);
    EXPECT_TRUE(stream->Update(src + at, out.text.data() + at, n));
    at += n;
  }
  if (encrypt) {
    EXPECT_TRUE(stream->Tag(out.tag));
  } else {
    *verified = stream->Verify(*verify);
  }
  return out;
}

std::string Name(GcmEngine e) { return std::string(GcmEngineName(e)); }

TEST(AesGcm, OpenSslIsAlwaysThereAndLast) {
  const std::vector<GcmEngine> engines = AvailableGcmEngines();
  ASSERT_FALSE(engines.empty());
  EXPECT_EQ(engines.back(), GcmEngine::kOpenSsl);
  EXPECT_EQ(std::count(engines.begin(), engines.end(), GcmEngine::kOpenSsl), 1);
}

// The GCM specification (McGrew and Viega), test cases 13 and 16: AES-256,
// a 96-bit IV; the empty message under the zero key, and 60 bytes with 20
// of associated data.
TEST(AesGcm, EveryEngineGivesTheSpecificationsAnswers) {
  const auto key = Hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
  const auto nonce = Hex("cafebabefacedbaddecaf888");
  const auto ad = Hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
  const auto plain =
      Hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
          "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
  const auto cipher =
      Hex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
          "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662");
  const auto tag = Hex("76fc6ece0f4e1768cddf8853bb2d551b");
  const auto zero_tag = Hex("530f8afbc74536b9a963b4f1c4cb738b");
  for (GcmEngine e : AvailableGcmEngines()) {
    SCOPED_TRACE(Name(e));
    for (const std::vector<size_t>& parts :
         {std::vector<size_t>{60}, {1}, {7, 16, 5}, {16}, {33, 27}}) {
      const Sealed s = Through(e, true, key, nonce, ad, plain, parts, false);
      EXPECT_EQ(s.text, cipher);
      EXPECT_TRUE(std::equal(s.tag.begin(), s.tag.end(), tag.begin()));
      std::array<std::byte, kGcmTagBytes> t{};
      std::copy(tag.begin(), tag.end(), t.begin());
      bool ok = false;
      const Sealed opened = Through(e, false, key, nonce, ad, cipher, parts, true, &t, &ok);
      EXPECT_TRUE(ok);
      EXPECT_EQ(opened.text, plain);
    }
    const Sealed empty = Through(e, true, std::vector<std::byte>(32), std::vector<std::byte>(12),
                                 {}, {}, {1}, false);
    EXPECT_TRUE(std::equal(empty.tag.begin(), empty.tag.end(), zero_tag.begin()));
  }
}

TEST(AesGcm, EnginesAgreeOnEveryLengthAndSplit) {
  const std::vector<GcmEngine> engines = AvailableGcmEngines();
  if (engines.size() < 2) {
    GTEST_SKIP() << "this CPU has no AVX-512 VAES (or the build no ipsec-mb): OpenSSL alone";
  }
  const auto key = Bytes(32, 1);
  const auto nonce = Bytes(12, 2);
  const auto ad = Bytes(67, 3);
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{255},
                   size_t{4097}, size_t{65536 + 3}, size_t{2} << 20}) {
    const auto plain = Bytes(n, n);
    for (const std::vector<size_t>& parts :
         {std::vector<size_t>{n + 1}, {1, 3, 16, 64, 1000}, {65536}, {512 << 10}, {13, 65536}}) {
      SCOPED_TRACE(std::to_string(n) + " bytes, first part " + std::to_string(parts[0]));
      const Sealed a = Through(engines[0], true, key, nonce, ad, plain, parts, false);
      const Sealed b = Through(engines[1], true, key, nonce, ad, plain, {n + 1}, true);
      EXPECT_EQ(a.text, b.text);
      EXPECT_EQ(a.tag, b.tag);
      // Each opens the other's, in other parts.
      bool ok = false;
      EXPECT_EQ(Through(engines[1], false, key, nonce, ad, a.text, parts, true, &a.tag, &ok).text,
                plain);
      EXPECT_TRUE(ok);
      ok = false;
      EXPECT_EQ(Through(engines[0], false, key, nonce, ad, b.text, {7}, false, &b.tag, &ok).text,
                plain);
      EXPECT_TRUE(ok);
    }
  }
}

TEST(AesGcm, NoChangedByteVerifies) {
  const auto key = Bytes(32, 9);
  const auto nonce = Bytes(12, 10);
  const auto ad = Bytes(40, 11);
  const auto plain = Bytes(5000, 12);
  for (GcmEngine e : AvailableGcmEngines()) {
    SCOPED_TRACE(Name(e));
    const Sealed s = Through(e, true, key, nonce, ad, plain, {4096}, false);
    bool ok = true;
    for (size_t at : {size_t{0}, size_t{17}, size_t{4999}}) {
      auto text = s.text;
      text[at] ^= std::byte{0x01};
      Through(e, false, key, nonce, ad, text, {4096}, true, &s.tag, &ok);
      EXPECT_FALSE(ok) << "a flipped byte at " << at;
    }
    auto tag = s.tag;
    tag[15] ^= std::byte{0x80};
    Through(e, false, key, nonce, ad, s.text, {4096}, true, &tag, &ok);
    EXPECT_FALSE(ok) << "a flipped tag";
    auto other_ad = ad;
    other_ad[39] ^= std::byte{0x01};
    Through(e, false, key, nonce, other_ad, s.text, {4096}, true, &s.tag, &ok);
    EXPECT_FALSE(ok) << "other associated data";
    auto other_nonce = nonce;
    other_nonce[0] ^= std::byte{0x01};
    Through(e, false, key, other_nonce, ad, s.text, {4096}, true, &s.tag, &ok);
    EXPECT_FALSE(ok) << "another nonce";
    Through(e, false, Bytes(32, 99), nonce, ad, s.text, {4096}, true, &s.tag, &ok);
    EXPECT_FALSE(ok) << "another key";
    Through(e, false, key, nonce, ad, std::vector<std::byte>(s.text.begin(), s.text.end() - 1),
            {4096}, true, &s.tag, &ok);
    EXPECT_FALSE(ok) << "one byte short";
  }
}

// Blocks sealed by a BlockSealer on one engine open on a BlockSealer of the
// other (a node with VAES and one without share a cluster), and a changed
// identity fails on both.
TEST(AesGcm, BlocksSealedThroughOneEngineOpenThroughTheOther) {
  const std::vector<GcmEngine> engines = AvailableGcmEngines();
  if (engines.size() < 2) {
    GTEST_SKIP() << "this CPU has no AVX-512 VAES (or the build no ipsec-mb): OpenSSL alone";
  }
  Result<KeyRing> ring =
      KeyRing::Parse("7:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  ASSERT_TRUE(ring.ok());
  BlockSealer fast(*ring, engines[0]), portable(*ring, engines[1]);
  EXPECT_NE(fast.cipher(), portable.cipher());
  SealIdentity id;
  id.ns = NamespaceFingerprint("m", "s", "l");
  id.key = {1, 2};
  id.tier = kSealTierSsd;
  const auto plain = Bytes(256 << 10, 5);
  id.bytes = plain.size();
  for (BlockSealer* sealer : {&fast, &portable}) {
    BlockSealer* opener = sealer == &fast ? &portable : &fast;
    SCOPED_TRACE(sealer->cipher() + " -> " + opener->cipher());
    std::vector<std::byte> bytes(plain.size());
    Result<Seal> seal = sealer->SealBlock(id, plain, bytes);
    ASSERT_TRUE(seal.ok()) << seal.status().ToString();
    EXPECT_NE(bytes, plain);
    std::vector<std::byte> wrong = bytes;
    SealIdentity moved = id;
    moved.key.lo ^= 1;
    EXPECT_EQ(opener->Open(moved, *seal, wrong).code(), StatusCode::kCorruption);
    ASSERT_TRUE(opener->Open(id, *seal, bytes).ok());
    EXPECT_EQ(bytes, plain);
  }
}

}  // namespace
}  // namespace kvtier::tiers::internal

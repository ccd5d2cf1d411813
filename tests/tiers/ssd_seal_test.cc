// The SSD store with block keys (SsdOptions::sealer): no plaintext in the
// slot file, and every attack on the directory (bit flips, swapped slots,
// truncation, replayed old versions, records changed in the index, wrong or
// rotated keys) is a miss or a clear error at start, never a wrong byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/units.h"
#include "support/temp_dir.h"
#include "tiers/block_bytes.h"
#include "tiers/block_seal.h"
#include "tiers/internal/block_file.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::tiers::internal {
namespace {

std::string KeyText(uint32_t id, uint64_t seed) {
  std::string hex;
  for (uint64_t i = 0; i < 4; ++i) {
    char b[17];
    std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(SeedMix(seed + i)));
    hex += b;
  }
  return std::to_string(id) + ":" + hex;
}

std::shared_ptr<BlockSealer> Sealer(const std::string& text) {
  Result<KeyRing> ring = KeyRing::Parse(text);
  EXPECT_TRUE(ring.ok()) << ring.status().ToString();
  return std::make_shared<BlockSealer>(*ring);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Copies `bytes` bytes of the file at `path` from offset `from` to `to`.
void CopyWithin(const std::string& path, uint64_t from, uint64_t to, uint64_t bytes) {
  std::string all = ReadFile(path);
  ASSERT_LE(std::max(from, to) + bytes, all.size());
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(to));
  f.write(all.data() + from, static_cast<std::streamsize>(bytes));
}

class SsdSealTest : public ::testing::Test {
 protected:
  SsdOptions Options(std::shared_ptr<BlockSealer> sealer) {
    SsdOptions o;
    o.dir = dir_;
    o.capacity_bytes = 64 * kMiB;
    o.direct_io = true;
    o.sealer = std::move(sealer);
    o.file_factory = FaultInjectingFactory(faults_);
    o.note = [](std::string_view) {};
    return o;
  }
  std::unique_ptr<SsdStore> Open(std::shared_ptr<BlockSealer> sealer) {
    auto s = SsdStore::Open(Options(std::move(sealer)));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    for (const char* model : {"m0", "m1"}) {
      EXPECT_TRUE(
          (*s)->RegisterNamespace(model, "salt", Layout{2, 2, 64, DType::kFloat16, 16}).ok());
    }
    return std::move(s).value();
  }
  // Writes block `seed` of `size` bytes under key `key` of namespace `ns`.
  SsdRecord Put(SsdStore& store, uint64_t key, uint64_t seed, size_t size, uint32_t ns = 0) {
    auto slot = store.Allocate(size);
    EXPECT_TRUE(slot.ok()) << slot.status().ToString();
    SsdRecord r;
    r.ns_id = ns;
    r.key = BlockKey{SeedMix(key), key};
    r.slot = *slot;
    Block b = MakeBlock(seed, AlignUp(size, kBlockFileAlignment));
    auto rec = store.Write(r, b.span(), size);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    return rec.ok() ? *rec : SsdRecord{};
  }
  // OK and the block's bytes, or the read's error.
  Status Get(const SsdStore& store, const SsdRecord& r, uint64_t seed) {
    Block want = MakeBlock(seed, r.block_bytes);
    Block got = MakeBlock(~seed, AlignUp(r.block_bytes, kBlockFileAlignment));
    Status st = store.Read(r, got.span());
    if (st.ok()) {
      EXPECT_EQ(std::memcmp(got.span().data(), want.span().data(), r.block_bytes), 0)
          << "a read said OK with wrong bytes";
    }
    return st;
  }
  std::vector<SsdRecord> Scan(SsdStore& store, SsdScanSummary* summary = nullptr) {
    std::vector<SsdRecord> out;
    auto scanned = store.ForEachRecord([&](const SsdRecord& r) {
      out.push_back(r);
      return Status::Ok();
    });
    EXPECT_TRUE(scanned.ok()) << scanned.status().ToString();
    if (scanned.ok() && summary != nullptr) *summary = *scanned;
    return out;
  }

  kvtier::testing::TempDir root_{::testing::TempDir() + "ssd_seal_test"};
  std::string dir_ = root_ / "data";
  std::string slots_ = dir_ + "/blocks.dat";
  FaultInjector faults_;
  std::shared_ptr<BlockSealer> sealer_ = Sealer(KeyText(1, 11));
};

// Whole pages, a padded block, and one read in parts (over 512 KiB, alone):
// each reads back, and no 64-byte run of any block's plaintext is in the
// slot file.
TEST_F(SsdSealTest, SealedBlocksReadBackAndNoPlaintextReachesTheDisk) {
  auto store = Open(sealer_);
  ASSERT_NE(store, nullptr);
  std::vector<std::pair<SsdRecord, uint64_t>> written;
  uint64_t k = 1;
  for (size_t size : {size_t{4096}, size_t{100'000}, size_t{2 * kMiB}}) {
    written.emplace_back(Put(*store, k, 100 + k, size), 100 + k);
    ++k;
  }
  const std::string file = ReadFile(slots_);
  for (const auto& [r, seed] : written) {
    ASSERT_TRUE(r.seal.has_value());
    EXPECT_EQ(r.seal->key_id, 1u);
    EXPECT_EQ(r.checksum, SealToken(*r.seal));
    EXPECT_TRUE(Get(*store, r, seed).ok());
    Block plain = MakeBlock(seed, r.block_bytes);
    for (size_t at = 0; at + 64 <= r.block_bytes; at += r.block_bytes / 7 + 1) {
      const std::string_view run(reinterpret_cast<const char*>(plain.span().data()) + at, 64);
      EXPECT_EQ(file.find(run), std::string::npos) << "plaintext at block offset " << at;
    }
  }
}

// Bit flips on disk, truncation, a seal changed in the index, another
// block's ciphertext copied over a slot: all Corruption (a miss), never OK.
TEST_F(SsdSealTest, FlipsTruncationAndSwappedSlotsAreMisses) {
  auto store = Open(sealer_);
  ASSERT_NE(store, nullptr);
  const SsdRecord a = Put(*store, 1, 21, 64 * kKiB);
  const SsdRecord b = Put(*store, 2, 22, 64 * kKiB);
  const SsdRecord big = Put(*store, 3, 23, 1 * kMiB);  // read in parts

  faults_.SetFlipByteOnRead(true);
  EXPECT_EQ(Get(*store, a, 21).code(), StatusCode::kCorruption);
  EXPECT_EQ(Get(*store, big, 23).code(), StatusCode::kCorruption);
  faults_.Reset();
  faults_.SetTruncatedAt(big.slot.offset() + 4096);
  EXPECT_FALSE(Get(*store, big, 23).ok());
  faults_.Reset();
  ASSERT_TRUE(Get(*store, a, 21).ok());

  // B's ciphertext over A's slot: A's seal does not open it.
  CopyWithin(slots_, b.slot.offset(), a.slot.offset(), b.slot.slot_bytes);
  EXPECT_EQ(Get(*store, a, 21).code(), StatusCode::kCorruption);
  ASSERT_TRUE(Get(*store, b, 22).ok());

  // B's record rewritten to name A's slot (and A's seal, token and all): the
  // identity (key) differs, so it does not open, through the engine's record
  // of B or through the one on disk after a restart.
  SsdRecord forged = a;
  forged.key = b.key;
  ASSERT_TRUE(store->PutRecord(forged).ok());
  EXPECT_EQ(Get(*store, b, 22).code(), StatusCode::kCorruption);
  EXPECT_EQ(Get(*store, forged, 21).code(), StatusCode::kCorruption);

  // A tag bit changed in the index.
  SsdRecord tampered = big;
  tampered.seal->tag[3] ^= std::byte{1};
  ASSERT_TRUE(store->PutRecord(tampered).ok());
  EXPECT_EQ(Get(*store, big, 23).code(), StatusCode::kCorruption);
  tampered.checksum = SealToken(*tampered.seal);  // consistent with itself, still wrong
  ASSERT_TRUE(store->PutRecord(tampered).ok());
  EXPECT_EQ(Get(*store, tampered, 23).code(), StatusCode::kCorruption);
  // Counted by cause: records that are not the one written (B's forged, the
  // tag changed under the engine's token), blocks that do not open (flips,
  // B's bytes in A's slot, the forged identity, the tag), no checksums.
  const auto by_cause = store->RejectedByCause();
  EXPECT_EQ(by_cause.at("record"), 2u);
  EXPECT_GE(by_cause.at("seal"), 5u);
  EXPECT_EQ(by_cause.at("checksum"), 0u);
}

// An older version of a block put back under its key, record and bytes
// both: the running store reads the record on disk and finds it is not the
// version it wrote (the engine's token is the newer tag).
TEST_F(SsdSealTest, AReplayedOlderVersionIsRefused) {
  auto store = Open(sealer_);
  ASSERT_NE(store, nullptr);
  const SsdRecord v1 = Put(*store, 7, 31, 64 * kKiB);
  const std::string v1_bytes = ReadFile(slots_).substr(v1.slot.offset(), v1.slot.slot_bytes);
  // Version 2 of the same block, into the same slot (as after a free).
  Block b2 = MakeBlock(32, 64 * kKiB);
  auto v2 = store->Write(v1, b2.span());
  ASSERT_TRUE(v2.ok());
  ASSERT_TRUE(Get(*store, *v2, 32).ok());
  // The attacker puts version 1 back: its record and its bytes.
  ASSERT_TRUE(store->PutRecord(v1).ok());
  {
    std::fstream f(slots_, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(v1.slot.offset()));
    f.write(v1_bytes.data(), static_cast<std::streamsize>(v1_bytes.size()));
  }
  Status st = Get(*store, *v2, 32);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_NE(st.message().find("not the version written"), std::string::npos) << st.ToString();
  EXPECT_EQ(store->RejectedByCause().at("record"), 1u);
  EXPECT_EQ(store->RejectedByCause().at("seal"), 0u);
}

// Restarts: without keys the directory is refused at the scan, naming the
// key and the settings; with the old key behind a new one every block comes
// back and new ones are sealed under the new key; with the old key gone its
// blocks are erased and counted; with another key of the same id nothing
// opens.
TEST_F(SsdSealTest, RestartsWithoutRotatedAndWrongKeys) {
  std::vector<SsdRecord> under1;
  {
    auto store = Open(sealer_);
    ASSERT_NE(store, nullptr);
    for (uint64_t k = 1; k <= 4; ++k) under1.push_back(Put(*store, k, 40 + k, 8 * kKiB));
  }
  {
    auto store = SsdStore::Open(Options(nullptr));
    ASSERT_TRUE(store.ok());
    auto scanned = (*store)->ForEachRecord([](const SsdRecord&) { return Status::Ok(); });
    ASSERT_FALSE(scanned.ok());
    EXPECT_EQ(scanned.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(scanned.status().message().find("sealed under key 1"), std::string::npos);
    EXPECT_NE(scanned.status().message().find(kBlockKeysEnv), std::string::npos);
  }
  SsdRecord under2;
  {
    auto store = Open(Sealer(KeyText(2, 22) + "," + KeyText(1, 11)));
    ASSERT_NE(store, nullptr);
    SsdScanSummary summary;
    EXPECT_EQ(Scan(*store, &summary).size(), 4u);
    EXPECT_EQ(summary.sealed_by_key[1], 4u);
    for (size_t i = 0; i < under1.size(); ++i) {
      ASSERT_TRUE(store->Reserve(under1[i].slot).ok());
      EXPECT_TRUE(Get(*store, under1[i], 41 + i).ok());
    }
    under2 = Put(*store, 9, 49, 8 * kKiB);
    EXPECT_EQ(under2.seal->key_id, 2u);
    EXPECT_TRUE(Get(*store, under2, 49).ok());
  }
  {
    // Same id 2, other key material: every read is a miss.
    auto store = Open(Sealer(KeyText(2, 99) + "," + KeyText(1, 11)));
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(Scan(*store).size(), 5u);
    EXPECT_EQ(Get(*store, under2, 49).code(), StatusCode::kCorruption);
    EXPECT_TRUE(Get(*store, under1[0], 41).ok());
  }
  {
    auto store = Open(Sealer(KeyText(2, 22)));
    ASSERT_NE(store, nullptr);
    SsdScanSummary summary;
    EXPECT_EQ(Scan(*store, &summary).size(), 1u);
    EXPECT_EQ(summary.rotated_out, 4u);
    EXPECT_EQ(summary.sealed_by_key[2], 1u);
    EXPECT_EQ(Scan(*store, &summary).size(), 1u);  // erased: not counted again
    EXPECT_EQ(summary.rotated_out, 0u);
  }
}

// Keys configured over a directory of blocks in the clear (written before,
// or planted): those records are erased at the scan and never read.
TEST_F(SsdSealTest, BlocksInTheClearAreDroppedOnceKeysAreConfigured) {
  SsdRecord clear;
  {
    auto store = Open(nullptr);
    ASSERT_NE(store, nullptr);
    clear = Put(*store, 5, 55, 8 * kKiB);
    EXPECT_FALSE(clear.seal.has_value());
    EXPECT_TRUE(Get(*store, clear, 55).ok());
  }
  auto store = Open(sealer_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Get(*store, clear, 55).code(), StatusCode::kCorruption);
  SsdScanSummary summary;
  EXPECT_TRUE(Scan(*store, &summary).empty());
  EXPECT_EQ(summary.unsealed, 1u);
}

}  // namespace
}  // namespace kvtier::tiers::internal

#include "tiers/internal/ssd_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.h"
#include "common/units.h"
#include "support/temp_dir.h"
#include "tiers/block_bytes.h"
#include "tiers/internal/block_file.h"

namespace kvtier::tiers::internal {
namespace {

namespace fs = std::filesystem;

BlockKey KeyOf(uint64_t i) { return BlockKey{SeedMix(i), SeedMix(i + 1000003)}; }

SsdRecord RecordFor(uint64_t i, SsdSlot slot) {
  SsdRecord r;
  r.ns_id = static_cast<NamespaceId>(i % 3);
  r.key = KeyOf(i);
  r.has_parent = i % 2 == 1;
  r.parent = r.has_parent ? KeyOf(i - 1) : BlockKey{};
  r.slot = slot;
  r.priority = static_cast<uint8_t>(i % 4);
  r.created_ns = static_cast<int64_t>(1'700'000'000'000'000'000LL + i);
  r.last_access_ns = r.created_ns + 5;
  return r;
}

// A directory listing with every file's mode, size and contents.
std::string Snapshot(const std::string& dir) {
  std::map<std::string, std::string> entries;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    EXPECT_EQ(::lstat(e.path().c_str(), &st), 0);
    std::string v = std::to_string(st.st_mode) + " " + std::to_string(st.st_size) + " " +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      v += " " + ss.str();
    }
    entries[e.path().string()] = v;
  }
  std::string out;
  for (const auto& [k, v] : entries) out += k + "\n" + v + "\n";
  return out;
}

// Flips the low bit of the byte at `offset` of the file at `path`.
void FlipByte(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  char c = 0;
  const auto at = static_cast<off_t>(offset);
  ASSERT_EQ(::pread(fd, &c, 1, at), 1);
  c = static_cast<char>(c ^ 1);
  ASSERT_EQ(::pwrite(fd, &c, 1, at), 1);
  ::close(fd);
}

uint64_t DiskBytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

class SsdStoreTest : public ::testing::Test {
 protected:
  SsdOptions Options(uint64_t capacity = 64 * kMiB) {
    SsdOptions o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.note = [this](std::string_view n) { notes_.emplace_back(n); };
    return o;
  }
  std::unique_ptr<SsdStore> Open(const SsdOptions& o) {
    auto s = SsdStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // Allocates, writes block i of `size` bytes and returns its record.
  SsdRecord Put(SsdStore& store, uint64_t i, size_t size) {
    auto slot = store.Allocate(size);
    EXPECT_TRUE(slot.ok()) << slot.status().ToString();
    Block b = MakeBlock(i, size);
    auto rec = store.Write(RecordFor(i, *slot), b.span());
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    return *rec;
  }
  void ExpectReads(const SsdStore& store, const SsdRecord& r, uint64_t seed) {
    Block want = MakeBlock(seed, r.block_bytes);
    Block got = MakeBlock(~seed, r.block_bytes);
    ASSERT_TRUE(store.Read(r, got.span()).ok());
    EXPECT_EQ(std::memcmp(got.span().data(), want.span().data(), r.block_bytes), 0);
  }

  kvtier::testing::TempDir root_{::testing::TempDir() + "ssd_store_test"};
  std::string dir_ = root_ / "data";
  std::vector<std::string> notes_;
};

TEST_F(SsdStoreTest, RoundTripsSeveralBlockSizesAlignedOrNot) {
  auto store = Open(Options(64 * kMiB));
  ASSERT_NE(store, nullptr);
  const size_t sizes[] = {4 * kKiB, 256 * kKiB, 2 * kMiB, 100'000};
  uint64_t seed = 1;
  for (size_t size : sizes) {
    for (size_t skew : {size_t{0}, size_t{3}}) {
      SCOPED_TRACE("size " + std::to_string(size) + " skew " + std::to_string(skew));
      auto slot = store->Allocate(size);
      ASSERT_TRUE(slot.ok());
      EXPECT_EQ(slot->slot_bytes, AlignUp(size, kBlockFileAlignment));
      Block in = MakeBlock(seed, size, skew);
      auto rec = store->Write(RecordFor(seed, *slot), in.span());
      ASSERT_TRUE(rec.ok()) << rec.status().ToString();
      EXPECT_EQ(rec->block_bytes, size);
      for (size_t out_skew : {size_t{0}, size_t{5}}) {
        Block out = MakeBlock(~seed, size, out_skew);
        ASSERT_TRUE(store->Read(*rec, out.span()).ok());
        EXPECT_EQ(std::memcmp(out.span().data(), in.span().data(), size), 0);
      }
      ++seed;
    }
  }
  const SsdStats stats = store->Stats();
  EXPECT_TRUE(stats.direct_io);  // the test's TempDir is a real filesystem here
  EXPECT_EQ(stats.file_bytes, 64 * kMiB);
  EXPECT_EQ(stats.prepared_bytes, 64 * kMiB);
  EXPECT_EQ(stats.slots_in_use.at(100'000 + 2'400), 2u);  // 100,000 rounds to 25 pages
  // A read buffer of the wrong size is refused, not filled.
  auto r = store->Allocate(4 * kKiB);
  ASSERT_TRUE(r.ok());
  Block b = MakeBlock(9, 4 * kKiB);
  auto rec = store->Write(RecordFor(9, *r), b.span());
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(store->Read(*rec, b.span().first(100)).code(), StatusCode::kInvalidArgument);
}

TEST_F(SsdStoreTest, PaddedBuffersMoveABlockInOneIoAndThePaddingIsNotTheBlocks) {
  auto store = Open(Options(16 * kMiB));
  ASSERT_NE(store, nullptr);
  const size_t size = 100'000, padded = AlignUp(size, kBlockFileAlignment);
  auto slot = store->Allocate(size);
  ASSERT_TRUE(slot.ok());
  Block in = MakeBlock(5, padded);
  auto rec = store->Write(RecordFor(5, *slot), in.span(), size);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->block_bytes, size);
  // Read exactly, or padded: the block's bytes either way; the checksum is
  // of the block alone, so the padding may hold anything.
  Block exact = MakeBlock(6, size), wide = MakeBlock(7, padded);
  ASSERT_TRUE(store->Read(*rec, exact.span()).ok());
  ASSERT_TRUE(store->Read(*rec, wide.span()).ok());
  EXPECT_EQ(std::memcmp(exact.span().data(), in.span().data(), size), 0);
  EXPECT_EQ(std::memcmp(wide.span().data(), in.span().data(), size), 0);
  // Padding that does not end at the next 4 KiB is refused.
  auto other = store->Allocate(2 * padded);
  ASSERT_TRUE(other.ok());
  Block twice = MakeBlock(8, 2 * padded);
  EXPECT_EQ(store->Write(RecordFor(8, *other), twice.span(), size).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Read(*rec, twice.span()).code(), StatusCode::kInvalidArgument);
}

TEST_F(SsdStoreTest, CapacityIsNeverExceeded) {
  auto store = Open(Options(kMiB));
  ASSERT_NE(store, nullptr);
  std::vector<SsdSlot> slots;
  for (int i = 0; i < 4; ++i) {
    auto s = store->Allocate(256 * kKiB);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->page, static_cast<uint64_t>(i) * 64);  // 256 KiB = 64 pages
    slots.push_back(*s);
  }
  EXPECT_EQ(store->Stats().used_bytes, kMiB);
  EXPECT_EQ(store->Allocate(256 * kKiB).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Allocate(1).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  // Free makes room, and the lowest free slot is taken first.
  ASSERT_TRUE(store->Free(slots[2]).ok());
  ASSERT_TRUE(store->Free(slots[1]).ok());
  EXPECT_EQ(store->Free(slots[1]).code(), StatusCode::kFailedPrecondition);  // double free
  auto a = store->Allocate(256 * kKiB);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->page, 64u);
  // Another size shares the same capacity.
  auto b = store->Allocate(100'000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->slot_bytes, 102'400u);
  EXPECT_EQ(store->Stats().used_bytes, 3 * 256 * kKiB + 102'400);
  EXPECT_EQ(store->Allocate(256 * kKiB).status().code(), StatusCode::kResourceExhausted);
  EXPECT_LE(store->Stats().used_bytes, kMiB);
}

TEST_F(SsdStoreTest, ReopenRestoresRecordsAndReserveRebuildsTheAllocator) {
  std::vector<SsdRecord> written;
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t i = 0; i < 12; ++i)
      written.push_back(Put(*store, i, i % 2 ? 256 * kKiB : 100'000));
    // A freed block leaves a hole the rebuilt allocator must see.
    ASSERT_TRUE(store->Erase(written[4].ns_id, written[4].key).ok());
    ASSERT_TRUE(store->Free(written[4].slot).ok());
    written.erase(written.begin() + 4);
    ASSERT_TRUE(store->Sync().ok());
  }
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  std::vector<SsdRecord> found;
  auto summary = store->ForEachRecord([&](const SsdRecord& r) {
    found.push_back(r);
    return Status::Ok();
  });
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->records, written.size());
  EXPECT_EQ(summary->undecodable, 0u);
  auto by_key = [](const SsdRecord& a, const SsdRecord& b) {
    return std::tie(a.ns_id, a.key) < std::tie(b.ns_id, b.key);
  };
  std::sort(written.begin(), written.end(), by_key);
  EXPECT_EQ(found, written);  // ForEachRecord is in key order
  for (const SsdRecord& r : found) {
    ASSERT_TRUE(store->Reserve(r.slot).ok());
    const uint64_t seed = static_cast<uint64_t>(r.created_ns - 1'700'000'000'000'000'000LL);
    ExpectReads(*store, r, seed);
  }
  EXPECT_EQ(store->Reserve(found[0].slot).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Reserve(SsdSlot{100'000, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Reserve(SsdSlot{102'400, 1'000'000}).code(), StatusCode::kInvalidArgument);
  // Block 4 (100,000 bytes, the third of its size) left slot 2 of the first
  // extent of that size (region 0, 1 MiB) free: page 2 x 25.
  auto slot = store->Allocate(100'000);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(*slot, (SsdSlot{102'400, 50}));
  EXPECT_EQ(store->Allocate(100'000)->page, 6u * 25);
}

TEST_F(SsdStoreTest, ReserveRespectsCapacity) {
  std::vector<SsdRecord> written;
  {
    auto store = Open(Options(kMiB));
    ASSERT_NE(store, nullptr);
    for (uint64_t i = 0; i < 4; ++i) written.push_back(Put(*store, i, 256 * kKiB));
  }
  // Reopened with less capacity: the surplus is refused, never over-admitted.
  auto store = Open(Options(kMiB / 2));
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Reserve(written[0].slot).ok());
  EXPECT_TRUE(store->Reserve(written[1].slot).ok());
  EXPECT_FALSE(store->Reserve(written[2].slot).ok());
  EXPECT_FALSE(store->Reserve(written[3].slot).ok());
  EXPECT_EQ(store->Stats().used_bytes, kMiB / 2);
}

TEST_F(SsdStoreTest, AnotherFormatIsRefusedAndNothingChanges) {
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    Put(*store, 1, 4 * kKiB);
  }
  {
    std::ofstream f(dir_ + "/FORMAT", std::ios::trunc);
    f << "kvtier-ssd-format 1\n";  // the format before the one preallocated file
  }
  const std::string before = Snapshot(dir_);
  auto s = SsdStore::Open(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("written by format 1; this kvtierd reads format 2"),
            std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find(dir_), std::string::npos);
  EXPECT_EQ(Snapshot(dir_), before);

  std::ofstream(dir_ + "/FORMAT", std::ios::trunc) << "garbage";
  const std::string before2 = Snapshot(dir_);
  EXPECT_EQ(SsdStore::Open(Options()).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Snapshot(dir_), before2);
}

TEST_F(SsdStoreTest, ForeignNonEmptyDirectoryIsRefused) {
  fs::create_directories(dir_ + "/sub");
  std::ofstream(dir_ + "/notes.txt") << "someone else's";
  const std::string before = Snapshot(dir_);
  auto s = SsdStore::Open(Options());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("no FORMAT file"), std::string::npos);
  EXPECT_EQ(Snapshot(dir_), before);

  // An existing empty directory is adopted.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  ASSERT_NE(Open(Options()), nullptr);
  std::ifstream f(dir_ + "/FORMAT");
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, "kvtier-ssd-format 2");
  std::getline(f, line);
  EXPECT_EQ(line, "region-bytes " + std::to_string(SsdSpace::RegionBytesFor(64 * kMiB)));
}

TEST_F(SsdStoreTest, SecretIsPrivateAndStable) {
  std::array<std::byte, kSsdSecretBytes> first{};
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    std::copy_n(store->master_secret().begin(), kSsdSecretBytes, first.begin());
    EXPECT_NE(first, (std::array<std::byte, kSsdSecretBytes>{}));
  }
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(kSsdSecretBytes));
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), store->master_secret().begin()));
}

TEST_F(SsdStoreTest, BlocksKeyedUnderAnotherSecretAreRefusedNeverOrphaned) {
  SsdOptions own = Options();
  SsdOptions deployment_a = Options();
  deployment_a.keys_secret_id = "0123456789abcdef0123456789abcdef";
  SsdOptions deployment_b = Options();
  deployment_b.keys_secret_id = "fedcba9876543210fedcba9876543210";
  {
    auto store = Open(own);  // a node without a remote tier writes a block
    ASSERT_NE(store, nullptr);
    Put(*store, 1, 4096);
  }
  // Those blocks are keyed under the directory's own secret: a node that now
  // hashes under a deployment secret could never find them.
  auto refused = SsdStore::Open(deployment_a);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("the directory's own secret"), std::string::npos)
      << refused.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ + "/keys"));
  {
    auto store = Open(own);  // nothing was changed: the blocks are still served
    ASSERT_NE(store, nullptr);
    size_t records = 0;
    ASSERT_TRUE(store
                    ->ForEachRecord([&](const SsdRecord&) {
                      ++records;
                      return Status::Ok();
                    })
                    .ok());
    EXPECT_EQ(records, 1u);
  }
  // An empty directory takes the deployment's name, and keeps it.
  fs::remove_all(dir_);
  {
    auto store = Open(deployment_a);
    ASSERT_NE(store, nullptr);
    Put(*store, 2, 4096);
  }
  ASSERT_NE(Open(deployment_a), nullptr);
  refused = SsdStore::Open(deployment_b);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("01234567"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(SsdStore::Open(own).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SsdStoreTest, NoSpaceOnWriteIsResourceExhaustedAndWritesNoRecord) {
  FaultInjector faults;
  SsdOptions o = Options();
  o.file_factory = FaultInjectingFactory(faults);
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  SsdRecord ok = Put(*store, 1, 256 * kKiB);
  auto slot = store->Allocate(256 * kKiB);
  ASSERT_TRUE(slot.ok());
  faults.SetNoSpaceOnWrite(true);
  Block b = MakeBlock(2, 256 * kKiB);
  auto rec = store->Write(RecordFor(2, *slot), b.span());
  EXPECT_EQ(rec.status().code(), StatusCode::kResourceExhausted) << rec.status().ToString();
  EXPECT_GT(faults.injected(), 0u);
  std::vector<SsdRecord> found;
  ASSERT_TRUE(store
                  ->ForEachRecord([&](const SsdRecord& r) {
                    found.push_back(r);
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], ok);
  faults.Reset();
  EXPECT_TRUE(store->Write(RecordFor(2, *slot), b.span()).ok());
}

TEST_F(SsdStoreTest, ReadFaultsAreErrorsNeverWrongBytes) {
  FaultInjector faults;
  SsdOptions o = Options();
  o.file_factory = FaultInjectingFactory(faults);
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  for (size_t size : {size_t{256 * kKiB}, size_t{100'000}}) {
    SCOPED_TRACE(size);
    SsdRecord r = Put(*store, size, size);
    Block out = MakeBlock(0, size);

    faults.SetIoErrorOnRead(true);
    EXPECT_EQ(store->Read(r, out.span()).code(), StatusCode::kIoError);
    faults.Reset();

    faults.SetFlipByteOnRead(true);
    Status s = store->Read(r, out.span());
    EXPECT_EQ(s.code(), StatusCode::kCorruption);
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(r.key.ToHex()), std::string::npos);
    faults.Reset();

    faults.SetTruncatedAt(r.slot.offset() + 4096);
    EXPECT_EQ(store->Read(r, out.span()).code(), StatusCode::kCorruption);
    faults.Reset();

    ExpectReads(*store, r, size);
  }
  // Each refused read counted by its cause (without keys: the checksum;
  // the I/O errors are not refusals).
  EXPECT_EQ(store->RejectedByCause().at("checksum"), 4u);
  EXPECT_EQ(store->RejectedByCause().at("seal"), 0u);
}

TEST_F(SsdStoreTest, AShareOfReadErrorsFailsThatShareSpreadEvenlyAndTheRestReadBack) {
  // The injector owned by its factory, as kvtierd's ssd.fault_read_errors makes it.
  auto faults = std::make_shared<FaultInjector>();
  SsdOptions o = Options();
  o.file_factory = FaultInjectingFactory(faults);
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  SsdRecord r = Put(*store, 3, 256 * kKiB);
  faults->SetReadErrorShare(0.25);
  int failed = 0;
  std::vector<int> failed_at;
  for (int i = 0; i < 40; ++i) {
    Block out = MakeBlock(0, 256 * kKiB);
    const Status s = store->Read(r, out.span());
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
      ++failed;
      failed_at.push_back(i);
    } else {
      EXPECT_EQ(std::memcmp(out.span().data(), MakeBlock(3, 256 * kKiB).span().data(), 256 * kKiB),
                0);
    }
  }
  EXPECT_EQ(failed, 10);
  EXPECT_EQ(faults->injected(), 10u);
  EXPECT_EQ(failed_at.front(), 3);  // reads 4, 8, 12, ...: evenly, not in a burst
  EXPECT_EQ(failed_at[1], 7);
  faults->SetReadErrorShare(0);
  ExpectReads(*store, r, 3);
}

TEST_F(SsdStoreTest, FlippedByteOnDiskIsCorruption) {
  SsdRecord r;
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    r = Put(*store, 7, 256 * kKiB);
  }
  FlipByte(dir_ + "/blocks.dat", r.slot.offset() + 12'345);
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  Block out = MakeBlock(0, 256 * kKiB);
  EXPECT_EQ(store->Read(r, out.span()).code(), StatusCode::kCorruption);
}

// A block of more than one read part (2 MiB: four parts of 512 KiB) is read
// in parts, each checksummed as it lands: a flipped byte in the first or
// the last part is Corruption, and an intact block reads back whole.
TEST_F(SsdStoreTest, ABlockReadInPartsIsCheckedInEveryPart) {
  std::vector<SsdRecord> written;
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t i = 0; i < 3; ++i) written.push_back(Put(*store, 20 + i, 2 * kMiB));
  }
  FlipByte(dir_ + "/blocks.dat", written[0].slot.offset() + 3);             // first part
  FlipByte(dir_ + "/blocks.dat", written[1].slot.offset() + 2 * kMiB - 5);  // last part
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  Block out = MakeBlock(0, 2 * kMiB);
  EXPECT_EQ(store->Read(written[0], out.span()).code(), StatusCode::kCorruption);
  EXPECT_EQ(store->Read(written[1], out.span()).code(), StatusCode::kCorruption);
  ExpectReads(*store, written[2], 22);
}

TEST_F(SsdStoreTest, TruncatedFileIsAnError) {
  std::vector<SsdRecord> written;
  {
    auto store = Open(Options());
    ASSERT_NE(store, nullptr);
    for (uint64_t i = 0; i < 4; ++i) written.push_back(Put(*store, i, 2 * kMiB));
  }
  // Cut the file in the middle of the third block.
  ASSERT_EQ(::truncate((dir_ + "/blocks.dat").c_str(), 5 * kMiB), 0);
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  Block out = MakeBlock(0, 2 * kMiB);
  for (uint64_t i = 0; i < 4; ++i) {
    const SsdRecord& r = written[i];
    if (i < 2) {
      EXPECT_TRUE(store->Reserve(r.slot).ok());
      ExpectReads(*store, r, i);
    } else {
      EXPECT_EQ(store->Reserve(r.slot).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(store->Read(r, out.span()).code(), StatusCode::kCorruption);
    }
  }
}

TEST_F(SsdStoreTest, TheFileIsWrittenOnceInFullAndFreeKeepsItSo) {
  auto store = Open(Options(16 * kMiB));
  ASSERT_NE(store, nullptr);
  const std::string path = dir_ + "/blocks.dat";
  // Every byte of the file is allocated on disk before a block is written:
  // later writes overwrite written blocks (no hole, no unwritten extent).
  EXPECT_EQ(fs::file_size(path), 16 * kMiB);
  EXPECT_GE(DiskBytes(path), 16 * kMiB);
  std::vector<SsdRecord> written;
  for (uint64_t i = 0; i < 8; ++i) written.push_back(Put(*store, i, 2 * kMiB));
  EXPECT_EQ(store->Allocate(2 * kMiB).status().code(), StatusCode::kResourceExhausted);
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(store->Erase(written[i].ns_id, written[i].key).ok());
    ASSERT_TRUE(store->Free(written[i].slot).ok());
  }
  EXPECT_EQ(fs::file_size(path), 16 * kMiB);
  EXPECT_GE(DiskBytes(path), 16 * kMiB);
  ExpectReads(*store, written[7], 7);
  // Freed space serves any size: the emptied extents went back to the pool.
  for (uint64_t i = 0; i < 40; ++i) Put(*store, 100 + i, 256 * kKiB);
  EXPECT_EQ(store->Stats().used_bytes, 2 * 2 * kMiB + 40 * 256 * kKiB);
}

TEST_F(SsdStoreTest, BackgroundPreparationServesItsRegionsAsTheyAreDone) {
  SsdOptions o = Options(256 * kMiB);
  o.preallocate = SsdPreallocate::kBackground;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  // Until a region is written it is not handed out; the caller hears why.
  uint64_t refused = 0;
  while (store->Stats().preparing) {
    auto slot = store->Allocate(2 * kMiB);
    if (!slot.ok()) {
      EXPECT_EQ(slot.status().code(), StatusCode::kUnavailable) << slot.status().ToString();
      ++refused;
      continue;
    }
    EXPECT_LE(slot->offset() + slot->slot_bytes, store->Stats().prepared_bytes);
  }
  ASSERT_TRUE(store->WaitUntilPrepared().ok());
  const SsdStats st = store->Stats();
  EXPECT_EQ(st.prepared_bytes, st.file_bytes);
  EXPECT_FALSE(st.preparing);
  EXPECT_GE(DiskBytes(dir_ + "/blocks.dat"), 256 * kMiB);
  ASSERT_TRUE(store->Allocate(2 * kMiB).ok() || st.used_bytes == 256 * kMiB);
  // A note says it started and one that it finished.
  ASSERT_GE(notes_.size(), 2u);
  EXPECT_NE(notes_.front().find("in the background"), std::string::npos) << notes_.front();
  EXPECT_NE(notes_.back().find("prepared"), std::string::npos) << notes_.back();
  (void)refused;  // how many depends on the disk's speed
}

TEST_F(SsdStoreTest, AFullDiskWhilePreparingIsCaughtAtStart) {
  FaultInjector faults;
  faults.SetNoSpaceOnWrite(true);
  SsdOptions o = Options(16 * kMiB);
  o.file_factory = FaultInjectingFactory(faults);
  auto refused = SsdStore::Open(o);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  // In the background, the tier serves the part that was prepared, nothing
  // beyond it, and says so.
  o.preallocate = SsdPreallocate::kBackground;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->WaitUntilPrepared().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Stats().prepared_bytes, 0u);
  EXPECT_EQ(store->Allocate(4 * kKiB).status().code(), StatusCode::kUnavailable);
  EXPECT_NE(notes_.back().find("stopped"), std::string::npos) << notes_.back();
  // A reopen with room finishes the job.
  store.reset();
  faults.Reset();
  o.preallocate = SsdPreallocate::kWrite;
  store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Stats().prepared_bytes, 16 * kMiB);
  Put(*store, 1, 4 * kKiB);
}

TEST_F(SsdStoreTest, SparseFilesSkipPreparation) {
  SsdOptions o = Options(64 * kMiB);
  o.preallocate = SsdPreallocate::kSparse;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(fs::file_size(dir_ + "/blocks.dat"), 64 * kMiB);
  EXPECT_LT(DiskBytes(dir_ + "/blocks.dat"), 8 * kMiB);
  SsdRecord r = Put(*store, 3, 2 * kMiB);
  ExpectReads(*store, r, 3);
}

TEST_F(SsdStoreTest, ConcurrentWritesAndReadsOfDistinctSlots) {
  auto store = Open(Options(256 * kMiB));
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4, kPerThread = 24;
  // Slots come from the allocator's one thread; I/O runs on four.
  std::vector<std::vector<SsdRecord>> todo(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const uint64_t id = static_cast<uint64_t>(t * kPerThread + i);
      const size_t size = id % 3 == 0 ? 100'000 : 256 * kKiB;
      auto slot = store->Allocate(size);
      ASSERT_TRUE(slot.ok());
      todo[static_cast<size_t>(t)].push_back(RecordFor(id, *slot));
    }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (SsdRecord& r : todo[static_cast<size_t>(t)]) {
        const uint64_t id = static_cast<uint64_t>(r.created_ns - 1'700'000'000'000'000'000LL);
        const size_t size = id % 3 == 0 ? 100'000 : 256 * kKiB;
        Block in = MakeBlock(id, size, t % 2 == 0 ? 0 : 1);
        auto rec = store->Write(r, in.span());
        if (!rec.ok()) {
          ++failures;
          continue;
        }
        r = *rec;
        Block out = MakeBlock(~id, size);
        if (!store->Read(r, out.span()).ok() ||
            std::memcmp(out.span().data(), in.span().data(), size) != 0) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (const auto& list : todo) {
    for (const SsdRecord& r : list) {
      ExpectReads(*store, r, static_cast<uint64_t>(r.created_ns - 1'700'000'000'000'000'000LL));
    }
  }
}

constexpr uint64_t kKilledChildBlocks = 20;
constexpr char kChildDirEnv[] = "KVTIER_SSD_TEST_CHILD_DIR";

// The child of EveryRecordSurvivesAKill9: writes into `dir` without Sync and
// dies by SIGKILL without closing anything.
[[noreturn]] void WriteThenDie(const char* dir) {
  SsdOptions o;
  o.dir = dir;
  o.capacity_bytes = 64 * kMiB;
  auto s = SsdStore::Open(o);
  if (!s.ok()) ::_exit(2);
  for (uint64_t i = 0; i < kKilledChildBlocks; ++i) {
    auto slot = (*s)->Allocate(256 * kKiB);
    Block b = MakeBlock(i, 256 * kKiB);
    if (!slot.ok() || !(*s)->Write(RecordFor(i, *slot), b.span()).ok()) ::_exit(3);
  }
  ::kill(::getpid(), SIGKILL);
  ::_exit(4);
}

// The test runs itself again in a fresh process (exec, not a bare fork:
// RocksDB's threads do not survive fork), which finds kChildDirEnv set and
// plays the writer that is killed.
TEST_F(SsdStoreTest, EveryRecordSurvivesAKill9) {
  if (const char* child_dir = std::getenv(kChildDirEnv)) {
    fs::remove_all(root_.path());  // this process's own fixture directory: unused
    WriteThenDie(child_dir);
  }
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kChildDirEnv) + "=" + dir_);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe",
              filter = "--gtest_filter=SsdStoreTest.EveryRecordSurvivesAKill9";
  char* argv[] = {exe.data(), filter.data(), nullptr};

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execve(exe.c_str(), argv, envp.data());
    ::_exit(5);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << wstatus;
  auto store = Open(Options());
  ASSERT_NE(store, nullptr);
  uint64_t n = 0;
  ASSERT_TRUE(store
                  ->ForEachRecord([&](const SsdRecord& r) {
                    ++n;
                    EXPECT_TRUE(store->Reserve(r.slot).ok());
                    ExpectReads(*store, r,
                                static_cast<uint64_t>(r.created_ns - 1'700'000'000'000'000'000LL));
                    return Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(n, kKilledChildBlocks);
}

TEST_F(SsdStoreTest, BufferedIoWhenDirectIoIsOff) {
  SsdOptions o = Options();
  o.direct_io = false;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  SsdRecord r = Put(*store, 5, 100'000);
  ExpectReads(*store, r, 5);
  EXPECT_FALSE(store->Stats().direct_io);
}

// A filesystem that refuses O_DIRECT (EINVAL, as tmpfs did before Linux
// 6.6), played by the open(2) the slot file is opened with, so the test runs
// on any filesystem: the store says so and serves every byte with buffered
// I/O.
TEST_F(SsdStoreTest, FallsBackToBufferedIoWhereODirectIsRefused) {
  int refused = 0;
  SsdOptions o = Options();
  o.file_factory = [&refused](const std::string& path, bool direct_io, const NoteFn& note) {
    return OpenBlockFile(path, direct_io, note, [&refused](const char* p, int flags, mode_t mode) {
      if ((flags & O_DIRECT) != 0) {
        ++refused;
        errno = EINVAL;
        return -1;
      }
      return ::open(p, flags, mode);
    });
  };
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  SsdRecord r = Put(*store, 3, 100'000);
  ExpectReads(*store, r, 3);
  EXPECT_GT(refused, 0);
  EXPECT_FALSE(store->Stats().direct_io);
  ASSERT_FALSE(notes_.empty());
  EXPECT_NE(notes_.front().find("O_DIRECT refused"), std::string::npos) << notes_.front();
}

}  // namespace
}  // namespace kvtier::tiers::internal

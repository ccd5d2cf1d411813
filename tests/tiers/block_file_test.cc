// BlockFile: reading a span in parts, through Linux AIO where the file does
// direct I/O, from one thread and from several.
#include "tiers/internal/block_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "common/units.h"
#include "support/temp_dir.h"
#include "tiers/block_bytes.h"

namespace kvtier::tiers::internal {
namespace {

// Parts in flight through Linux AIO (direct I/O), and the default of a
// buffered file: every part handed over in order, in place, with the file's
// bytes; more than 16 parts' worth read in larger parts; past the file's end
// Corruption, as ReadAt says it.
TEST(BlockFileTest, ReadAtInPartsHandsEveryPartOverInOrder) {
  kvtier::testing::TempDir root(::testing::TempDir() + "block_file_parts_test");
  const size_t size = 2 * kMiB + 12 * kKiB;  // parts of 512 KiB, the last short
  Block want = MakeBlock(5, size);
  for (bool direct : {true, false}) {
    auto file = OpenBlockFile(root / (direct ? "direct" : "buffered"), direct, nullptr);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_TRUE((*file)->WriteAt(0, want.span()).ok());
    for (size_t part : {size_t{512 * kKiB}, size_t{4 * kKiB}, size_t{4 * kMiB}}) {
      Block got = MakeBlock(6, size);
      size_t next = 0;
      ASSERT_TRUE(
          (*file)
              ->ReadAtInParts(0, got.span(), part,
                              [&](std::span<const std::byte> p) {
                                EXPECT_EQ(p.data(), got.span().data() + next);
                                EXPECT_EQ(
                                    std::memcmp(p.data(), want.span().data() + next, p.size()), 0);
                                next += p.size();
                              })
              .ok());
      EXPECT_EQ(next, size) << "direct " << direct << ", part " << part;
    }
    Block beyond = MakeBlock(7, 2 * kMiB);
    EXPECT_EQ((*file)->ReadAtInParts(1 * kMiB, beyond.span(), 512 * kKiB, [](auto) {}).code(),
              StatusCode::kCorruption)
        << "direct " << direct;
  }
}

// Writes in parts (through Linux AIO where the file does direct I/O, and
// the default of a buffered file): each part filled in order, just before it
// goes, and the file then holds what was filled; a fill that fails stops
// the write and is its error.
TEST(BlockFileTest, WriteAtInPartsFillsEachPartInOrderThenWritesIt) {
  kvtier::testing::TempDir root(::testing::TempDir() + "block_file_write_parts_test");
  const size_t size = 2 * kMiB + 12 * kKiB;
  const Block want = MakeBlock(9, size);
  for (bool direct : {true, false}) {
    auto file = OpenBlockFile(root / (direct ? "direct" : "buffered"), direct, nullptr);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    for (size_t part : {size_t{64 * kKiB}, size_t{4 * kKiB}, size_t{4 * kMiB}}) {
      Block data = MakeBlock(1, size);  // overwritten by the fills
      size_t next = 0;
      ASSERT_TRUE((*file)
                      ->WriteAtInParts(0, data.span(), part,
                                       [&](std::span<std::byte> p) {
                                         EXPECT_EQ(p.data(), data.span().data() + next);
                                         std::memcpy(p.data(), want.span().data() + next, p.size());
                                         next += p.size();
                                         return Status::Ok();
                                       })
                      .ok());
      EXPECT_EQ(next, size);
      Block got = MakeBlock(2, size);
      ASSERT_TRUE((*file)->ReadAt(0, got.span()).ok());
      EXPECT_EQ(std::memcmp(got.span().data(), want.span().data(), size), 0)
          << "direct " << direct << ", part " << part;
    }
    Block data = MakeBlock(3, size);
    int fills = 0;
    const Status failed = (*file)->WriteAtInParts(0, data.span(), 64 * kKiB, [&](auto) {
      return ++fills == 3 ? InternalError("the third part fails") : Status::Ok();
    });
    EXPECT_EQ(failed.code(), StatusCode::kInternal) << "direct " << direct;
    EXPECT_EQ(fills, 3);
  }
}

// Reads in parts from several threads at once, each lent an AIO context of
// the pool (and given it back) or a new one: every read gets its own bytes.
TEST(BlockFileTest, ReadsInPartsFromManyThreadsEachGetTheirBytes) {
  kvtier::testing::TempDir root(::testing::TempDir() + "block_file_threads_test");
  auto file = OpenBlockFile(root / "f", true, nullptr);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  constexpr size_t kBlock = 1 * kMiB;
  constexpr size_t kBlocks = 8;
  for (size_t b = 0; b < kBlocks; ++b) {
    Block block = MakeBlock(100 + b, kBlock);
    ASSERT_TRUE((*file)->WriteAt(b * kBlock, block.span()).ok());
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Block got = MakeBlock(0, kBlock);
      for (size_t i = 0; i < 20; ++i) {
        const size_t b = (t * 3 + i) % kBlocks;
        const Status s = (*file)->ReadAtInParts(b * kBlock, got.span(), 256 * kKiB, [](auto) {});
        Block want = MakeBlock(100 + b, kBlock);
        if (!s.ok() || std::memcmp(got.span().data(), want.span().data(), kBlock) != 0) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kvtier::tiers::internal

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/slot_generations.h"
#include "tiers/tier.h"

namespace kvtier::tiers {
namespace {

std::unique_ptr<Tier> MakeHost(uint64_t capacity, uint64_t slab = kMiB) {
  auto t = NewHostTier({.capacity_bytes = capacity, .slab_bytes = slab});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<std::byte> Pattern(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; i += sizeof(uint64_t)) {
    const uint64_t word = rng();
    std::memcpy(v.data() + i, &word, std::min(sizeof word, n - i));
  }
  return v;
}

TEST(TierKindTest, Names) {
  EXPECT_EQ(TierKindName(TierKind::kDevice), "device");
  EXPECT_EQ(TierKindName(TierKind::kHost), "host");
  EXPECT_EQ(TierKindName(TierKind::kSsd), "ssd");
}

TEST(ArenaTierTest, HostTierDescribesItself) {
  auto tier = MakeHost(16 * kMiB);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->kind(), TierKind::kHost);
  EXPECT_FALSE(tier->emulated());
  EXPECT_EQ(tier->description(), "host: memfd arena, 16.0 MiB, 1.00 MiB slabs, 4 KiB pages");
  EXPECT_EQ(tier->capacity_bytes(), 16 * kMiB);
  // The slots, then their generations (common/slot_generations.h).
  EXPECT_EQ(tier->arena_bytes(), 16 * kMiB + 32 * kKiB + 4 * kKiB);
  EXPECT_EQ(tier->used_bytes(), 0u);
  EXPECT_GE(tier->arena_fd(), 0);
  EXPECT_EQ(tier->SlotBytes(5000), 8 * kKiB);
}

TEST(ArenaTierTest, EmulatedDeviceIsADeviceTier) {
  auto t = NewEmulatedDeviceTier({.capacity_bytes = 8 * kMiB, .slab_bytes = kMiB});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Tier& tier = **t;
  EXPECT_EQ(tier.kind(), TierKind::kDevice);
  EXPECT_TRUE(tier.emulated());
  EXPECT_NE(tier.description().find("device: emulated in host memory (no GPU)"), std::string::npos)
      << tier.description();
  auto slot = tier.Allocate(1000);
  ASSERT_TRUE(slot.ok());
  const auto data = Pattern(1000, 3);
  ASSERT_TRUE(tier.Write(*slot, data).ok());
  std::vector<std::byte> back(1000);
  ASSERT_TRUE(tier.Read(*slot, back).ok());
  EXPECT_EQ(back, data);
}

TEST(ArenaTierTest, CapacityIsRoundedUpToAPage) {
  auto tier = MakeHost(10000);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->capacity_bytes(), 3 * kSlotPageBytes);
  EXPECT_EQ(tier->arena_bytes(), 3 * kSlotPageBytes + SlotGenerationsBytes(3 * kSlotPageBytes));
}

TEST(ArenaTierTest, RejectsBadOptions) {
  EXPECT_EQ(NewHostTier({.capacity_bytes = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewHostTier({.capacity_bytes = kMiB, .slab_bytes = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NewEmulatedDeviceTier({.capacity_bytes = 64 * 1024 * kGiB}).status().code(),
            StatusCode::kInvalidArgument);
}

// More than the machine has, reserved, would have the OOM killer end the
// daemon at start: refused, saying what to do instead.
TEST(ArenaTierTest, AReservedArenaLargerThanTheMemoryAvailableIsRefused) {
  const uint64_t huge = 4 * 1024 * kGiB;  // 4 TiB: more than any test machine
  auto refused = NewHostTier({.capacity_bytes = huge});
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("memory available"), std::string::npos);
  EXPECT_NE(refused.status().message().find("--no-reserve-memory"), std::string::npos);
}

// The kernel's pool of 2 MiB huge pages: free pages, from /proc/meminfo.
uint64_t FreeHugePages() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("HugePages_Free:", 0) == 0) return std::stoull(line.substr(15));
  }
  return 0;
}

// The page size the kernel maps `addr` with, from /proc/self/smaps
// ("KernelPageSize:" of the mapping holding it), in bytes; 0 if not found.
uint64_t KernelPageBytes(const void* addr) {
  const auto at = reinterpret_cast<uintptr_t>(addr);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 16) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("KernelPageSize:", 0) == 0) {
      return std::stoull(line.substr(15)) * 1024;
    }
  }
  return 0;
}

// More huge pages than the pool has free: "on" refuses to make the tier,
// naming the pool; "auto" makes it on 4 KiB pages and says why in a note.
TEST(ArenaTierTest, HugePagesNotInThePoolAreRefusedOrFallenBackFrom) {
  const uint64_t capacity = (FreeHugePages() + 1) * kHugePageBytes;
  auto refused = NewHostTier(
      {.capacity_bytes = capacity, .reserve_memory = false, .huge_pages = HugePages::kOn});
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("vm.nr_hugepages"), std::string::npos)
      << refused.status().message();

  std::vector<std::string> notes;
  auto fell_back = NewHostTier({.capacity_bytes = capacity,
                                .reserve_memory = false,
                                .huge_pages = HugePages::kAuto,
                                .note = [&](const std::string& n) { notes.push_back(n); }});
  ASSERT_TRUE(fell_back.ok()) << fell_back.status().ToString();
  EXPECT_NE((*fell_back)->description().find("4 KiB pages"), std::string::npos);
  ASSERT_EQ(notes.size(), 1u);
  const uint64_t pages =
      (capacity + SlotGenerationsBytes(capacity) + kHugePageBytes - 1) / kHugePageBytes;
  EXPECT_NE(notes[0].find("sysctl vm.nr_hugepages=" + std::to_string(pages)), std::string::npos)
      << notes[0];
  // Still an arena: a block written is read back.
  auto slot = (*fell_back)->Allocate(64 * kKiB);
  ASSERT_TRUE(slot.ok());
  const auto data = Pattern(64 * kKiB, 9);
  ASSERT_TRUE((*fell_back)->Write(*slot, data).ok());
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE((*fell_back)->Read(*slot, back).ok());
  EXPECT_EQ(back, data);
}

// With the pool: the arena is on 2 MiB pages in the daemon and in a worker
// that maps its fd, and the worker sees the daemon's bytes. A machine
// without a pool (vm.nr_hugepages = 0, the kernel's default) has no such
// memory to test, like a machine without a GPU.
TEST(ArenaTierTest, OnHugePagesTheDaemonAndAWorkerMapTwoMiBPages) {
  if (FreeHugePages() < 3) GTEST_SKIP() << "no huge page pool (sysctl vm.nr_hugepages)";
  std::vector<std::string> notes;
  auto t = NewHostTier({.capacity_bytes = 5 * kMiB,  // mapped: 6 MiB
                        .slab_bytes = kMiB,
                        .huge_pages = HugePages::kOn,
                        .note = [&](const std::string& n) { notes.push_back(n); }});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Tier& tier = **t;
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(tier.description(), "host: memfd arena, 5.00 MiB, 1.00 MiB slabs, 2 MiB huge pages");
  EXPECT_EQ(tier.capacity_bytes(), 5 * kMiB);  // what was asked for
  EXPECT_EQ(tier.arena_bytes(), 6 * kMiB);     // a whole number of huge pages
  auto slot = tier.Allocate(kMiB);
  ASSERT_TRUE(slot.ok());
  const auto data = Pattern(kMiB, 11);
  ASSERT_TRUE(tier.Write(*slot, data).ok());
  EXPECT_EQ(KernelPageBytes(tier.HostView(*slot, kMiB).data()), kHugePageBytes);

  // Its block size tells a worker (the client library maps such an arena
  // whole at attach).
  struct stat st {};
  ASSERT_EQ(fstat(tier.arena_fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_blksize), kHugePageBytes);
  void* worker = mmap(nullptr, tier.arena_bytes(), PROT_READ, MAP_SHARED, tier.arena_fd(), 0);
  ASSERT_NE(worker, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(KernelPageBytes(worker), kHugePageBytes);
  const std::byte* seen = static_cast<const std::byte*>(worker) + tier.SlotOffset(*slot);
  EXPECT_EQ(std::memcmp(seen, data.data(), kMiB), 0);
  EXPECT_EQ(munmap(worker, tier.arena_bytes()), 0);
}

// A worker finds the slots' generations at the end of the arena it maps; a
// freed slot's generation is raised (before the slot can hold another
// block), the others stay.
TEST(ArenaTierTest, AFreedSlotsGenerationIsRaisedWhereAWorkerSeesIt) {
  auto tier = MakeHost(8 * kMiB);
  ASSERT_NE(tier, nullptr);
  void* worker = mmap(nullptr, tier->arena_bytes(), PROT_READ, MAP_SHARED, tier->arena_fd(), 0);
  ASSERT_NE(worker, MAP_FAILED) << std::strerror(errno);
  uint64_t entries = 0;
  const std::atomic<uint64_t>* gen =
      FindSlotGenerations(static_cast<std::byte*>(worker), tier->arena_bytes(), &entries);
  ASSERT_NE(gen, nullptr);
  EXPECT_EQ(entries, 8 * kMiB / kSlotPageBytes);
  auto a = tier->Allocate(64 * kKiB);
  auto b = tier->Allocate(64 * kKiB);
  ASSERT_TRUE(a.ok() && b.ok());
  const uint64_t page_a = tier->SlotOffset(*a) / kSlotPageBytes;
  const uint64_t page_b = tier->SlotOffset(*b) / kSlotPageBytes;
  EXPECT_EQ(gen[page_a].load(), 0u);
  tier->Free(*a);
  EXPECT_EQ(gen[page_a].load(), 1u);
  EXPECT_EQ(gen[page_b].load(), 0u);
  auto again = tier->Allocate(64 * kKiB);  // the same slot, most likely
  ASSERT_TRUE(again.ok());
  tier->Free(*again);
  tier->Free(*b);
  EXPECT_EQ(gen[tier->SlotOffset(*again) / kSlotPageBytes].load(), *again == *a ? 2u : 1u);
  EXPECT_EQ(gen[page_b].load(), 1u);
  // Not found in an arena without the header (a torn or foreign mapping).
  std::vector<std::byte> zeros(64 * kKiB);
  EXPECT_EQ(FindSlotGenerations(zeros.data(), zeros.size(), &entries), nullptr);
  EXPECT_EQ(munmap(worker, tier->arena_bytes()), 0);
}

TEST(ArenaTierTest, RejectsZeroAndTooLargeAllocations) {
  auto tier = MakeHost(4 * kMiB);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Allocate(4 * kMiB + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(ArenaTierTest, FullTierIsExhaustedUntilASlotIsFreed) {
  auto tier = MakeHost(4 * kMiB);
  ASSERT_NE(tier, nullptr);
  std::vector<SlotId> slots;
  for (auto s = tier->Allocate(kMiB - 100); s.ok(); s = tier->Allocate(kMiB - 100)) {
    slots.push_back(*s);
    ASSERT_LE(tier->used_bytes(), tier->capacity_bytes());
  }
  EXPECT_EQ(slots.size(), 4u);
  EXPECT_EQ(tier->used_bytes(), 4 * kMiB);
  EXPECT_EQ(tier->Allocate(kMiB).status().code(), StatusCode::kResourceExhausted);
  tier->Free(slots[2]);
  EXPECT_EQ(tier->used_bytes(), 3 * kMiB);
  auto again = tier->Allocate(kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, slots[2]);
}

TEST(ArenaTierTest, ReadWriteRoundTripIsExactAndIsolated) {
  auto tier = MakeHost(8 * kMiB);
  ASSERT_NE(tier, nullptr);
  const size_t n = 3 * kSlotPageBytes + 17;  // not a page multiple
  auto a = tier->Allocate(n);
  auto b = tier->Allocate(n);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(tier->SlotOffset(*a), uint64_t{*a} * kSlotPageBytes);
  const auto da = Pattern(n, 1);
  const auto db = Pattern(n, 2);
  ASSERT_TRUE(tier->Write(*a, da).ok());
  ASSERT_TRUE(tier->Write(*b, db).ok());

  std::vector<std::byte> back(n);
  ASSERT_TRUE(tier->Read(*a, back).ok());
  EXPECT_EQ(back, da);
  ASSERT_TRUE(tier->Read(*b, back).ok());
  EXPECT_EQ(back, db);

  std::span<std::byte> view = tier->HostView(*a, n);
  ASSERT_EQ(view.size(), n);
  EXPECT_TRUE(std::equal(view.begin(), view.end(), da.begin()));
  view[0] = ~view[0];  // writes through the view are what Read returns
  ASSERT_TRUE(tier->Read(*a, back).ok());
  EXPECT_EQ(back[0], ~da[0]);
}

TEST(ArenaTierTest, OversizeAndUnallocatedAccessIsRejected) {
  auto tier = MakeHost(8 * kMiB);
  ASSERT_NE(tier, nullptr);
  auto slot = tier->Allocate(5000);  // an 8 KiB slot
  ASSERT_TRUE(slot.ok());
  std::vector<std::byte> fits(8 * kKiB);
  std::vector<std::byte> too_big(8 * kKiB + 1);
  EXPECT_TRUE(tier->Write(*slot, fits).ok());
  EXPECT_TRUE(tier->Read(*slot, fits).ok());
  EXPECT_EQ(tier->Write(*slot, too_big).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Read(*slot, too_big).code(), StatusCode::kInvalidArgument);

  tier->Free(*slot);
  EXPECT_EQ(tier->Read(*slot, fits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(*slot, fits).code(), StatusCode::kInvalidArgument);
}

TEST(ArenaTierTest, ArenaFdMapsTheSameBytes) {
  auto tier = MakeHost(8 * kMiB);
  ASSERT_NE(tier, nullptr);
  const size_t n = 100 * kKiB + 1;
  auto slot = tier->Allocate(n);
  ASSERT_TRUE(slot.ok());
  const auto data = Pattern(n, 9);
  ASSERT_TRUE(tier->Write(*slot, data).ok());

  // A second, independent mapping of the fd, as a worker would make.
  const auto bytes = static_cast<size_t>(tier->arena_bytes());
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, tier->arena_fd(), 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  auto* other = static_cast<std::byte*>(map) + tier->SlotOffset(*slot);
  EXPECT_EQ(std::memcmp(other, data.data(), n), 0);
  other[n - 1] = std::byte{0x5a};
  std::vector<std::byte> back(n);
  ASSERT_TRUE(tier->Read(*slot, back).ok());
  EXPECT_EQ(back[n - 1], std::byte{0x5a});
  munmap(map, bytes);
}

TEST(ArenaTierTest, ChildProcessSeesAndWritesTheArena) {
  auto tier = MakeHost(8 * kMiB);
  ASSERT_NE(tier, nullptr);
  const size_t n = 64 * kKiB;
  auto slot = tier->Allocate(n);
  ASSERT_TRUE(slot.ok());
  const auto data = Pattern(n, 11);
  std::span<std::byte> view = tier->HostView(*slot, n);
  ASSERT_EQ(view.size(), n);
  std::copy(data.begin(), data.end(), view.begin());

  const int fd = tier->arena_fd();
  const auto bytes = static_cast<size_t>(tier->arena_bytes());
  const uint64_t offset = tier->SlotOffset(*slot);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: map the fd afresh, check the parent's bytes, answer by
    // inverting them. Only async-signal-safe calls, then _exit.
    void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) _exit(2);
    auto* p = static_cast<std::byte*>(map) + offset;
    if (std::memcmp(p, data.data(), n) != 0) _exit(3);
    for (size_t i = 0; i < n; ++i) p[i] = ~p[i];
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "2: mmap failed, 3: child saw other bytes";
  std::vector<std::byte> back(n);
  ASSERT_TRUE(tier->Read(*slot, back).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], ~data[i]) << "byte " << i;
}

TEST(ArenaTierTest, MixedSizesShareTheArena) {
  auto tier = MakeHost(64 * kMiB, 4 * kMiB);
  ASSERT_NE(tier, nullptr);
  struct Block {
    SlotId slot;
    std::vector<std::byte> data;
  };
  std::vector<Block> blocks;
  const size_t sizes[] = {100 * kKiB + 1, 300 * kKiB, 1536 * kKiB + 1000};
  for (uint64_t i = 0;; ++i) {
    const size_t n = sizes[i % 3];
    auto s = tier->Allocate(n);
    if (!s.ok()) {
      ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted);
      break;
    }
    blocks.push_back({*s, Pattern(n, i)});
    ASSERT_TRUE(tier->Write(*s, blocks.back().data).ok());
    ASSERT_LE(tier->used_bytes(), tier->capacity_bytes());
  }
  // No block overwrote another.
  for (const Block& b : blocks) {
    std::vector<std::byte> back(b.data.size());
    ASSERT_TRUE(tier->Read(b.slot, back).ok());
    ASSERT_EQ(back, b.data);
  }
  for (const Block& b : blocks) tier->Free(b.slot);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

}  // namespace
}  // namespace kvtier::tiers

namespace kvtier::tiers {
namespace {

// A worker holds the arena's fd: it may write blocks through a mapping of
// it, but never resize it under the daemon (a shrink would make the
// daemon's next touch SIGBUS) nor seal it further (F_SEAL_FUTURE_WRITE would
// stop every later worker from mapping it writable).
TEST(ArenaTierTest, WorkersCannotResizeOrSealTheArena) {
  for (bool host : {true, false}) {
    SCOPED_TRACE(host ? "host" : "emulated device");
    auto tier = host ? NewHostTier({4 * kMiB, kMiB, false})
                     : NewEmulatedDeviceTier({4 * kMiB, kMiB, false});
    ASSERT_TRUE(tier.ok());
    const int fd = (*tier)->arena_fd();
    ASSERT_GE(fd, 0);
    EXPECT_NE(::ftruncate(fd, 0), 0);
    EXPECT_EQ(errno, EPERM);
    EXPECT_NE(::ftruncate(fd, 8 * kMiB), 0);
    EXPECT_NE(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
    // A worker's mapping still writes the bytes the daemon serves.
    void* p = ::mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    auto slot = (*tier)->Allocate(4096);
    ASSERT_TRUE(slot.ok());
    std::memset(static_cast<char*>(p) + (*tier)->SlotOffset(*slot), 0x5a, 4096);
    std::vector<std::byte> out(4096);
    ASSERT_TRUE((*tier)->Read(*slot, out).ok());
    EXPECT_EQ(out[100], std::byte{0x5a});
    ::munmap(p, 4 * kMiB);
  }
}

}  // namespace
}  // namespace kvtier::tiers

// Arena tiers: the host tier and the emulated device tier, one memfd arena
// each, cut into slots by a SlabAllocator.
//
// Both use a memfd so that a worker process can map the very bytes the
// daemon serves (the fd travels once, with SCM_RIGHTS); the emulated device
// uses the same kind of arena so that tests of the device path run the
// host code unchanged.
#include <fcntl.h>
#include <linux/memfd.h>  // MFD_HUGE_2MB
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/slot_generations.h"
#include "common/units.h"
#include "tiers/internal/cuda_runtime.h"
#include "tiers/internal/slab_allocator.h"
#include "tiers/internal/slab_tier.h"
#include "tiers/tier.h"

namespace kvtier::tiers {
namespace {

static_assert(kSlotPageBytes == kSlotGenerationPageBytes, "a SlotId indexes the generations");

using internal::SlabAllocator;

std::string ErrnoText(int err) { return std::string(std::strerror(err)); }

// ENOMEM and friends mean "not enough memory for this arena", anything else
// is a failure of the system call itself.
Status SyscallError(const char* call, int err) {
  const std::string msg = std::string("memfd arena: ") + call + ": " + ErrnoText(err);
  if (err == ENOMEM || err == ENOSPC || err == EFBIG || err == EMFILE || err == ENFILE) {
    return ResourceExhaustedError(msg);
  }
  return IoError(msg);
}

// The first number in `path` (a /proc or cgroup file), or nothing.
std::optional<uint64_t> ReadNumber(const std::string& path, std::string_view after = {}) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!after.empty() && line.rfind(after, 0) != 0) continue;
    const size_t digit = line.find_first_of("0123456789", after.size());
    if (digit == std::string::npos) return std::nullopt;
    return std::stoull(line.substr(digit));
  }
  return std::nullopt;
}

// Memory this process could still commit: the kernel's MemAvailable, less
// where its cgroup (v2) limit leaves less; nothing when neither is readable.
std::optional<uint64_t> AvailableMemoryBytes() {
  std::optional<uint64_t> avail = ReadNumber("/proc/meminfo", "MemAvailable:");
  if (avail) *avail *= 1024;  // kB
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  if (std::getline(cgroup, line) && line.rfind("0::", 0) == 0) {
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    const std::optional<uint64_t> max = ReadNumber(dir + "/memory.max");  // "max": none
    const std::optional<uint64_t> used = ReadNumber(dir + "/memory.current");
    if (max && used) {
      const uint64_t left = *max > *used ? *max - *used : 0;
      if (!avail || left < *avail) avail = left;
    }
  }
  return avail;
}

// Owns the mapping and the fd; unmaps and closes on destruction.
class ArenaTier final : public internal::SlabTier {
 public:
  // `mapped_bytes` of the arena from `base`: the slots' bytes, rounded up
  // to `page_bytes`.
  ArenaTier(TierKind kind, SlabAllocator allocator, int fd, std::byte* base, uint64_t mapped_bytes,
            bool async_copies, uint64_t page_bytes)
      : SlabTier(std::move(allocator)),
        kind_(kind),
        fd_(fd),
        base_(base),
        mapped_bytes_(mapped_bytes),
        async_copies_(async_copies),
        page_bytes_(page_bytes) {}
  ArenaTier(const ArenaTier&) = delete;
  ArenaTier& operator=(const ArenaTier&) = delete;
  ~ArenaTier() override {
    if (pinned_) internal::CudaHostUnregister(base_);
    munmap(base_, mapped_bytes_);
    close(fd_);
  }

  TierKind kind() const override { return kind_; }
  bool emulated() const override { return kind_ == TierKind::kDevice; }

  std::string description() const override {
    std::string arena = "memfd arena, " + FormatBytes(allocator_.capacity_bytes()) + ", " +
                        FormatBytes(allocator_.slab_target_bytes()) + " slabs, " +
                        (page_bytes_ == kHugePageBytes ? "2 MiB huge pages" : "4 KiB pages");
    if (kind_ == TierKind::kDevice) return "device: emulated in host memory (no GPU), " + arena;
    return "host: " + arena + (pinned_ ? ", page-locked for the GPU" : pin_note_);
  }

  // Page-locks the arena for DMA to a GPU; where that fails the tier stays
  // pageable and says why in description().
  void RegisterWithCuda() {
    const Status s = internal::CudaHostRegister(base_, mapped_bytes_);
    pinned_ = s.ok();
    if (!pinned_) pin_note_ = ", not page-locked (" + std::string(s.message()) + ")";
  }
  bool copies_async() const override { return async_copies_; }

  // A freed slot's generation is raised before the slot can be allocated
  // again, so that a worker copying it without a lease finds the change
  // (common/slot_generations.h). The fence keeps the raise ahead of whatever
  // the slot's next owner writes.
  void Free(SlotId slot) override {
    Generation(slot).fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    SlabTier::Free(slot);
  }

  Status Read(SlotId slot, std::span<std::byte> dst) override {
    KVTIER_RETURN_IF_ERROR(CheckSlot(slot, dst.size(), "Read"));
    std::memcpy(dst.data(), At(slot), dst.size());
    return Status::Ok();
  }
  Status Write(SlotId slot, std::span<const std::byte> src) override {
    KVTIER_RETURN_IF_ERROR(CheckSlot(slot, src.size(), "Write"));
    std::memcpy(At(slot), src.data(), src.size());
    return Status::Ok();
  }

  std::span<std::byte> HostView(SlotId slot, uint64_t block_bytes) override {
    // An empty span would read as "not host-addressable"; a bad slot here is
    // a caller bug, so it asserts, and release builds get the empty span
    // rather than bytes of another block.
    const bool ok = CheckSlot(slot, block_bytes, "HostView").ok();
    assert(ok && "HostView of a slot not allocated for that many bytes");
    if (!ok) return {};
    return {At(slot), static_cast<size_t>(block_bytes)};
  }
  int arena_fd() const override { return fd_; }
  // What a worker maps: on huge pages a whole number of them (a mapping of
  // huge pages is unmapped whole).
  uint64_t arena_bytes() const override { return mapped_bytes_; }

 private:
  std::byte* At(SlotId slot) const { return base_ + SlotOffset(slot); }
  // A SlotId is the slot's first page: its entry in the table after the slots.
  std::atomic<uint64_t>& Generation(SlotId slot) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(base_ + allocator_.capacity_bytes())[slot];
  }

  const TierKind kind_;
  const int fd_;
  std::byte* const base_;
  const uint64_t mapped_bytes_;
  const bool async_copies_;
  const uint64_t page_bytes_;  // kHugePageBytes or kSlotPageBytes
  bool pinned_ = false;
  std::string pin_note_;
};

// A sealed memfd of `bytes`, mapped: on 4 KiB pages, or on huge pages
// (`flags` with MFD_HUGETLB) from the kernel's pool.
struct Arena {
  int fd = -1;
  std::byte* base = nullptr;
};
Result<Arena> MapArena(TierKind kind, uint64_t bytes, unsigned flags, bool reserve) {
  const int fd = memfd_create(kind == TierKind::kHost ? "kvtier-host-arena" : "kvtier-device-arena",
                              MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
  if (fd < 0) return SyscallError("memfd_create", errno);
  auto fail = [fd](const char* call) {
    const int err = errno;
    close(fd);
    return SyscallError(call, err);
  };
  // Sizing the memfd commits no memory: its pages appear on first touch,
  // unless fallocate commits them now.
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return fail("ftruncate");
  // Workers get this fd: sealed, none of them can shrink the arena under
  // the daemon (its next touch of a page past the end would be SIGBUS) or
  // grow it. Writing the bytes stays allowed: that is the point.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail("fcntl(F_ADD_SEALS) on the arena");
  }
  if (reserve && fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    return fail("fallocate (reserving the arena's memory)");
  }
  // On huge pages the mapping also reserves the pool's pages it will need
  // (no MAP_NORESERVE), so a short pool fails here, not later with SIGBUS.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  return Arena{fd, static_cast<std::byte*>(base)};
}

// The pool's free huge pages of the default size, for the notes.
std::string HugePoolText() {
  const std::optional<uint64_t> free = ReadNumber("/proc/meminfo", "HugePages_Free:");
  const std::optional<uint64_t> total = ReadNumber("/proc/meminfo", "HugePages_Total:");
  if (!free || !total) return "the pool's size is unknown";
  return "the pool (vm.nr_hugepages) has " + std::to_string(*free) + " of " +
         std::to_string(*total) + " free";
}

Result<std::unique_ptr<Tier>> NewArenaTier(TierKind kind, const ArenaTierOptions& options) {
  if (options.capacity_bytes == 0 || options.capacity_bytes > SlabAllocator::kMaxArenaBytes) {
    return InvalidArgumentError("arena tier: capacity of " +
                                std::to_string(options.capacity_bytes) +
                                " bytes must be > 0 and at most 8 TiB");
  }
  // The slots' bytes, and those of the memfd and its mapping: the slots,
  // then their generations (common/slot_generations.h), on huge pages
  // rounded up to a whole number of them.
  const uint64_t slot_bytes = AlignUp(options.capacity_bytes, kSlotPageBytes);
  const uint64_t with_generations = slot_bytes + SlotGenerationsBytes(slot_bytes);
  std::optional<Arena> arena;
  uint64_t arena_bytes = 0;
  bool huge = false;  // the arena is on huge pages
  std::string pages_note;
  if (options.huge_pages != HugePages::kOff) {
    arena_bytes = AlignUp(with_generations, kHugePageBytes);
    const uint64_t pages = arena_bytes / kHugePageBytes;
    Result<Arena> got =
        MapArena(kind, arena_bytes, MFD_HUGETLB | MFD_HUGE_2MB, options.reserve_memory);
    if (got.ok()) {
      arena = *got;
      huge = true;
    } else {
      const std::string wanted = std::to_string(pages) + " huge pages of 2 MiB for the arena's " +
                                 FormatBytes(arena_bytes) + " not got (" +
                                 std::string(got.status().message()) + "; " + HugePoolText() + ")";
      if (options.huge_pages == HugePages::kOn) {
        return ResourceExhaustedError(
            "arena tier: " + wanted +
            ": make the pool larger (sysctl vm.nr_hugepages, docs/operations.md), or set "
            "host.huge_pages = \"auto\" to fall back to 4 KiB pages");
      }
      pages_note = "the arena is on 4 KiB pages: " + wanted +
                   ". Copying a block out of 4 KiB pages runs at about 0.6x of memcpy; "
                   "sysctl vm.nr_hugepages=" +
                   std::to_string(pages) +
                   " (or more) gives kvtierd huge pages at its next start (docs/operations.md)";
    }
  }
  if (!arena) {
    arena_bytes = with_generations;
    // Committing more than the machine has would not fail: the kernel's OOM
    // killer would end the daemon mid-start. Refuse first, saying what to do.
    if (options.reserve_memory) {
      const std::optional<uint64_t> avail = AvailableMemoryBytes();
      if (avail && arena_bytes > *avail) {
        return ResourceExhaustedError(
            "arena tier: its " + FormatBytes(arena_bytes) + " exceed the " + FormatBytes(*avail) +
            " of memory available to kvtierd (MemAvailable, or its cgroup's limit): lower the "
            "capacity (host.capacity, --host-capacity), or set host.reserve_memory = false "
            "(--no-reserve-memory) to take the memory as blocks are written");
      }
    }
    KVTIER_ASSIGN_OR_RETURN(arena, MapArena(kind, arena_bytes, 0, options.reserve_memory));
    // Where the kernel makes transparent huge pages of shared memory on
    // request (shmem_enabled "advise"), this gets them; elsewhere it is a
    // no-op.
    if (options.huge_pages != HugePages::kOff) {
      madvise(arena->base, arena_bytes, MADV_HUGEPAGE);
    }
  }
  Result<SlabAllocator> allocator = SlabAllocator::Create(slot_bytes, options.slab_bytes);
  if (!allocator.ok()) {
    munmap(arena->base, arena_bytes);
    close(arena->fd);
    return allocator.status();
  }
  if (!pages_note.empty() && options.note) options.note(pages_note);
  SlotGenerationsHeader header{};
  std::memcpy(header.magic, kSlotGenerationsMagic, sizeof header.magic);
  header.table_offset = slot_bytes;
  header.entries = slot_bytes / kSlotGenerationPageBytes;
  header.page_bytes = kSlotGenerationPageBytes;
  std::memcpy(arena->base + arena_bytes - kSlotGenerationPageBytes, &header, sizeof header);
  auto tier = std::make_unique<ArenaTier>(kind, std::move(allocator).value(), arena->fd,
                                          arena->base, arena_bytes, options.async_copies,
                                          huge ? kHugePageBytes : kSlotPageBytes);
  if (kind == TierKind::kHost && options.register_with_cuda) tier->RegisterWithCuda();
  return std::unique_ptr<Tier>(std::move(tier));
}

}  // namespace

std::optional<HugePages> ParseHugePages(std::string_view name) {
  if (name == "auto") return HugePages::kAuto;
  if (name == "on") return HugePages::kOn;
  if (name == "off") return HugePages::kOff;
  return std::nullopt;
}

Result<std::unique_ptr<Tier>> NewHostTier(const ArenaTierOptions& options) {
  return NewArenaTier(TierKind::kHost, options);
}

Result<std::unique_ptr<Tier>> NewEmulatedDeviceTier(const ArenaTierOptions& options) {
  return NewArenaTier(TierKind::kDevice, options);
}

}  // namespace kvtier::tiers

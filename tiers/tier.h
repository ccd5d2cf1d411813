// Tier: one level of block storage (device, host, ssd), cut into slots.
//
// A tier knows bytes and slots, nothing of keys, namespaces, policies or
// sockets; the CacheEngine decides what lives where. A slot holds one block;
// its size is the block size rounded up to the tier's slot granularity.
//
// Thread-safety: a Tier is confined to the engine's thread (strand), like the
// engine itself. Bytes behind HostView() may be read and written by workers
// in other processes while the engine holds the slot pinned for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/fp8.h"
#include "common/layout.h"
#include "common/result.h"
#include "common/units.h"
#include "prefix_index/block_key.h"

namespace kvtier::tiers {

class BlockSealer;  // block_seal.h

// kRemote names where a lookup found a block (the shared remote tier,
// tiers/remote_tier.h); it has no slots, so it is not one of the
// kNumTierKinds slot tiers the engine's per-tier arrays are indexed by.
enum class TierKind : uint8_t { kDevice = 0, kHost = 1, kSsd = 2, kRemote = 3 };
inline constexpr size_t kNumTierKinds = 3;
std::string_view TierKindName(TierKind kind);  // "device", "host", "ssd", "remote"

// What a persistent tier records with a block, so that a restart finds it
// again: its namespace (the tier's own id, from RegisterNamespace), key,
// parent, size and retention priority.
struct BlockInfo {
  uint32_t ns = 0;
  prefix_index::BlockKey key;
  std::optional<prefix_index::BlockKey> parent;
  uint64_t block_bytes = 0;
  uint8_t priority = 35;
  // What WriteBlock returned for the block (the ssd tier's checksum); passed
  // back to ReadBlock, which verifies the bytes against it.
  uint64_t checksum = 0;
  // The form the bytes are in (quantize on demote): block_bytes is that
  // form's size. The tier keeps the mark; the engine encodes and decodes.
  Quantize quantize = Quantize::kOff;
};

// Identifies a slot inside one tier. For arena tiers it is the slot's first
// page: offset = slot * kSlotPageBytes.
using SlotId = uint32_t;
inline constexpr uint64_t kSlotPageBytes = 4 * kKiB;

class Tier {
 public:
  virtual ~Tier() = default;

  virtual TierKind kind() const = 0;
  // One line for logs and STATS: what backs the tier ("host: memfd arena,
  // 1.00 GiB", "device: emulated in host memory, no GPU").
  virtual std::string description() const = 0;
  virtual bool emulated() const { return false; }
  // False for a metadata-only tier (replay's simulator): slots are only
  // accounted, and moves copy nothing.
  virtual bool holds_bytes() const { return true; }

  // Bytes the tier may hold in slots; never exceeded.
  virtual uint64_t capacity_bytes() const = 0;
  // Bytes currently reserved by slots (slot sizes, not block sizes).
  virtual uint64_t used_bytes() const = 0;
  // Bytes one slot for a block of `block_bytes` reserves.
  virtual uint64_t SlotBytes(uint64_t block_bytes) const = 0;

  // Reserves a slot for a block of `block_bytes`. ResourceExhausted when no
  // slot of that size can be had now (the engine evicts and retries);
  // InvalidArgument when such a block can never fit.
  virtual Result<SlotId> Allocate(uint64_t block_bytes) = 0;
  // REQUIRES: `slot` was returned by Allocate and not freed since.
  virtual void Free(SlotId slot) = 0;

  // Copies a block between a slot and host memory; the span's size is the
  // block's size. REQUIRES: slot allocated for at least that many bytes.
  virtual Status Read(SlotId slot, std::span<std::byte> dst) = 0;
  virtual Status Write(SlotId slot, std::span<const std::byte> src) = 0;

  // The slot's bytes in this process, or an empty span when the tier's
  // memory is not host-addressable (a real GPU, a disk, a metadata-only tier).
  virtual std::span<std::byte> HostView(SlotId slot, uint64_t block_bytes) = 0;
  // Byte offset of the slot inside the tier's shareable arena.
  virtual uint64_t SlotOffset(SlotId slot) const = 0;
  // A file descriptor of the arena another process can mmap (memfd), or -1.
  // Owned by the tier.
  virtual int arena_fd() const { return -1; }
  // Total bytes of the arena behind arena_fd() (>= capacity_bytes()).
  virtual uint64_t arena_bytes() const { return capacity_bytes(); }

  // ---- Tiers whose I/O blocks (ssd) -----------------------------------
  // True: ReadBlock/WriteBlock/ForgetBlock block on a device, so the engine
  // runs them on its IoExecutor, concurrently, and they must be
  // thread-safe. Allocate/Free stay on the engine's thread.
  virtual bool io_bound() const { return false; }
  // True: copies into this tier (Write) are bulk DMA that the engine runs on
  // its copy pool when promoting a block, never on its own thread (a real
  // GPU arena). Write must then be thread-safe with the engine's thread.
  virtual bool copies_async() const { return false; }
  // A GPU arena's CUDA IPC handle (cudaIpcMemHandle_t bytes) and ordinal,
  // for workers to map it; empty and -1 for other tiers.
  virtual std::span<const std::byte> ipc_handle() const { return {}; }
  virtual int device_ordinal() const { return -1; }
  // Like Write/Read, and a persistent tier records `info` with the block
  // (payload first, record after: a crash never leaves a record pointing
  // at half-written bytes). WriteBlock returns the checksum to hand back in
  // info.checksum; ReadBlock verifies what it read against it: a mismatch
  // is Corruption, never wrong bytes. The ssd tier also takes spans padded
  // past info.block_bytes to the next 4 KiB (one direct I/O instead of a
  // bounced tail); the padding is not the block's.
  virtual Result<uint64_t> WriteBlock(SlotId slot, const BlockInfo& /*info*/,
                                      std::span<const std::byte> bytes) {
    KVTIER_RETURN_IF_ERROR(Write(slot, bytes));
    return uint64_t{0};
  }
  virtual Status ReadBlock(SlotId slot, const BlockInfo& /*info*/, std::span<std::byte> out) {
    return Read(slot, out);
  }
  // Frees the slot of a block that leaves the tier (engine's thread). A
  // persistent tier keeps the block's record until ForgetBlock deletes it,
  // and deletes it itself before anything is written into the slot again:
  // a record must never outlive its bytes, even when a kill comes between.
  virtual void FreeBlock(SlotId slot, const BlockInfo& /*info*/) { Free(slot); }
  // Deletes the record of a block FreeBlock freed (on the IoExecutor);
  // nothing when the slot's next write, or a newer record of the block,
  // came first.
  virtual Status ForgetBlock(SlotId /*slot*/, const BlockInfo& /*info*/) { return Status::Ok(); }
  // A block a persistent tier holds from an earlier run (warm restart).
  using StoredBlockFn = std::function<Status(const BlockInfo& info, SlotId slot)>;
  // Calls `fn` for each block stored by an earlier run, its slot already
  // reserved again; records that cannot be restored are dropped. Call
  // once, before any Allocate. Non-persistent tiers have none.
  virtual Status ForEachStoredBlock(const StoredBlockFn& /*fn*/) { return Status::Ok(); }
  // The namespaces an earlier run registered (RegisterNamespace).
  using StoredNamespaceFn = std::function<Status(uint32_t id, const std::string& model,
                                                 const std::string& salt, const Layout& layout)>;
  virtual Status ForEachStoredNamespace(const StoredNamespaceFn& /*fn*/) { return Status::Ok(); }
  // Persistent tiers: the directory's secret, stable across restarts, for
  // keys that must stay valid as long as the stored blocks. Empty otherwise.
  virtual std::span<const std::byte> persistent_secret() const { return {}; }
  // Flushes everything written so far to stable storage (clean shutdown).
  virtual Status Sync() { return Status::Ok(); }
  // Tiers that seal blocks (the SSD tier with block keys): how many blocks
  // are on record under each key id, now. Empty otherwise.
  virtual std::map<uint32_t, uint64_t> SealedBlocksByKey() const { return {}; }
  // Tiers that check what they read back (the SSD tier): blocks refused, by
  // cause ("record", "seal", "checksum"). Empty otherwise.
  virtual std::map<std::string, uint64_t> RejectedByCause() const { return {}; }

  // Persistent tiers: a stable id for the namespace (model, salt, layout)
  // across restarts. Others: 0.
  virtual Result<uint32_t> RegisterNamespace(const std::string& /*model*/,
                                             const std::string& /*salt*/,
                                             const Layout& /*layout*/) {
    return uint32_t{0};
  }
};

// Whether an arena tier's memory comes from the kernel's pool of 2 MiB huge
// pages (memfd_create with MFD_HUGETLB; the pool is vm.nr_hugepages).
// Copying a block out of 4 KiB pages walks the page table once per 4 KiB:
// on the machines we measured, a 2 MiB block copied out of 4 KiB pages ran
// at 0.5-0.6x of the same copy out of huge pages (docs/performance.md).
enum class HugePages {
  kAuto,  // huge pages where the pool has enough, else 4 KiB pages, with a note
  kOn,    // huge pages, or the tier is not made (an error naming the pool)
  kOff,   // 4 KiB pages
};
inline constexpr uint64_t kHugePageBytes = 2 * kMiB;
// "auto", "on", "off"; nothing for another name.
std::optional<HugePages> ParseHugePages(std::string_view name);

struct ArenaTierOptions {
  // Bytes of block slots the tier holds; rounded up to kSlotPageBytes
  // (to kHugePageBytes on huge pages).
  // Default 1 GiB.
  uint64_t capacity_bytes = 1 * kGiB;
  // Target size of one size-class slab. Blocks of one size share a slab; a
  // larger slab wastes less per slab but keeps a block size's memory longer
  // when the mix of sizes changes. A block larger than this gets a slab of
  // its own. Default 64 MiB.
  uint64_t slab_bytes = 64 * kMiB;
  // Commit the arena's memory at creation (fallocate on the memfd), so a
  // machine short of memory fails at start with a clear error rather than
  // with SIGBUS in a worker on first touch. Costs the memory up front and a
  // start-up pass over the pages. Default on.
  bool reserve_memory = true;
  // Host tier: page-lock the arena for the GPU (cudaHostRegister) so copies
  // to and from a CUDA device tier run by DMA at the bus's speed. Where that
  // fails (no GPU, no CUDA in the build, a memlock limit) the tier works
  // unpinned and description() says so. Default off.
  bool register_with_cuda = false;
  // Emulated device tier: copies_async(), so the engine's asynchronous
  // path for a real GPU's copies runs (for tests) without one. Default off.
  bool async_copies = false;
  // Huge pages for the arena; description() says which pages it got.
  // Default off here (tests, the emulated device); the daemon's host tier
  // asks for auto.
  HugePages huge_pages = HugePages::kOff;
  // Receives a note worth an operator's attention (huge pages asked for
  // and not got). Empty: none.
  std::function<void(const std::string&)> note = {};
};

// The host tier: one memfd_create arena, mapped shared, that another process
// can map through arena_fd(). Slots are page-aligned; blocks of several sizes
// (namespaces) share the arena through size-class slabs.
Result<std::unique_ptr<Tier>> NewHostTier(const ArenaTierOptions& options);

struct SsdTierOptions {
  // The data directory: created if missing; refused (and left untouched)
  // when another format version wrote it.
  std::string dir;
  // Bytes of block slots on disk; never exceeded. Also the slot file's
  // size: it is written once in full (see `prepare`), claiming the space.
  uint64_t capacity_bytes = 64 * kGiB;
  // O_DIRECT payload I/O (falls back to buffered where refused, e.g. tmpfs).
  bool direct_io = true;
  // How the slot file is made ready: "background" (default: written once on
  // a thread of its own while the tier serves what is done), "foreground"
  // (written before the tier is made), "sparse" (no writing; blocks then
  // write into holes, which ext4 made 0.35-0.6x as fast).
  std::string prepare = "background";
  // Receives notes worth an operator's attention (preparation started,
  // done, stopped; O_DIRECT refused). Empty: stderr.
  std::function<void(const std::string&)> note;
  // Names the secret the blocks' keys are hashed under when it is not the
  // directory's own: DeploymentSecretVerifier (remote_tier.h) of the
  // deployment secret of a node with a remote tier. A directory holding
  // blocks keyed under another secret is refused (FailedPrecondition).
  // Empty: the directory's own secret (persistent_secret()).
  std::string keys_secret_id;
  // For tests of what a failing disk does to the reads above it: this share
  // of the tier's payload reads (0 to 1) fails with EIO, spread evenly. 0: off.
  double fault_read_errors = 0;
  // Seals every block written and opens every block read (block_seal.h:
  // AES-256-GCM, no plaintext on disk, a changed block or record a miss).
  // Null: blocks in the clear under XXH3-64 checksums.
  std::shared_ptr<BlockSealer> sealer;
};

// The SSD tier: block payloads in one preallocated slot file on local disk, the index of
// what is there in RocksDB, an XXH3-64 checksum per block verified on every
// read. io_bound(): the engine drives it from its IoExecutor.
Result<std::unique_ptr<Tier>> NewSsdTier(const SsdTierOptions& options);

// A tier that holds no bytes, only the accounting of its slots (capacity,
// used bytes): what replay's simulator drives the real engine with. Slots
// are the block size rounded up to kSlotPageBytes, as in the arena tiers.
std::unique_ptr<Tier> NewMetadataTier(TierKind kind, uint64_t capacity_bytes);

// A device tier emulated in host memory, behind the device tier's interface:
// for tests and for machines without a GPU. kind() == kDevice, emulated().
Result<std::unique_ptr<Tier>> NewEmulatedDeviceTier(const ArenaTierOptions& options);

struct CudaTierOptions {
  int device = 0;  // CUDA ordinal
  // Bytes of the cudaMalloc arena; rounded up to kSlotPageBytes.
  uint64_t capacity_bytes = 4 * kGiB;
  uint64_t slab_bytes = 64 * kMiB;  // as ArenaTierOptions::slab_bytes
};

// The device tier on a real GPU: one cudaMalloc arena cut into slots by the
// same slab allocator as the host, exported to workers by its CUDA IPC
// handle; copies by cudaMemcpyAsync on two streams of its own, promotions
// off the engine's thread (copies_async). Unavailable where there is no GPU
// or the build has no CUDA (the daemon then runs without a device tier or
// with the emulated one, and says which).
Result<std::unique_ptr<Tier>> NewCudaDeviceTier(const CudaTierOptions& options);
// The GPUs this process can use, in words ("2 GPUs: 0 NVIDIA H200 (sm_90,
// 139.8 GiB), ..."), or why there are none.
std::string DescribeGpus();

}  // namespace kvtier::tiers

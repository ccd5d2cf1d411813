// SsdStore: block payloads in one preallocated slot file on local disk and
// the index of them in RocksDB, the storage under the SSD tier (DESIGN.md §3).
// Synchronous; it knows nothing of the engine, which runs it on its I/O pool.
//
// Data directory:
//   FORMAT      "kvtier-ssd-format 2\nregion-bytes R\n"; another version is
//               refused and nothing in the directory is changed
//   secret      32 random bytes, mode 0600, made at first open
//   keys        present when the blocks' keys are hashed under a secret not
//               the directory's own (a remote tier's deployment secret): a
//               verifier of that secret (SsdOptions::keys_secret_id)
//   index/      RocksDB: block records and the namespace table
//   blocks.dat  the slot file, `capacity` bytes (rounded down to regions)
//
// Slots: a block of B bytes takes a slot of round_up(B, 4 KiB) in blocks.dat;
// SsdSpace (ssd_space.h) decides where: extents of one slot size inside
// fixed regions, rebuilt at a restart from the records alone.
//
// Preallocation: the file is written once, end to end, before its space is
// used (SsdPreallocate::kWrite, in the background by default). A direct
// write over blocks already written runs at the disk's full speed; one into
// a hole or into fallocated (unwritten) space makes ext4 allocate or convert
// extents on every write, which ran at 0.35-0.6x of that here. Writing the
// file once also claims the disk space at start, so a full disk shows up
// when the tier is made, not in the middle of serving. Until a region is
// written it is not handed out (Allocate says Unavailable).
//
// Crash safety: Write puts the payload before the record, and the RocksDB
// WAL is on, so after a process kill (-9) every record points at complete
// bytes. Without Sync a power loss may lose recent records or leave a record
// over torn bytes; each record carries the XXH3-64 of its payload, checked
// on every Read, so that is a Corruption (a miss), never wrong bytes.
//
// Seals (SsdOptions::sealer, tiers/block_seal.h): the payload is written
// encrypted, and the record carries the seal instead of a checksum (a
// version 3 record); Read checks the record on disk is the version the
// caller names and opens the block as it lands. docs/security.md.
//
// Thread-safety:
//   - Allocate, Reserve, Free, SlotAt and Stats: one thread only (the
//     engine's).
//   - Write, Read, PutRecord, Erase, Sync, ForEachRecord, RegisterNamespace,
//     ForEachNamespace, master_secret: any thread, concurrently, also with
//     the allocator calls. A slot is written and read by one caller at a
//     time (the engine guarantees it); distinct slots go in parallel.
//   - The preparing thread (kBackground) writes only regions not yet handed
//     out.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/fp8.h"
#include "common/layout.h"
#include "common/result.h"
#include "common/status.h"
#include "prefix_index/block_key.h"
#include "tiers/block_seal.h"
#include "tiers/internal/block_file.h"
#include "tiers/internal/ssd_space.h"

namespace rocksdb {
class DB;
}

namespace kvtier::tiers::internal {

using prefix_index::BlockKey;
using prefix_index::NamespaceId;

inline constexpr int kSsdFormatVersion = 2;
inline constexpr size_t kSsdSecretBytes = 32;

// How the slot file's space is made ready (see the file comment).
enum class SsdPreallocate : uint8_t {
  kWrite,       // write the whole file once in Open, then serve
  kBackground,  // write it on a thread of the store's own; regions serve as they are done
  kSparse,      // a sparse file of full size at once; writes into holes are slower
};

struct SsdOptions {
  // The data directory; created if missing. Required.
  std::string dir;
  // Most bytes of slots in use (each block counts its 4 KiB-rounded size);
  // also the slot file's size, rounded down to whole regions. Required, at
  // least one region (SsdSpace::RegionBytesFor). Above the file's size at a
  // reopen, the file grows; below it, records beyond are refused at Reserve.
  uint64_t capacity_bytes = 0;
  // O_DIRECT for the slot file (default true): payloads bypass the page
  // cache, which would only hold cold data and cost a copy. Falls back to
  // buffered I/O, with a note, where the filesystem refuses it.
  bool direct_io = true;
  // kWrite (default here) finishes preparing before Open returns: right for
  // tests and small tiers. The daemon uses kBackground, so a large tier
  // starts serving at once.
  SsdPreallocate preallocate = SsdPreallocate::kWrite;
  // RocksDB memtable size. Records are ~90 bytes, so 4 MiB holds ~40k of them
  // before a flush; larger costs memory and WAL replay time at restart.
  size_t index_write_buffer_bytes = 4 << 20;
  // Opens the slot files; empty means OpenBlockFile. Tests inject faults here.
  BlockFileFactory file_factory;
  // Receives notes worth logging (O_DIRECT or hole punching unavailable).
  // Empty means stderr.
  NoteFn note;
  // Names the secret the blocks' keys are hashed under when it is not the
  // directory's own (a deployment secret shared with other nodes: a
  // verifier of it, never the secret). Kept in the file `keys`. A directory
  // holding blocks hashed under another secret than this names is refused
  // (FailedPrecondition), since none of them could ever be found again; an
  // empty one takes the new name. Empty: the directory's own secret.
  std::string keys_secret_id;
  // Seals every block written (tiers/block_seal.h: AES-256-GCM, the block's
  // identity as associated data) and opens every block read: the slot file
  // then holds no plaintext, and a block whose bytes or record were changed
  // on disk does not open (Corruption, a miss). Shared with the remote tier.
  // Null: blocks in the clear, checked by XXH3-64 (today's format).
  std::shared_ptr<BlockSealer> sealer;
};

// A slot: `slot_bytes` at page `page` (4 KiB units) of blocks.dat.
struct SsdSlot {
  uint64_t slot_bytes = 0;  // a multiple of kBlockFileAlignment
  uint64_t page = 0;

  uint64_t offset() const { return page * kSsdPageBytes; }
  friend bool operator==(const SsdSlot&, const SsdSlot&) = default;
};

// One block's record in the index.
struct SsdRecord {
  NamespaceId ns_id = 0;
  BlockKey key;
  bool has_parent = false;
  BlockKey parent;  // meaningful when has_parent
  SsdSlot slot;
  uint64_t block_bytes = 0;  // set by Write
  // Set by Write: the XXH3-64 of the block's bytes, or for a sealed block
  // the first 8 bytes of its seal's tag (what the engine keeps, and hands
  // back to Read to name the version of the block it wrote).
  uint64_t checksum = 0;
  uint8_t priority = 0;
  int64_t created_ns = 0;  // ns since the Unix epoch
  int64_t last_access_ns = 0;
  // How the payload holds the block: as written, or quantized to fp8 (the
  // engine's quantize on demote; the store only keeps the mark).
  Quantize quantize = Quantize::kOff;
  // The block's seal, when it was written by a store with a sealer; set by
  // Write.
  std::optional<Seal> seal;

  friend bool operator==(const SsdRecord&, const SsdRecord&) = default;
};

struct SsdNamespace {
  uint32_t id = 0;
  std::string model;
  std::string salt;
  Layout layout;
};

struct SsdStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;      // slot bytes in use
  uint64_t file_bytes = 0;      // blocks.dat at full size
  uint64_t prepared_bytes = 0;  // of which written once and usable
  bool preparing = false;       // the background writer is still at work
  uint64_t region_bytes = 0;
  uint64_t extents = 0;
  std::map<uint64_t, uint64_t> slots_in_use;  // slot bytes → slots in use
  bool direct_io = true;                      // the slot file uses O_DIRECT
};

struct SsdScanSummary {
  uint64_t records = 0;      // handed to the callback
  uint64_t undecodable = 0;  // skipped: a record that fails to decode
  // With a sealer, records erased because they cannot be served: stored in
  // the clear (written before keys were configured, or planted) or with a
  // checksum that is not their seal's, or sealed under a key the ring no
  // longer holds (rotated out).
  uint64_t unsealed = 0;
  uint64_t rotated_out = 0;
  // With a sealer, the records handed over, by the key that sealed them.
  std::map<uint32_t, uint64_t> sealed_by_key;
};

// Why a block read back was refused (SsdStore::RejectedByCause).
enum class SsdRejection : uint8_t {
  kRecord,    // with a sealer: no record on disk, or not the version written, or in the clear
  kSeal,      // does not open under its seal: changed bytes, another block's, a wrong key
  kChecksum,  // without a sealer: the bytes' XXH3 differs from the record's
};
inline constexpr size_t kSsdRejections = 3;

class SsdStore {
 public:
  // Opens or creates the data directory (see the file comment).
  // FailedPrecondition, with nothing in the directory changed, when FORMAT
  // names another version or the directory is non-empty without FORMAT;
  // InvalidArgument for bad options; IoError when the index cannot open
  // (e.g. another process holds it).
  static Result<std::unique_ptr<SsdStore>> Open(const SsdOptions& options);
  ~SsdStore();
  SsdStore(const SsdStore&) = delete;
  SsdStore& operator=(const SsdStore&) = delete;

  // --- Allocator: one thread only. ---

  // A free slot for a block of `block_bytes` (SsdSpace::Allocate): the
  // lowest free one. ResourceExhausted when it would exceed capacity;
  // Unavailable while the file is not yet prepared far enough;
  // InvalidArgument when block_bytes is 0 or above kMaxBlockBytes.
  Result<SsdSlot> Allocate(uint64_t block_bytes);
  // Marks a slot restored from a record (ForEachRecord) as used, before
  // serving. InvalidArgument for a malformed slot or one past the prepared
  // file; FailedPrecondition when it is already used; ResourceExhausted
  // when it would exceed capacity.
  Status Reserve(const SsdSlot& slot);
  // Returns the slot. REQUIRES: the slot is in use, and its record was
  // Erase()d first (a record must never point at a slot another block may
  // take); FailedPrecondition otherwise.
  Status Free(const SsdSlot& slot);
  // The slot in use that starts at `page`; slot_bytes is 0 when none does.
  SsdSlot SlotAt(uint64_t page) const;
  SsdStats Stats() const;
  // Blocks until the background preparation is done; its error if it failed.
  Status WaitUntilPrepared();

  // --- I/O: any thread. ---

  // Writes `bytes` to record.slot, then puts the record with block_bytes and
  // checksum filled in; returns the record as stored. The payload is written
  // straight from `bytes` when it is 4 KiB aligned (only a partial last page
  // goes through a bounce buffer, zero-padded), else through an aligned
  // bounce buffer. On error no record was written (a record written before
  // under the same key still stands and points at this slot's old bytes,
  // which its checksum no longer matches if they were overwritten).
  // REQUIRES: record.slot comes from Allocate/Reserve and is not being read
  // or written by another caller.
  // `block_bytes` non-zero: the block is bytes.first(block_bytes), and
  // `bytes` runs on to the next 4 KiB boundary (a padded, aligned buffer,
  // written in one direct I/O; the padding is not the block's and not in
  // its checksum).
  Result<SsdRecord> Write(const SsdRecord& record, std::span<const std::byte> bytes,
                          uint64_t block_bytes = 0);
  // Reads the block of `record` into `out` and verifies its checksum:
  // Corruption on a mismatch or a short file, IoError when the disk fails.
  // Never OK with wrong bytes; on error `out` is unspecified. With a sealer,
  // the record on disk is read and must be the one `record` names (its slot,
  // length, form and checksum, i.e. tag: an older version replayed under
  // the key does not pass), and the block must open under its seal.
  // REQUIRES: out.size() == record.block_bytes, or that rounded up to 4 KiB
  // (a padded buffer: one direct I/O, the slot's padding read into the
  // tail), else InvalidArgument.
  Status Read(const SsdRecord& record, std::span<std::byte> out) const;
  // Updates a record's metadata (priority, times) without touching the
  // payload. REQUIRES: `record` was returned by Write or ForEachRecord.
  Status PutRecord(const SsdRecord& record);
  // Deletes the record of (ns_id, key); OK if there is none.
  Status Erase(NamespaceId ns_id, const BlockKey& key);
  // Flushes the slot files and the index to stable storage (clean shutdown).
  Status Sync();
  // Calls `fn` for each record, in key order; stops at and returns the
  // first error `fn` returns. Records that fail to decode are skipped and
  // counted. Used at startup to rebuild the engine's index (then Reserve).
  // With a sealer, records it could never open are erased and counted
  // instead (SsdScanSummary). Without one, a sealed record is
  // FailedPrecondition, naming its key id: the directory's blocks are
  // sealed and the keys are not configured (a restart without the keys must
  // not silently drop the cache).
  Result<SsdScanSummary> ForEachRecord(const std::function<Status(const SsdRecord&)>& fn) const;

  // A persistent, dense id (0, 1, ...) for (model, salt): the same spec gets
  // the same id across restarts; the same model and salt with another layout
  // is InvalidArgument, as is a layout that fails Layout::Validate.
  Result<uint32_t> RegisterNamespace(std::string_view model, std::string_view salt,
                                     const Layout& layout);
  Status ForEachNamespace(const std::function<Status(const SsdNamespace&)>& fn) const;

  // Blocks read back and refused (Read's Corruption), by cause: "record",
  // "seal", "checksum" (SsdRejection). Each cause is also noted, at most once
  // per 10 s each, so that a flood of one never hides another.
  std::map<std::string, uint64_t> RejectedByCause() const;

  // With a sealer: the blocks on record under each key id, now (the last
  // ForEachRecord's count, and every write and erase since). Empty without.
  std::map<uint32_t, uint64_t> SealedBlocksByKey() const;

  // The directory's secret (for keyed hashing), stable across restarts.
  std::span<const std::byte, kSsdSecretBytes> master_secret() const { return secret_; }
  const std::string& dir() const { return options_.dir; }

 private:
  explicit SsdStore(SsdOptions options);
  Status OpenFile(uint64_t region_bytes);
  // Compares the file `keys` with options_.keys_secret_id (see there).
  Status CheckKeysSecret();
  // Writes regions from prepared_regions_ to the end of the file, unless
  // stopped; runs in Open (kWrite) or on prepare_thread_ (kBackground).
  void PrepareRegions();
  Status CheckSlot(const SsdSlot& slot, uint64_t bytes) const;
  Status WritePayload(uint64_t offset, std::span<const std::byte> bytes);
  // With a sealer: puts or deletes (`record` null) the record of (ns, key)
  // and moves it in the count by key (SealedBlocksByKey) from the key its
  // former record was sealed under, if any.
  Status ReplaceSealedRecord(NamespaceId ns, const BlockKey& key, const SsdRecord* record);
  // The identity a seal binds the block of `record` to (its namespace must
  // be registered: Corruption otherwise).
  Result<SealIdentity> IdentityOf(const SsdRecord& record) const;
  // With a sealer: the record on disk of `record`'s block, checked to be the
  // version `record` names.
  Result<SsdRecord> StoredVersionOf(const SsdRecord& record) const;
  Status ReadPayload(uint64_t offset, std::span<std::byte> out) const;
  void Note(std::string_view text) const;

  SsdOptions options_;
  std::array<std::byte, kSsdSecretBytes> secret_{};
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<BlockFile> file_;  // never replaced once open
  uint64_t region_bytes_ = 0;
  uint64_t regions_ = 0;           // in the file at full size
  std::optional<SsdSpace> space_;  // allocator thread

  // Regions [0, prepared_regions_) are written once and may be handed out.
  std::atomic<uint64_t> prepared_regions_{0};
  // Regions wholly in the file when it was opened: only slots there may be
  // restored (Reserve); anything beyond was lost with the file's tail.
  uint64_t restorable_regions_ = 0;
  std::atomic<bool> stop_preparing_{false};
  std::mutex prepare_mu_;
  Status prepare_status_;  // GUARDED_BY(prepare_mu_)
  std::thread prepare_thread_;

  mutable std::mutex ns_mu_;
  // Reads under way (Read): a read is made in parts only when it is alone.
  mutable std::atomic<int> reads_in_flight_{0};
  std::vector<SsdNamespace> namespaces_;  // GUARDED_BY(ns_mu_), indexed by id
  // NamespaceFingerprint of each (a sealed block's identity).
  std::vector<std::array<std::byte, 32>> ns_fingerprints_;  // GUARDED_BY(ns_mu_)
  // Counts a refused read of `cause` and notes it (rate-limited per cause).
  void Rejected(SsdRejection cause, const Status& status) const;
  mutable std::array<std::atomic<uint64_t>, kSsdRejections> rejected_{};
  // When each cause was last noted (steady clock, ns; 0: never).
  mutable std::array<std::atomic<int64_t>, kSsdRejections> rejected_noted_{};
  // With a sealer: the blocks on record by sealing key id. record_mu_ makes
  // a record's read, replacement and count one step.
  std::mutex record_mu_;
  mutable std::mutex by_key_mu_;
  mutable std::map<uint32_t, uint64_t> sealed_by_key_;  // guarded by by_key_mu_
};

}  // namespace kvtier::tiers::internal

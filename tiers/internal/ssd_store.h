// SsdStore: block payloads in slot files on local disk and the index of them
// in RocksDB, the storage under the SSD tier (DESIGN.md §3). Synchronous; it
// knows nothing of the engine, which runs it on its I/O pool.
//
// Data directory:
//   FORMAT               "kvtier-ssd-format 1\n"; another version is refused
//   secret               32 random bytes, mode 0600, made at first open
//   index/               RocksDB: block records and the namespace table
//   blocks-<S>.dat       slot file of slot size S (a multiple of 4 KiB)
//
// Slots: a block of B bytes takes a slot of S = round_up(B, 4 KiB) in
// blocks-S.dat, slot i at offset i * S. Files are sparse: they grow by
// ftruncate as slots are handed out, and Free punches a hole (beyond a small
// reserve of freed slots kept for reuse), so disk use follows the bytes in
// use. Capacity is the sum of the slot bytes in use and
// is never exceeded.
//
// Crash safety: Write puts the payload before the record, and the RocksDB
// WAL is on, so after a process kill (-9) every record points at complete
// bytes. Without Sync a power loss may lose recent records or leave a record
// over torn bytes; each record carries the XXH3-64 of its payload, checked
// on every Read, so that is a Corruption (a miss), never wrong bytes.
//
// Thread-safety:
//   - Allocate, Reserve, Free and Stats: one thread only (the engine's).
//   - Write, Read, PutRecord, Erase, Sync, ForEachRecord, RegisterNamespace,
//     ForEachNamespace, master_secret: any thread, concurrently, also with
//     the allocator calls. A slot is written and read by one caller at a
//     time (the engine guarantees it); distinct slots go in parallel.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/layout.h"
#include "common/result.h"
#include "common/status.h"
#include "prefix_index/block_key.h"
#include "tiers/internal/block_file.h"

namespace rocksdb {
class DB;
}

namespace kvtier::tiers::internal {

using prefix_index::BlockKey;
using prefix_index::NamespaceId;

inline constexpr int kSsdFormatVersion = 1;
inline constexpr size_t kSsdSecretBytes = 32;

struct SsdOptions {
  // The data directory; created if missing. Required.
  std::string dir;
  // Most bytes of slots in use (each block counts its 4 KiB-rounded size).
  // Required, > 0. Files are sparse, so nothing is preallocated.
  uint64_t capacity_bytes = 0;
  // O_DIRECT for the slot files (default true): payloads bypass the page
  // cache, which would only hold cold data and cost a copy. Falls back to
  // buffered I/O, with a note, where the filesystem refuses it.
  bool direct_io = true;
  // Freed slots kept allocated on disk, up to this many bytes, for the next
  // Allocate to reuse; Free punches a hole in the rest. In the tier's steady
  // state (full: each demotion takes the slot an eviction just freed) writes
  // then land on allocated blocks, which on ext4 ran ~1.5x faster than
  // writes into holes (bench_ssd_store: ssd_write vs ssd_write_holes).
  // Disk use stays below used bytes plus this. 0: every Free punches a hole.
  // Preallocating instead (fallocate, unwritten extents) does not help: on
  // ext4 a direct write into an unwritten extent pays the same conversion
  // as one into a hole (fio, this VM: 2 MiB writes 0.7-0.8 GB/s into
  // fallocated space, 0.8-1.2 into holes, 1.5-1.7 over written blocks), so
  // only slots kept written are fast, and a filling tier is not.
  uint64_t kept_free_bytes = 256 << 20;
  // RocksDB memtable size. Records are ~90 bytes, so 4 MiB holds ~40k of them
  // before a flush; larger costs memory and WAL replay time at restart.
  size_t index_write_buffer_bytes = 4 << 20;
  // Opens the slot files; empty means OpenBlockFile. Tests inject faults here.
  BlockFileFactory file_factory;
  // Receives notes worth logging (O_DIRECT or hole punching unavailable).
  // Empty means stderr.
  NoteFn note;
};

// A slot: `index` in the file of `slot_bytes`-byte slots.
struct SsdSlot {
  uint64_t slot_bytes = 0;  // a multiple of kBlockFileAlignment
  uint64_t index = 0;

  uint64_t offset() const { return slot_bytes * index; }
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
  uint64_t checksum = 0;     // XXH3-64 of the block's bytes; set by Write
  uint8_t priority = 0;
  int64_t created_ns = 0;  // ns since the Unix epoch
  int64_t last_access_ns = 0;

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
  uint64_t used_bytes = 0;                    // slot bytes in use
  uint64_t kept_free_bytes = 0;               // freed, not yet hole-punched
  std::map<uint64_t, uint64_t> slots_in_use;  // slot bytes → slots in use
  size_t files = 0;                           // slot files open
  bool direct_io = true;                      // every file uses O_DIRECT
};

struct SsdScanSummary {
  uint64_t records = 0;      // handed to the callback
  uint64_t undecodable = 0;  // skipped: a record that fails to decode
};

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

  // A free slot for a block of `block_bytes`: the lowest one still allocated
  // on disk (kept_free_bytes), else the lowest free one, growing the file if
  // needed. ResourceExhausted when it would exceed capacity; InvalidArgument
  // when block_bytes is 0 or above kMaxBlockBytes.
  Result<SsdSlot> Allocate(uint64_t block_bytes);
  // Marks a slot restored from a record (ForEachRecord) as used, before
  // serving. InvalidArgument for a malformed slot; FailedPrecondition when it
  // is already used; ResourceExhausted when it would exceed capacity.
  Status Reserve(const SsdSlot& slot);
  // Returns the slot and, beyond kept_free_bytes, punches a hole over it.
  // The slot is free whatever
  // the result; an error only says the hole could not be punched (disk use
  // then stays). REQUIRES: the slot is in use, and its record was Erase()d
  // first (a record must never point at a slot another block may take).
  Status Free(const SsdSlot& slot);
  SsdStats Stats() const;

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
  Result<SsdRecord> Write(const SsdRecord& record, std::span<const std::byte> bytes);
  // Reads the block of `record` into `out` and verifies its checksum:
  // Corruption on a mismatch or a short file, IoError when the disk fails.
  // Never OK with wrong bytes; on error `out` is unspecified.
  // REQUIRES: out.size() == record.block_bytes (else InvalidArgument).
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
  Result<SsdScanSummary> ForEachRecord(const std::function<Status(const SsdRecord&)>& fn) const;

  // A persistent, dense id (0, 1, ...) for (model, salt): the same spec gets
  // the same id across restarts; the same model and salt with another layout
  // is InvalidArgument, as is a layout that fails Layout::Validate.
  Result<uint32_t> RegisterNamespace(std::string_view model, std::string_view salt,
                                     const Layout& layout);
  Status ForEachNamespace(const std::function<Status(const SsdNamespace&)>& fn) const;

  // The directory's secret (for keyed hashing), stable across restarts.
  std::span<const std::byte, kSsdSecretBytes> master_secret() const { return secret_; }
  const std::string& dir() const { return options_.dir; }

 private:
  struct SlotClass;
  explicit SsdStore(SsdOptions options);
  Status OpenFiles();
  Result<SlotClass*> GetOrAddClass(uint64_t slot_bytes);
  BlockFile* FindFile(uint64_t slot_bytes) const;
  Status WritePayload(BlockFile& file, uint64_t offset, std::span<const std::byte> bytes);
  Status ReadPayload(BlockFile& file, uint64_t offset, std::span<std::byte> out) const;
  void Note(std::string_view text) const;

  SsdOptions options_;
  std::array<std::byte, kSsdSecretBytes> secret_{};
  std::unique_ptr<rocksdb::DB> db_;

  // Slot classes by slot size. The map's shape is guarded by classes_mu_
  // (inserted by the allocator thread, looked up by I/O threads); a class's
  // allocator fields belong to the allocator thread alone, and its file is
  // never replaced once open.
  mutable std::shared_mutex classes_mu_;
  std::map<uint64_t, std::unique_ptr<SlotClass>> classes_;  // GUARDED_BY(classes_mu_)
  uint64_t used_bytes_ = 0;                                 // allocator thread
  uint64_t kept_free_bytes_ = 0;                            // allocator thread
  bool hole_note_given_ = false;                            // allocator thread

  mutable std::mutex ns_mu_;
  std::vector<SsdNamespace> namespaces_;  // GUARDED_BY(ns_mu_), indexed by id
};

}  // namespace kvtier::tiers::internal

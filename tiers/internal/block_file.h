// BlockFile: positional I/O on one file of fixed-size block slots, the
// storage under the SSD tier (SsdStore), and FaultInjectingFile, a decorator
// that makes it fail on demand for tests (STYLE.md 12).
//
// The real file (OpenBlockFile) uses O_DIRECT: block payloads are written
// once and read back rarely, so the page cache would only evict hotter data
// and add a copy. O_DIRECT needs the buffer address, the offset and the
// length aligned; callers pass kBlockFileAlignment-aligned spans (AlignedBuffer
// gives such memory). Where the filesystem refuses O_DIRECT (EINVAL, e.g.
// tmpfs on older kernels) the file falls back to buffered I/O and says so
// through direct_io() and the note callback; the alignment contract stays.
//
// Errors: ENOSPC/EDQUOT → ResourceExhausted; a read that ends early (the file
// is shorter than asked) → Corruption; any other errno → IoError. Messages
// carry the path, the offset and strerror.
//
// Thread-safety: WriteAt, ReadAt(InParts) and Sync may be called from many
// threads at once (pwrite/pread on one fd, an AIO context lent per read);
// Truncate too, though callers should not shrink a file under concurrent
// I/O.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/status.h"

namespace kvtier::tiers::internal {

// Alignment of O_DIRECT buffers, offsets and lengths; also the slot granule.
inline constexpr uint64_t kBlockFileAlignment = 4096;

inline bool IsBlockAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kBlockFileAlignment == 0;
}

// A heap buffer aligned to kBlockFileAlignment, its size rounded up to it.
// Move-only; zero-filled on allocation.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // ResourceExhausted when the allocation fails.
  static Result<AlignedBuffer> Allocate(size_t bytes);

  std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_.get(), size_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> data_;
  size_t size_ = 0;
};

class BlockFile {
 public:
  virtual ~BlockFile() = default;

  // Writes all of `data` at `offset`.
  // REQUIRES: offset, data.size() and data.data() are multiples of
  // kBlockFileAlignment.
  virtual Status WriteAt(uint64_t offset, std::span<const std::byte> data) = 0;
  // Fills all of `out` from `offset`; Corruption when the file ends first.
  // REQUIRES: as WriteAt. On error the contents of `out` are unspecified.
  virtual Status ReadAt(uint64_t offset, std::span<std::byte> out) = 0;
  // ReadAt, with `out` read as parts of `part` bytes (the last one shorter)
  // that are in flight together, and `landed(p)` called on each part in
  // order as soon as it and every part before it are in `out`: the caller's
  // work on one part (a checksum) overlaps the reading of the next. On
  // error, `landed` may have seen some parts; nothing is in flight when it
  // returns. This default reads all with ReadAt, then calls `landed` on each
  // part; the real file reads the parts through Linux AIO when it does
  // direct I/O. REQUIRES: as ReadAt, and `part` a positive multiple of
  // kBlockFileAlignment.
  using PartFn = std::function<void(std::span<const std::byte>)>;
  virtual Status ReadAtInParts(uint64_t offset, std::span<std::byte> out, size_t part,
                               const PartFn& landed);
  // WriteAt, with `data` written as parts of `part` bytes (the last one
  // shorter) and `fill(p)` called on each part in order just before it is
  // written: the caller's work on one part (encrypting it) overlaps the
  // writing of the parts before. A `fill` error stops it: nothing more is
  // submitted, what is in flight is awaited, and the error returned (the
  // file's bytes there are then unspecified, as after a failed WriteAt).
  // This default fills each part and writes it with WriteAt in turn; the
  // real file submits each part through Linux AIO as soon as it is filled
  // when it does direct I/O. REQUIRES: as WriteAt, and `part` a positive
  // multiple of kBlockFileAlignment.
  using FillFn = std::function<Status(std::span<std::byte>)>;
  virtual Status WriteAtInParts(uint64_t offset, std::span<std::byte> data, size_t part,
                                const FillFn& fill);
  // fdatasync: written data and the file's size reach stable storage.
  virtual Status Sync() = 0;
  // Sets the file's size (ftruncate): growing is sparse and costs no disk.
  virtual Status Truncate(uint64_t size) = 0;
  virtual Result<uint64_t> Size() const = 0;

  virtual const std::string& path() const = 0;
  // False when the file fell back to buffered I/O.
  virtual bool direct_io() const = 0;
};

// Receives one-line notes worth logging (a fallback taken).
using NoteFn = std::function<void(std::string_view)>;

// Opens `path` read-write, creating it (mode 0600) if missing. With
// `direct_io`, O_DIRECT, falling back to buffered I/O (and a note) only when
// open refuses O_DIRECT with EINVAL. `note` may be empty.
Result<std::unique_ptr<BlockFile>> OpenBlockFile(const std::string& path, bool direct_io,
                                                 const NoteFn& note);

// open(2) as OpenBlockFile calls it, so that a test can play a filesystem
// that refuses O_DIRECT wherever it runs (returns -1 and sets errno).
using OpenFn = std::function<int(const char* path, int flags, mode_t mode)>;
Result<std::unique_ptr<BlockFile>> OpenBlockFile(const std::string& path, bool direct_io,
                                                 const NoteFn& note, const OpenFn& open_file);

// Opens one block file for SsdStore; tests substitute one that wraps the real
// file in a FaultInjectingFile.
using BlockFileFactory = std::function<Result<std::unique_ptr<BlockFile>>(
    const std::string& path, bool direct_io, const NoteFn& note)>;

// The faults a FaultInjectingFile injects. Switches are atomics: a test flips
// them at any time while I/O threads run. Must outlive the files using it.
class FaultInjector {
 public:
  // Every WriteAt fails with ENOSPC (ResourceExhausted); nothing is written.
  void SetNoSpaceOnWrite(bool on) { no_space_on_write_.store(on); }
  // Every ReadAt fails with EIO (IoError).
  void SetIoErrorOnRead(bool on) { io_error_on_read_.store(on); }
  // That share of ReadAt calls (0 to 1) fails with EIO, spread evenly: with
  // 0.05, the 20th, 40th, ... read since it was set.
  void SetReadErrorShare(double share);
  // Every ReadAt succeeds but one byte of the result is flipped (as if the
  // disk returned a wrong byte).
  void SetFlipByteOnRead(bool on) { flip_byte_on_read_.store(on); }
  // Reads see the file as if it ended at `length` bytes: a read past it
  // returns short (Corruption). kNotTruncated turns it off.
  static constexpr uint64_t kNotTruncated = UINT64_MAX;
  void SetTruncatedAt(uint64_t length) { truncated_at_.store(length); }
  void Reset();

  // How many operations a fault was injected into.
  uint64_t injected() const { return injected_.load(); }

 private:
  friend class FaultInjectingFile;
  std::atomic<bool> no_space_on_write_{false};
  std::atomic<bool> io_error_on_read_{false};
  std::atomic<uint64_t> read_error_ppm_{0};
  std::atomic<uint64_t> reads_{0};
  std::atomic<bool> flip_byte_on_read_{false};
  std::atomic<uint64_t> truncated_at_{kNotTruncated};
  std::atomic<uint64_t> injected_{0};
};

// Forwards to `base` unless `faults` says otherwise. Same contract and
// thread-safety as BlockFile.
class FaultInjectingFile final : public BlockFile {
 public:
  FaultInjectingFile(std::unique_ptr<BlockFile> base, FaultInjector& faults)
      : base_(std::move(base)), faults_(faults) {}

  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override;
  Status ReadAt(uint64_t offset, std::span<std::byte> out) override;
  Status Sync() override { return base_->Sync(); }
  Status Truncate(uint64_t size) override { return base_->Truncate(size); }
  Result<uint64_t> Size() const override { return base_->Size(); }
  const std::string& path() const override { return base_->path(); }
  bool direct_io() const override { return base_->direct_io(); }

 private:
  std::unique_ptr<BlockFile> base_;
  FaultInjector& faults_;
};

// A BlockFileFactory opening real files wrapped in FaultInjectingFile.
BlockFileFactory FaultInjectingFactory(FaultInjector& faults);
// The same, owning its injector: the factory and each file it opens keep it
// alive (the daemon's ssd.fault_read_errors).
BlockFileFactory FaultInjectingFactory(std::shared_ptr<FaultInjector> faults);

// Small files beside the block files (a data directory's FORMAT, secret).

// Writes `content` to dir/name.tmp.<pid>, syncs it, then links it in as
// dir/name and syncs the directory: the whole file appears or none. With
// `exclusive`, an existing dir/name is kept (and *existed set true) rather
// than replaced, so two racing creators agree on one file.
Status WriteFileDurably(const std::string& dir, const char* name, std::string_view content,
                        mode_t mode, bool exclusive, bool* existed);
// The first `max_bytes` + 1 bytes of `path` at most (so a caller can tell
// a file longer than it expects).
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

}  // namespace kvtier::tiers::internal

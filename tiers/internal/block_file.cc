#include "tiers/internal/block_file.h"

#include <fcntl.h>
#include <linux/aio_abi.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"

namespace kvtier::tiers::internal {
namespace {

// errno of a failed `op` on `path` as a Status. ENOSPC/EDQUOT mean the disk
// (or quota) is full: the caller stops admitting, it is not a broken disk.
Status ErrnoStatus(int err, std::string_view op, const std::string& path, uint64_t offset) {
  std::string msg = std::string(op) + " " + path + " at offset " + std::to_string(offset) + ": " +
                    std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return ResourceExhaustedError(msg);
  return IoError(msg);
}

// Linux AIO through its system calls (no libaio). A context is lent for
// one read in parts and given back after it, to a pool that keeps it for
// the life of the process: destroying a context waits for an RCU grace
// period (32-55 ms here), which a context per thread paid at each thread's
// exit (bench/ssd_vs_fio.sh makes threads per batch: 8 reads of 2 MiB in
// flight fell from 1.00x to 0.87x fio). The pool holds as many contexts as
// there were reads in parts at once.
class AioContext {
 public:
  static constexpr size_t kMaxParts = 16;

  // A context, or none where the kernel gives none (too many system-wide:
  // fs.aio-max-nr); then parts are read with pread.
  static std::optional<AioContext> Borrow() {
    {
      std::lock_guard lock(Pool().mu);
      if (!Pool().idle.empty()) {
        const aio_context_t ctx = Pool().idle.back();
        Pool().idle.pop_back();
        return AioContext(ctx);
      }
    }
    aio_context_t ctx = 0;
    if (::syscall(SYS_io_setup, static_cast<unsigned>(kMaxParts), &ctx) != 0) return std::nullopt;
    return AioContext(ctx);
  }

  AioContext(AioContext&& other) noexcept : ctx_(std::exchange(other.ctx_, 0)) {}
  AioContext& operator=(AioContext&&) = delete;
  ~AioContext() {  // back to the pool, unless a failed wait destroyed it
    if (ctx_ == 0) return;
    std::lock_guard lock(Pool().mu);
    Pool().idle.push_back(ctx_);
  }

  // Submits what it can of `cbs`; how many it took (0: none, read them
  // otherwise).
  size_t Submit(std::span<iocb*> cbs) {
    size_t done = 0;
    while (done < cbs.size()) {
      const long n =
          ::syscall(SYS_io_submit, ctx_, static_cast<long>(cbs.size() - done), cbs.data() + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  // Waits for at least one of `in_flight` submitted reads; their events
  // into `events`, how many. On a failed wait (never, with valid
  // arguments) the context is destroyed, which waits for every read in
  // flight, and -1 returned.
  long Wait(size_t in_flight, std::span<io_event> events) {
    for (;;) {
      const long n =
          ::syscall(SYS_io_getevents, ctx_, 1L,
                    static_cast<long>(std::min(in_flight, events.size())), events.data(), nullptr);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      ::syscall(SYS_io_destroy, ctx_);
      ctx_ = 0;
      return -1;
    }
  }

 private:
  struct IdleContexts {
    std::mutex mu;
    std::vector<aio_context_t> idle;
  };
  // Never destroyed (see above); the kernel frees the contexts at exit.
  static IdleContexts& Pool() {
    static auto* pool = new IdleContexts;
    return *pool;
  }

  explicit AioContext(aio_context_t ctx) : ctx_(ctx) {}

  aio_context_t ctx_;
};

class PosixBlockFile final : public BlockFile {
 public:
  PosixBlockFile(int fd, std::string path, bool direct)
      : fd_(fd), path_(std::move(path)), direct_(direct) {}
  ~PosixBlockFile() override { ::close(fd_); }
  PosixBlockFile(const PosixBlockFile&) = delete;
  PosixBlockFile& operator=(const PosixBlockFile&) = delete;

  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n =
          ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "write", path_, offset + done);
      }
      // pwrite returns 0 only for a zero-length request; treat it as full.
      if (n == 0) return ErrnoStatus(ENOSPC, "write", path_, offset + done);
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status ReadAt(uint64_t offset, std::span<std::byte> out) override {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n =
          ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "read", path_, offset + done);
      }
      if (n == 0) {
        return CorruptionError("short read of " + path_ + ": the file ends at " +
                               std::to_string(offset + done) + ", " +
                               std::to_string(out.size() - done) + " bytes before offset " +
                               std::to_string(offset + out.size()));
      }
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status ReadAtInParts(uint64_t offset, std::span<std::byte> out, size_t part,
                       const PartFn& landed) override {
    std::optional<AioContext> aio =
        direct_ && out.size() > part ? AioContext::Borrow() : std::nullopt;
    if (!aio) return BlockFile::ReadAtInParts(offset, out, part, landed);
    // At most kMaxParts parts, larger ones if need be.
    constexpr size_t kMaxParts = AioContext::kMaxParts;
    if (out.size() > part * kMaxParts) {
      part = (out.size() / kMaxParts + kBlockFileAlignment) / kBlockFileAlignment *
             kBlockFileAlignment;
    }
    const size_t parts = (out.size() + part - 1) / part;
    auto part_of = [&](size_t k) {
      return out.subspan(k * part, std::min(part, out.size() - k * part));
    };
    std::array<iocb, kMaxParts> cbs{};
    std::array<iocb*, kMaxParts> submit{};
    for (size_t k = 0; k < parts; ++k) {
      const std::span<std::byte> p = part_of(k);
      cbs[k].aio_data = k;
      cbs[k].aio_lio_opcode = IOCB_CMD_PREAD;
      cbs[k].aio_fildes = static_cast<uint32_t>(fd_);
      cbs[k].aio_buf = reinterpret_cast<uint64_t>(p.data());
      cbs[k].aio_nbytes = p.size();
      cbs[k].aio_offset = static_cast<int64_t>(offset + k * part);
      submit[k] = &cbs[k];
    }
    const size_t submitted = aio->Submit(std::span(submit).first(parts));
    // Each part's result as its event brings it (bytes read, or -errno).
    constexpr long long kPending = LLONG_MIN;
    std::array<long long, kMaxParts> result;
    result.fill(kPending);
    std::array<io_event, kMaxParts> events{};
    size_t in_flight = submitted;
    Status status;
    for (size_t k = 0; k < parts;) {
      const std::span<std::byte> p = part_of(k);
      const uint64_t at = offset + k * part;
      if (k >= submitted) {  // not taken by io_submit: read here
        if (status.ok()) status = ReadAt(at, p);
        if (status.ok()) landed(p);
        ++k;
        continue;
      }
      if (result[k] == kPending) {
        const long n = aio->Wait(in_flight, events);
        if (n < 0) {  // every read in flight ended with the context
          for (size_t j = k; j < submitted; ++j) result[j] = -EIO;
          in_flight = 0;
          continue;
        }
        for (size_t e = 0; e < static_cast<size_t>(n); ++e) result[events[e].data] = events[e].res;
        in_flight -= static_cast<size_t>(n);
        continue;
      }
      // A part is awaited to its end even after an error, so that nothing
      // is in flight into `out` when this returns.
      if (status.ok()) {
        if (result[k] < 0) {
          status = ErrnoStatus(static_cast<int>(-result[k]), "read", path_, at);
        } else if (static_cast<size_t>(result[k]) < p.size()) {
          // Short (the file's end, or an interrupted read): the rest as
          // ReadAt reads it, which says where the file ends.
          const auto got = static_cast<size_t>(result[k]);
          status = ReadAt(at + got, p.subspan(got));
        }
        if (status.ok()) landed(p);
      }
      ++k;
    }
    return status;
  }

  Status WriteAtInParts(uint64_t offset, std::span<std::byte> data, size_t part,
                        const FillFn& fill) override {
    std::optional<AioContext> aio =
        direct_ && data.size() > part ? AioContext::Borrow() : std::nullopt;
    if (!aio) return BlockFile::WriteAtInParts(offset, data, part, fill);
    constexpr size_t kMaxParts = AioContext::kMaxParts;
    if (data.size() > part * kMaxParts) {
      part = (data.size() / kMaxParts + kBlockFileAlignment) / kBlockFileAlignment *
             kBlockFileAlignment;
    }
    const size_t parts = (data.size() + part - 1) / part;
    auto part_of = [&](size_t k) {
      return data.subspan(k * part, std::min(part, data.size() - k * part));
    };
    std::array<iocb, kMaxParts> cbs{};
    std::array<bool, kMaxParts> submitted{};
    size_t in_flight = 0;
    Status status;
    // Each part filled, then submitted at once (or written here when
    // io_submit does not take it).
    for (size_t k = 0; k < parts && status.ok(); ++k) {
      const std::span<std::byte> p = part_of(k);
      status = fill(p);
      if (!status.ok()) break;
      cbs[k].aio_data = k;
      cbs[k].aio_lio_opcode = IOCB_CMD_PWRITE;
      cbs[k].aio_fildes = static_cast<uint32_t>(fd_);
      cbs[k].aio_buf = reinterpret_cast<uint64_t>(p.data());
      cbs[k].aio_nbytes = p.size();
      cbs[k].aio_offset = static_cast<int64_t>(offset + k * part);
      iocb* one[1] = {&cbs[k]};
      if (aio->Submit(one) == 1) {
        submitted[k] = true;
        ++in_flight;
      } else {
        status = WriteAt(offset + k * part, p);
      }
    }
    // Every part in flight awaited, even after an error: nothing is written
    // from `data` once this returns.
    std::array<io_event, kMaxParts> events{};
    while (in_flight > 0) {
      const long n = aio->Wait(in_flight, events);
      if (n < 0) {  // every write in flight ended with the context
        if (status.ok()) status = IoError("write " + path_ + ": AIO context lost");
        break;
      }
      for (size_t e = 0; e < static_cast<size_t>(n); ++e) {
        const size_t k = events[e].data;
        const long long res = events[e].res;
        const std::span<std::byte> p = part_of(k);
        const uint64_t at = offset + k * part;
        if (!status.ok()) continue;
        if (res < 0) {
          status = ErrnoStatus(static_cast<int>(-res), "write", path_, at);
        } else if (static_cast<size_t>(res) < p.size()) {
          const auto got = static_cast<size_t>(res);  // short: the rest as WriteAt writes it
          status = WriteAt(at + got, p.subspan(got));
        }
      }
      in_flight -= static_cast<size_t>(n);
    }
    return status;
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus(errno, "fdatasync", path_, 0);
    return Status::Ok();
  }

  Status Truncate(uint64_t size) override {
    while (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      if (errno != EINTR) return ErrnoStatus(errno, "truncate", path_, size);
    }
    return Status::Ok();
  }

  Result<uint64_t> Size() const override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return ErrnoStatus(errno, "stat", path_, 0);
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }
  bool direct_io() const override { return direct_; }

 private:
  const int fd_;
  const std::string path_;
  const bool direct_;
};

}  // namespace

Status BlockFile::ReadAtInParts(uint64_t offset, std::span<std::byte> out, size_t part,
                                const PartFn& landed) {
  KVTIER_RETURN_IF_ERROR(ReadAt(offset, out));
  for (size_t at = 0; at < out.size(); at += part) {
    landed(out.subspan(at, std::min(part, out.size() - at)));
  }
  return Status::Ok();
}

Status BlockFile::WriteAtInParts(uint64_t offset, std::span<std::byte> data, size_t part,
                                 const FillFn& fill) {
  for (size_t at = 0; at < data.size(); at += part) {
    const std::span<std::byte> p = data.subspan(at, std::min(part, data.size() - at));
    KVTIER_RETURN_IF_ERROR(fill(p));
    KVTIER_RETURN_IF_ERROR(WriteAt(offset + at, p));
  }
  return Status::Ok();
}

void AlignedBuffer::Free::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t{kBlockFileAlignment});
}

Result<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes) {
  const size_t size = static_cast<size_t>(AlignUp(bytes, kBlockFileAlignment));
  AlignedBuffer buf;
  if (size == 0) return buf;
  auto* p = static_cast<std::byte*>(
      ::operator new[](size, std::align_val_t{kBlockFileAlignment}, std::nothrow));
  if (p == nullptr) {
    return ResourceExhaustedError("cannot allocate an aligned buffer of " + std::to_string(size) +
                                  " bytes");
  }
  std::memset(p, 0, size);
  buf.data_.reset(p);
  buf.size_ = size;
  return buf;
}

Result<std::unique_ptr<BlockFile>> OpenBlockFile(const std::string& path, bool direct_io,
                                                 const NoteFn& note) {
  return OpenBlockFile(path, direct_io, note, [](const char* p, int flags, mode_t mode) {
    return ::open(p, flags, mode);
  });
}

Result<std::unique_ptr<BlockFile>> OpenBlockFile(const std::string& path, bool direct_io,
                                                 const NoteFn& note, const OpenFn& open_file) {
  constexpr int kFlags = O_RDWR | O_CREAT | O_CLOEXEC;
  bool direct = direct_io;
  int fd = -1;
  do {
    fd = open_file(path.c_str(), kFlags | (direct ? O_DIRECT : 0), 0600);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && direct && errno == EINVAL) {
    if (note) note("O_DIRECT refused for " + path + " (EINVAL); using buffered I/O");
    direct = false;
    do {
      fd = open_file(path.c_str(), kFlags, 0600);
    } while (fd < 0 && errno == EINTR);
  }
  if (fd < 0) return ErrnoStatus(errno, "open", path, 0);
  try {
    return std::unique_ptr<BlockFile>(std::make_unique<PosixBlockFile>(fd, path, direct));
  } catch (const std::exception& e) {
    ::close(fd);
    return ResourceExhaustedError(std::string("open ") + path + ": " + e.what());
  }
}

namespace {

Status ErrnoError(std::string_view op, const std::string& path) {
  return IoError(std::string(op) + " " + path + ": " + std::strerror(errno));
}

Status SyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync", path);
  return Status::Ok();
}

}  // namespace

Status WriteFileDurably(const std::string& dir, const char* name, std::string_view content,
                        mode_t mode, bool exclusive, bool* existed) {
  const std::string path = dir + "/" + name;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("create", tmp);
  const ssize_t n = ::write(fd, content.data(), content.size());
  const bool written = n == static_cast<ssize_t>(content.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written) {
    Status s = ErrnoError("write", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (exclusive) {
    // link() fails with EEXIST rather than replace: two first opens racing
    // agree on one secret.
    const int rc = ::link(tmp.c_str(), path.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && err != EEXIST) {
      errno = err;
      return ErrnoError("link", path);
    }
    if (existed != nullptr) *existed = rc != 0;
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoError("rename", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncPath(dir, O_RDONLY | O_DIRECTORY);
}

Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path);
  std::string out(max_bytes + 1, '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoError("read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

void FaultInjector::SetReadErrorShare(double share) {
  const double clamped = share < 0 ? 0 : share > 1 ? 1 : share;
  reads_.store(0);
  read_error_ppm_.store(static_cast<uint64_t>(clamped * 1e6 + 0.5));
}

void FaultInjector::Reset() {
  no_space_on_write_.store(false);
  io_error_on_read_.store(false);
  read_error_ppm_.store(0);
  flip_byte_on_read_.store(false);
  truncated_at_.store(kNotTruncated);
}

Status FaultInjectingFile::WriteAt(uint64_t offset, std::span<const std::byte> data) {
  if (faults_.no_space_on_write_.load()) {
    faults_.injected_.fetch_add(1);
    return ErrnoStatus(ENOSPC, "write", path(), offset);
  }
  return base_->WriteAt(offset, data);
}

Status FaultInjectingFile::ReadAt(uint64_t offset, std::span<std::byte> out) {
  if (faults_.io_error_on_read_.load()) {
    faults_.injected_.fetch_add(1);
    return ErrnoStatus(EIO, "read", path(), offset);
  }
  if (const uint64_t ppm = faults_.read_error_ppm_.load(); ppm > 0) {
    // Read n fails when the failures owed so far, floor(n * share), grow.
    const uint64_t n = faults_.reads_.fetch_add(1);
    if ((n + 1) * ppm / 1000000 > n * ppm / 1000000) {
      faults_.injected_.fetch_add(1);
      return ErrnoStatus(EIO, "read", path(), offset);
    }
  }
  const uint64_t end = faults_.truncated_at_.load();
  if (end != FaultInjector::kNotTruncated && offset + out.size() > end) {
    faults_.injected_.fetch_add(1);
    // Read what the shortened file would still hold, then report it short,
    // exactly as the real file does at its end.
    const uint64_t keep = end > offset ? end - offset : 0;
    const uint64_t keep_aligned = keep / kBlockFileAlignment * kBlockFileAlignment;
    if (keep_aligned > 0) {
      KVTIER_RETURN_IF_ERROR(base_->ReadAt(offset, out.first(static_cast<size_t>(keep_aligned))));
    }
    return CorruptionError("short read of " + path() + ": the file ends at " +
                           std::to_string(offset + keep) + ", " +
                           std::to_string(out.size() - keep) + " bytes before offset " +
                           std::to_string(offset + out.size()));
  }
  KVTIER_RETURN_IF_ERROR(base_->ReadAt(offset, out));
  if (faults_.flip_byte_on_read_.load() && !out.empty()) {
    faults_.injected_.fetch_add(1);
    out[out.size() / 2] ^= std::byte{0x5a};
  }
  return Status::Ok();
}

BlockFileFactory FaultInjectingFactory(FaultInjector& faults) {
  return [&faults](const std::string& path, bool direct_io,
                   const NoteFn& note) -> Result<std::unique_ptr<BlockFile>> {
    KVTIER_ASSIGN_OR_RETURN(auto base, OpenBlockFile(path, direct_io, note));
    return std::unique_ptr<BlockFile>(
        std::make_unique<FaultInjectingFile>(std::move(base), faults));
  };
}

namespace {

// A FaultInjectingFile that holds its injector.
class OwningFaultInjectingFile final : public BlockFile {
 public:
  OwningFaultInjectingFile(std::unique_ptr<BlockFile> base, std::shared_ptr<FaultInjector> faults)
      : faults_(std::move(faults)), file_(std::move(base), *faults_) {}
  Status WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    return file_.WriteAt(offset, data);
  }
  Status ReadAt(uint64_t offset, std::span<std::byte> out) override {
    return file_.ReadAt(offset, out);
  }
  Status Sync() override { return file_.Sync(); }
  Status Truncate(uint64_t size) override { return file_.Truncate(size); }
  Result<uint64_t> Size() const override { return file_.Size(); }
  const std::string& path() const override { return file_.path(); }
  bool direct_io() const override { return file_.direct_io(); }

 private:
  std::shared_ptr<FaultInjector> faults_;
  FaultInjectingFile file_;
};

}  // namespace

BlockFileFactory FaultInjectingFactory(std::shared_ptr<FaultInjector> faults) {
  return [faults = std::move(faults)](const std::string& path, bool direct_io,
                                      const NoteFn& note) -> Result<std::unique_ptr<BlockFile>> {
    KVTIER_ASSIGN_OR_RETURN(auto base, OpenBlockFile(path, direct_io, note));
    return std::unique_ptr<BlockFile>(
        std::make_unique<OwningFaultInjectingFile>(std::move(base), faults));
  };
}

}  // namespace kvtier::tiers::internal

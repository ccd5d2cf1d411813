#include "tiers/internal/ssd_store.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <utility>

#include "common/units.h"
#include "tiers/internal/checksum.h"
#include "tiers/internal/rocks_status.h"
#include "tiers/internal/ssd_records.h"

namespace kvtier::tiers::internal {
namespace {

namespace fs = std::filesystem;

constexpr char kFormatFile[] = "FORMAT";
constexpr char kSecretFile[] = "secret";
constexpr char kKeysFile[] = "keys";
constexpr char kIndexDir[] = "index";
constexpr char kSlotFile[] = "blocks.dat";
// Preparation writes the file in pieces of this much (one zeroed buffer).
constexpr uint64_t kPrepareChunkBytes = 8 * kMiB;
// A read of more than this, alone, is made in parts of this size, each
// checksummed as it lands (Read). bench/ssd_vs_fio.sh, one 2 MiB read in
// flight: 0.76x fio read whole then checksummed, 0.94x in 4 parts (medians
// of 8 alternating runs, 2026-12-07, this VM's disk). A 256 KiB read in
// parts of 64 KiB gained nothing.
constexpr size_t kReadPartBytes = 512 * kKiB;
// A sealed block is written and read in parts of this much, each sealed or
// opened while the disk moves the others. With the cipher at 10-15 GB/s a
// core (ipsec-mb, tiers/internal/aes_gcm.h) a 256 KiB block's sealing is a
// tenth of its time on the disk, and smaller parts cost more in requests
// than they hide: at 64 KiB, 256 KiB blocks one at a time measured 0.80x of
// the store without keys, whole 0.81-0.91x (writes; reads alike; 2026-12-08,
// ABBA, this VM's disk). So the same parts as the checksummed reads'.
constexpr size_t kSealPartBytes = 512 * kKiB;

std::string FormatText(int version, uint64_t region_bytes) {
  return "kvtier-ssd-format " + std::to_string(version) + "\nregion-bytes " +
         std::to_string(region_bytes) + "\n";
}

// Runs `f`, turning an escaping exception (allocation, the standard library,
// RocksDB) into a Status at the module's edge (STYLE.md 7).
template <typename F>
auto Guarded(std::string_view op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError(std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return InternalError(std::string(op) + ": " + e.what());
  }
}

Status ErrnoError(std::string_view op, const std::string& path) {
  return IoError(std::string(op) + " " + path + ": " + std::strerror(errno));
}

// Reads `key value\n` lines after FORMAT's first; 0 when `key` is missing
// or malformed.
uint64_t FormatField(std::string_view text, std::string_view key) {
  for (size_t pos = text.find('\n'); pos != std::string_view::npos && pos + 1 < text.size();) {
    const size_t end = text.find('\n', pos + 1);
    if (end == std::string_view::npos) break;
    const std::string_view line = text.substr(pos + 1, end - pos - 1);
    if (line.starts_with(key) && line.size() > key.size() && line[key.size()] == ' ') {
      uint64_t v = 0;
      const char* first = line.data() + key.size() + 1;
      auto [ptr, err] = std::from_chars(first, line.data() + line.size(), v);
      return err == std::errc() && ptr == line.data() + line.size() ? v : 0;
    }
    pos = end;
  }
  return 0;
}

// Checks the directory and, when it is new or empty, makes it a data
// directory of this format with regions of `new_region_bytes`. Returns the
// directory's region size. Changes nothing in a directory it refuses.
Result<uint64_t> PrepareDirectory(const std::string& dir, uint64_t new_region_bytes) {
  const std::string hint = "; move it away or point data_dir elsewhere";
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) {
      return FailedPreconditionError("data directory " + dir + " is not a directory" + hint);
    }
    const std::string format_path = dir + "/" + kFormatFile;
    if (::access(format_path.c_str(), F_OK) == 0) {
      KVTIER_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(format_path, 256));
      constexpr std::string_view kPrefix = "kvtier-ssd-format ";
      int version = -1;
      const size_t eol = text.find('\n');
      if (text.starts_with(kPrefix) && eol != std::string::npos) {
        const char* first = text.data() + kPrefix.size();
        const char* last = text.data() + eol;
        auto [ptr, err] = std::from_chars(first, last, version);
        if (err != std::errc() || ptr != last) version = -1;
      }
      if (version < 0) {
        return FailedPreconditionError("data directory " + dir +
                                       " has a FORMAT file this kvtierd cannot read" + hint);
      }
      if (version != kSsdFormatVersion) {
        return FailedPreconditionError("data directory " + dir + " was written by format " +
                                       std::to_string(version) + "; this kvtierd reads format " +
                                       std::to_string(kSsdFormatVersion) + hint);
      }
      const uint64_t region_bytes = FormatField(text, "region-bytes");
      if (region_bytes < kSsdPageBytes || !std::has_single_bit(region_bytes)) {
        return FailedPreconditionError("data directory " + dir +
                                       " has a FORMAT file without a valid region-bytes line" +
                                       hint);
      }
      return region_bytes;
    }
    if (!fs::is_empty(dir, ec) || ec) {
      return FailedPreconditionError("data directory " + dir +
                                     " is not empty and has no FORMAT file, so it is not a "
                                     "kvtier data directory" +
                                     hint);
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) return IoError("create data directory " + dir + ": " + ec.message());
  }
  // FORMAT first: a crash before the rest leaves a directory that reopens.
  KVTIER_RETURN_IF_ERROR(WriteFileDurably(
      dir, kFormatFile, FormatText(kSsdFormatVersion, new_region_bytes), 0644, false, nullptr));
  return new_region_bytes;
}

Result<std::array<std::byte, kSsdSecretBytes>> LoadOrCreateSecret(const std::string& dir) {
  std::array<std::byte, kSsdSecretBytes> secret{};
  const std::string path = dir + "/" + kSecretFile;
  if (::access(path.c_str(), F_OK) != 0) {
    // A missing secret beside an existing index would silently orphan every
    // key hashed with the old one.
    if (::access((dir + "/" + kIndexDir).c_str(), F_OK) == 0) {
      return CorruptionError("data directory " + dir +
                             " has an index but no secret file; it cannot be served");
    }
    size_t done = 0;
    while (done < secret.size()) {
      const ssize_t n = ::getrandom(secret.data() + done, secret.size() - done, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("getrandom for", path);
      done += static_cast<size_t>(n);
    }
    bool existed = false;
    KVTIER_RETURN_IF_ERROR(WriteFileDurably(
        dir, kSecretFile,
        std::string_view(reinterpret_cast<const char*>(secret.data()), secret.size()), 0600, true,
        &existed));
    if (!existed) return secret;
  }
  KVTIER_ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(path, kSsdSecretBytes));
  if (bytes.size() != kSsdSecretBytes) {
    return CorruptionError(path + " holds " + std::to_string(bytes.size()) + " bytes, not " +
                           std::to_string(kSsdSecretBytes));
  }
  std::memcpy(secret.data(), bytes.data(), secret.size());
  return secret;
}

// An aligned buffer per I/O thread for payloads that are not aligned, kept
// between calls (it grows to the largest block the thread has moved) so the
// hot path neither allocates nor faults in fresh pages.
Result<std::span<std::byte>> BounceBuffer(size_t bytes) {
  thread_local AlignedBuffer buffer;
  if (buffer.size() < bytes) {
    buffer = AlignedBuffer();
    KVTIER_ASSIGN_OR_RETURN(buffer, AlignedBuffer::Allocate(bytes));
  }
  return buffer.span().first(static_cast<size_t>(AlignUp(bytes, kBlockFileAlignment)));
}

}  // namespace

SsdStore::SsdStore(SsdOptions options) : options_(std::move(options)) {}

SsdStore::~SsdStore() {
  stop_preparing_.store(true);
  if (prepare_thread_.joinable()) prepare_thread_.join();
  if (db_) db_->Close().PermitUncheckedError();
}

void SsdStore::Note(std::string_view text) const {
  if (options_.note) {
    options_.note(text);
  } else {
    std::fprintf(stderr, "kvtier ssd: %.*s\n", static_cast<int>(text.size()), text.data());
  }
}

Result<std::unique_ptr<SsdStore>> SsdStore::Open(const SsdOptions& options) {
  return Guarded("open SSD store", [&]() -> Result<std::unique_ptr<SsdStore>> {
    if (options.dir.empty()) return InvalidArgumentError("SSD data directory not set");
    if (options.capacity_bytes == 0) return InvalidArgumentError("SSD capacity_bytes must be > 0");
    // Check the capacity against the region size a new directory would get
    // before anything is made; an existing directory is checked again below.
    KVTIER_RETURN_IF_ERROR(
        SsdSpace::Create(options.capacity_bytes, SsdSpace::RegionBytesFor(options.capacity_bytes))
            .status());
    KVTIER_ASSIGN_OR_RETURN(
        const uint64_t region_bytes,
        PrepareDirectory(options.dir, SsdSpace::RegionBytesFor(options.capacity_bytes)));
    std::unique_ptr<SsdStore> store(new SsdStore(options));
    KVTIER_ASSIGN_OR_RETURN(store->secret_, LoadOrCreateSecret(options.dir));

    rocksdb::Options db_options;
    db_options.create_if_missing = true;
    db_options.write_buffer_size = options.index_write_buffer_bytes;
    db_options.compression = rocksdb::kNoCompression;
    db_options.keep_log_file_num = 4;
    db_options.max_open_files = 256;
    rocksdb::DB* db = nullptr;
    const std::string index_path = options.dir + "/" + kIndexDir;
    KVTIER_RETURN_IF_ERROR(
        FromRocks(rocksdb::DB::Open(db_options, index_path, &db), "open index " + index_path));
    store->db_.reset(db);

    // The namespace table, dense by id.
    std::unique_ptr<rocksdb::Iterator> it(store->db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(std::string(1, kNamespacePrefix));
         it->Valid() && it->key().starts_with(rocksdb::Slice(&kNamespacePrefix, 1)); it->Next()) {
      SsdNamespace ns;
      ns.id = static_cast<uint32_t>(store->namespaces_.size());
      if (it->key().ToStringView() != NamespaceKey(ns.id) ||
          !DecodeNamespace(it->value().ToStringView(), &ns)) {
        return CorruptionError("namespace table of " + index_path + ": bad entry " +
                               it->key().ToString(true));
      }
      store->ns_fingerprints_.push_back(
          NamespaceFingerprint(ns.model, ns.salt, ns.layout.ToString()));
      store->namespaces_.push_back(std::move(ns));
    }
    KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), "read namespaces of " + index_path));
    KVTIER_RETURN_IF_ERROR(store->CheckKeysSecret());
    KVTIER_RETURN_IF_ERROR(store->OpenFile(region_bytes));
    switch (options.preallocate) {
      case SsdPreallocate::kWrite:
        store->PrepareRegions();
        KVTIER_RETURN_IF_ERROR(store->WaitUntilPrepared());
        break;
      case SsdPreallocate::kBackground:
        if (store->prepared_regions_.load() < store->regions_) {
          SsdStore* raw = store.get();
          store->prepare_thread_ = std::thread([raw] { raw->PrepareRegions(); });
        }
        break;
      case SsdPreallocate::kSparse:
        break;
    }
    return store;
  });
}

Status SsdStore::CheckKeysSecret() {
  const std::string path = options_.dir + "/" + kKeysFile;
  std::string held;  // absent: the directory's own secret
  if (::access(path.c_str(), F_OK) == 0) {
    KVTIER_ASSIGN_OR_RETURN(held, ReadSmallFile(path, 256));
  }
  const std::string& want = options_.keys_secret_id;
  if (held == want) return Status::Ok();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(std::string(1, kRecordPrefix));
  const bool has_blocks = it->Valid() && it->key().starts_with(rocksdb::Slice(&kRecordPrefix, 1));
  KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), "read the index of " + options_.dir));
  if (has_blocks) {
    auto name = [](const std::string& id) {
      return id.empty() ? std::string("the directory's own secret")
                        : "the deployment secret " + id.substr(0, 8) + "...";
    };
    return FailedPreconditionError(
        "SSD data directory " + options_.dir + " holds blocks whose keys were hashed under " +
        name(held) + ", not " + name(want) +
        ": none of them could be found. Give this node another ssd.dir, or empty this one "
        "(its blocks are a cache; they will be computed again)");
  }
  if (want.empty()) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink", path);
    return Status::Ok();
  }
  return WriteFileDurably(options_.dir, kKeysFile, want, 0644, false, nullptr);
}

Status SsdStore::OpenFile(uint64_t region_bytes) {
  KVTIER_ASSIGN_OR_RETURN(SsdSpace space, SsdSpace::Create(options_.capacity_bytes, region_bytes));
  region_bytes_ = region_bytes;
  regions_ = space.regions();
  space_.emplace(std::move(space));
  const std::string path = options_.dir + "/" + kSlotFile;
  const NoteFn note = [this](std::string_view text) { Note(text); };
  if (options_.file_factory) {
    KVTIER_ASSIGN_OR_RETURN(file_, options_.file_factory(path, options_.direct_io, note));
  } else {
    KVTIER_ASSIGN_OR_RETURN(file_, OpenBlockFile(path, options_.direct_io, note));
  }
  KVTIER_ASSIGN_OR_RETURN(const uint64_t size, file_->Size());
  const uint64_t full = regions_ * region_bytes_;
  if (options_.preallocate == SsdPreallocate::kSparse) {
    if (size < full) KVTIER_RETURN_IF_ERROR(file_->Truncate(full));
    prepared_regions_.store(regions_);
  } else {
    // A region is usable once wholly written; a partly written last one (a
    // crash while preparing) is written again from its start.
    prepared_regions_.store(std::min(size / region_bytes_, regions_));
  }
  restorable_regions_ = std::min(size / region_bytes_, regions_);
  return Status::Ok();
}

void SsdStore::PrepareRegions() {
  const uint64_t first = prepared_regions_.load();
  if (first >= regions_) return;
  const auto started = std::chrono::steady_clock::now();
  const bool background = options_.preallocate == SsdPreallocate::kBackground;
  if (background) {
    Note("preparing " + FormatBytes((regions_ - first) * region_bytes_) + " of " + options_.dir +
         "/" + kSlotFile + " in the background (written once, so blocks later " +
         "write at the disk's full speed); its space serves as it is done");
  }
  Status status;
  Result<AlignedBuffer> zeros =
      AlignedBuffer::Allocate(std::min(region_bytes_, kPrepareChunkBytes));
  if (!zeros) status = zeros.status();
  for (uint64_t r = first; status.ok() && r < regions_ && !stop_preparing_.load(); ++r) {
    for (uint64_t done = 0; done < region_bytes_ && status.ok(); done += zeros->size()) {
      status = file_->WriteAt(r * region_bytes_ + done, zeros->span());
    }
    if (status.ok()) prepared_regions_.store(r + 1);
  }
  if (!status.ok()) {
    Note("preparing " + options_.dir + "/" + kSlotFile + " stopped at " +
         FormatBytes(prepared_regions_.load() * region_bytes_) + " of " +
         FormatBytes(regions_ * region_bytes_) + ": " + status.ToString() +
         "; the tier serves the prepared part");
  } else if (background && prepared_regions_.load() == regions_) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char took[32];
    std::snprintf(took, sizeof(took), "%.1f s", seconds);
    Note("prepared " + FormatBytes(regions_ * region_bytes_) + " of " + options_.dir + "/" +
         kSlotFile + " in " + took);
  }
  std::lock_guard lock(prepare_mu_);
  prepare_status_ = std::move(status);
}

Status SsdStore::WaitUntilPrepared() {
  if (prepare_thread_.joinable()) prepare_thread_.join();
  std::lock_guard lock(prepare_mu_);
  return prepare_status_;
}

Result<SsdSlot> SsdStore::Allocate(uint64_t block_bytes) {
  return Guarded("allocate SSD slot", [&]() -> Result<SsdSlot> {
    if (block_bytes == 0 || block_bytes > kMaxBlockBytes) {
      return InvalidArgumentError("SSD block of " + std::to_string(block_bytes) +
                                  " bytes: must be 1.." + std::to_string(kMaxBlockBytes));
    }
    const uint64_t slot_bytes = AlignUp(block_bytes, kBlockFileAlignment);
    KVTIER_ASSIGN_OR_RETURN(const uint64_t page,
                            space_->Allocate(slot_bytes, prepared_regions_.load()));
    return SsdSlot{slot_bytes, page};
  });
}

Status SsdStore::Reserve(const SsdSlot& slot) {
  return Guarded("reserve SSD slot", [&]() -> Status {
    if (!ValidSlotBytes(slot.slot_bytes)) {
      return InvalidArgumentError("SSD slot size " + std::to_string(slot.slot_bytes) +
                                  " is not a valid slot size");
    }
    return space_->Reserve(slot.slot_bytes, slot.page,
                           std::min(restorable_regions_, prepared_regions_.load()));
  });
}

Status SsdStore::Free(const SsdSlot& slot) {
  return Guarded("free SSD slot", [&]() -> Status {
    // No hole is punched: the file stays written, so the next block written
    // there overwrites allocated blocks at full speed.
    return space_->Free(slot.slot_bytes, slot.page);
  });
}

SsdSlot SsdStore::SlotAt(uint64_t page) const { return SsdSlot{space_->SlotBytesAt(page), page}; }

SsdStats SsdStore::Stats() const {
  const SsdSpaceStats space = space_->Stats();
  SsdStats stats;
  stats.capacity_bytes = options_.capacity_bytes;
  stats.used_bytes = space.used_bytes;
  stats.file_bytes = regions_ * region_bytes_;
  stats.prepared_bytes = prepared_regions_.load() * region_bytes_;
  stats.preparing = options_.preallocate == SsdPreallocate::kBackground &&
                    prepared_regions_.load() < regions_ && !stop_preparing_.load();
  stats.region_bytes = region_bytes_;
  stats.extents = space.extents;
  stats.slots_in_use = space.slots_in_use;
  stats.direct_io = file_->direct_io();
  return stats;
}

Status SsdStore::CheckSlot(const SsdSlot& slot, uint64_t bytes) const {
  if (bytes == 0 || !ValidSlotBytes(slot.slot_bytes) || bytes > slot.slot_bytes ||
      slot.offset() + slot.slot_bytes > regions_ * region_bytes_) {
    return InvalidArgumentError("SSD I/O of " + std::to_string(bytes) + " bytes to a slot of " +
                                std::to_string(slot.slot_bytes) + " bytes at page " +
                                std::to_string(slot.page));
  }
  return Status::Ok();
}

Status SsdStore::WritePayload(uint64_t offset, std::span<const std::byte> bytes) {
  if (IsBlockAligned(bytes.data())) {
    const size_t whole = bytes.size() / kBlockFileAlignment * kBlockFileAlignment;
    if (whole > 0) KVTIER_RETURN_IF_ERROR(file_->WriteAt(offset, bytes.first(whole)));
    if (whole == bytes.size()) return Status::Ok();
    offset += whole;
    bytes = bytes.subspan(whole);
  }
  KVTIER_ASSIGN_OR_RETURN(std::span<std::byte> bounce, BounceBuffer(bytes.size()));
  std::memcpy(bounce.data(), bytes.data(), bytes.size());
  std::memset(bounce.data() + bytes.size(), 0, bounce.size() - bytes.size());
  return file_->WriteAt(offset, bounce);
}

Status SsdStore::ReadPayload(uint64_t offset, std::span<std::byte> out) const {
  if (IsBlockAligned(out.data())) {
    const size_t whole = out.size() / kBlockFileAlignment * kBlockFileAlignment;
    if (whole > 0) KVTIER_RETURN_IF_ERROR(file_->ReadAt(offset, out.first(whole)));
    if (whole == out.size()) return Status::Ok();
    offset += whole;
    out = out.subspan(whole);
  }
  KVTIER_ASSIGN_OR_RETURN(std::span<std::byte> bounce, BounceBuffer(out.size()));
  KVTIER_RETURN_IF_ERROR(file_->ReadAt(offset, bounce));
  std::memcpy(out.data(), bounce.data(), out.size());
  return Status::Ok();
}

Result<SsdRecord> SsdStore::Write(const SsdRecord& record, std::span<const std::byte> bytes,
                                  uint64_t block_bytes) {
  return Guarded("SSD write", [&]() -> Result<SsdRecord> {
    KVTIER_RETURN_IF_ERROR(CheckSlot(record.slot, bytes.size()));
    if (block_bytes != 0 &&
        (block_bytes > bytes.size() || AlignUp(block_bytes, kBlockFileAlignment) != bytes.size())) {
      return InvalidArgumentError("SSD write of a " + std::to_string(block_bytes) +
                                  "-byte block padded to " + std::to_string(bytes.size()) +
                                  " bytes: the padding must end at the next 4 KiB");
    }
    SsdRecord stored = record;
    stored.block_bytes = block_bytes != 0 ? block_bytes : bytes.size();
    stored.seal.reset();
    if (options_.sealer != nullptr) {
      // Sealed into a bounce buffer (the caller's bytes stay as they are),
      // the padding zeroed, in parts: each part is written (direct I/O,
      // through AIO) while the next is sealed.
      KVTIER_ASSIGN_OR_RETURN(const SealIdentity id, IdentityOf(stored));
      KVTIER_ASSIGN_OR_RETURN(std::span<std::byte> bounce, BounceBuffer(stored.block_bytes));
      KVTIER_ASSIGN_OR_RETURN(BlockSealer::Sealing sealing, options_.sealer->StartSeal(id));
      size_t done = 0;  // bytes of `bounce` filled
      auto fill = [&](std::span<std::byte> part) -> Status {
        const size_t left =
            stored.block_bytes > done ? static_cast<size_t>(stored.block_bytes - done) : 0;
        const size_t n = std::min(part.size(), left);
        Status st = n > 0 ? sealing.Update(bytes.subspan(done, n), part.first(n)) : Status::Ok();
        std::memset(part.data() + n, 0, part.size() - n);
        done += part.size();
        return st;
      };
      KVTIER_RETURN_IF_ERROR(
          file_->WriteAtInParts(record.slot.offset(), bounce, kSealPartBytes, fill)
              .WithContext("block " + record.key.ToHex()));
      KVTIER_ASSIGN_OR_RETURN(const Seal seal, sealing.Finish());
      stored.seal = seal;
      stored.checksum = SealToken(seal);
      KVTIER_RETURN_IF_ERROR(ReplaceSealedRecord(stored.ns_id, stored.key, &stored));
      return stored;
    }
    stored.checksum = BlockChecksum(bytes.first(stored.block_bytes));
    KVTIER_RETURN_IF_ERROR(
        WritePayload(record.slot.offset(), bytes).WithContext("block " + record.key.ToHex()));
    // Only now the record: after a crash it never points at missing bytes.
    KVTIER_RETURN_IF_ERROR(PutRecord(stored));
    return stored;
  });
}

Status SsdStore::Read(const SsdRecord& record, std::span<std::byte> out) const {
  SsdRejection cause = SsdRejection::kChecksum;
  Status status = Guarded("SSD read", [&]() -> Status {
    const SsdSlot& slot = record.slot;
    if (out.size() != record.block_bytes &&
        out.size() != AlignUp(record.block_bytes, kBlockFileAlignment)) {
      return InvalidArgumentError("SSD read of " + std::to_string(out.size()) +
                                  " bytes for a block of " + std::to_string(record.block_bytes));
    }
    KVTIER_RETURN_IF_ERROR(CheckSlot(slot, out.size()));
    // A sealed block opens as it lands, part by part; any other is
    // checksummed so.
    std::optional<BlockSealer::Opener> opener;
    if (options_.sealer != nullptr) {
      cause = SsdRejection::kRecord;
      KVTIER_ASSIGN_OR_RETURN(const SsdRecord stored, StoredVersionOf(record));
      KVTIER_ASSIGN_OR_RETURN(const SealIdentity id, IdentityOf(stored));
      cause = SsdRejection::kSeal;  // a key rotated out, and from here the bytes
      Result<BlockSealer::Opener> started = options_.sealer->StartOpen(id, *stored.seal);
      if (!started) return started.status().WithContext("block " + record.key.ToHex());
      opener.emplace(std::move(*started));
    }
    uint64_t sum = 0;
    reads_in_flight_.fetch_add(1, std::memory_order_relaxed);
    struct Done {
      std::atomic<int>& n;
      ~Done() { n.fetch_sub(1, std::memory_order_relaxed); }
    } done{reads_in_flight_};
    // Alone: with other reads in flight the disk is kept busy already, and
    // parts would only make more, smaller requests (8 reads of 2 MiB at
    // once: 0.97x fio in parts or whole).
    const size_t part_bytes = opener ? kSealPartBytes : kReadPartBytes;
    if (out.size() > part_bytes && IsBlockAligned(out.data()) &&
        out.size() % kBlockFileAlignment == 0 &&
        reads_in_flight_.load(std::memory_order_relaxed) == 1) {
      // In parts in flight together, each checksummed as it lands: the
      // checksum, which reads bytes that just came from the disk through
      // memory (~8 GB/s, a quarter of a lone 2 MiB read's time here),
      // overlaps the reading of the rest instead of following all of it.
      BlockChecksumStream stream;
      Status opened;
      size_t fed = 0;  // bytes of `out` checksummed or opened (the padding is not)
      auto landed = [&](std::span<const std::byte> part) {
        const size_t left = record.block_bytes > fed ? record.block_bytes - fed : 0;
        const size_t n = std::min(part.size(), left);
        if (!opener) {
          stream.Update(part.first(n));
        } else if (opened.ok()) {
          opened = opener->Update(out.subspan(fed, n));  // `part` is `out`'s own: in place
        }
        fed += part.size();
      };
      KVTIER_RETURN_IF_ERROR(file_->ReadAtInParts(slot.offset(), out, part_bytes, landed)
                                 .WithContext("block " + record.key.ToHex()));
      if (opener) {
        KVTIER_RETURN_IF_ERROR(opened);
      } else {
        sum = stream.Digest();
      }
    } else {
      KVTIER_RETURN_IF_ERROR(
          ReadPayload(slot.offset(), out).WithContext("block " + record.key.ToHex()));
      if (opener) {
        KVTIER_RETURN_IF_ERROR(opener->Update(out.first(record.block_bytes)));
      } else {
        sum = BlockChecksum(out.first(record.block_bytes));
      }
    }
    if (opener) {
      return opener->Finish().WithContext("block " + record.key.ToHex() + " in " + file_->path() +
                                          " at " + std::to_string(slot.offset()));
    }
    if (sum != record.checksum) {
      char detail[64];
      std::snprintf(detail, sizeof(detail), " (stored %016llx, read %016llx)",
                    static_cast<unsigned long long>(record.checksum),
                    static_cast<unsigned long long>(sum));
      return CorruptionError("block " + record.key.ToHex() + " in " + file_->path() + " at " +
                             std::to_string(slot.offset()) + ": checksum mismatch" + detail);
    }
    return Status::Ok();
  });
  if (status.code() == StatusCode::kCorruption) Rejected(cause, status);
  return status;
}

Status SsdStore::PutRecord(const SsdRecord& record) {
  return Guarded("SSD put record", [&]() -> Status {
    return FromRocks(db_->Put(rocksdb::WriteOptions(), RecordKey(record.ns_id, record.key),
                              EncodeRecord(record)),
                     "put record of block " + record.key.ToHex());
  });
}

Status SsdStore::Erase(NamespaceId ns_id, const BlockKey& key) {
  return Guarded("SSD erase", [&]() -> Status {
    if (options_.sealer != nullptr) return ReplaceSealedRecord(ns_id, key, nullptr);
    return FromRocks(db_->Delete(rocksdb::WriteOptions(), RecordKey(ns_id, key)),
                     "erase record of block " + key.ToHex());
  });
}

Status SsdStore::Sync() {
  return Guarded("SSD sync", [&]() -> Status {
    KVTIER_RETURN_IF_ERROR(file_->Sync());
    return FromRocks(db_->FlushWAL(/*sync=*/true), "sync index of " + options_.dir);
  });
}

Result<SsdScanSummary> SsdStore::ForEachRecord(
    const std::function<Status(const SsdRecord&)>& fn) const {
  return Guarded("SSD scan", [&]() -> Result<SsdScanSummary> {
    SsdScanSummary summary;
    std::vector<std::string> unusable;  // record keys, erased after the scan
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
    const rocksdb::Slice prefix(&kRecordPrefix, 1);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      SsdRecord r;
      if (!DecodeRecord(it->key().ToStringView(), it->value().ToStringView(), &r)) {
        ++summary.undecodable;
        continue;
      }
      if (r.seal && options_.sealer == nullptr) {
        return FailedPreconditionError(
            "the SSD directory " + options_.dir + " holds blocks sealed under key " +
            std::to_string(r.seal->key_id) +
            ", and no block keys are configured (server.block_keys_file or " + kBlockKeysEnv +
            "): configure them, or remove the directory to start cold");
      }
      if (options_.sealer != nullptr) {
        if (!r.seal || r.checksum != SealToken(*r.seal)) {
          ++summary.unsealed;
          unusable.push_back(it->key().ToString());
          continue;
        }
        if (options_.sealer->keys().Find(r.seal->key_id) == nullptr) {
          ++summary.rotated_out;
          unusable.push_back(it->key().ToString());
          continue;
        }
        ++summary.sealed_by_key[r.seal->key_id];
      }
      ++summary.records;
      KVTIER_RETURN_IF_ERROR(fn(r));
    }
    KVTIER_RETURN_IF_ERROR(FromRocks(it->status(), "scan index of " + options_.dir));
    for (const std::string& key : unusable) {
      KVTIER_RETURN_IF_ERROR(
          FromRocks(db_->Delete(rocksdb::WriteOptions(), key), "erase an unusable record"));
    }
    if (options_.sealer != nullptr) {
      {
        std::lock_guard lock(by_key_mu_);
        sealed_by_key_ = summary.sealed_by_key;
      }
      std::string by_key;
      for (const auto& [id, n] : summary.sealed_by_key) {
        by_key +=
            (by_key.empty() ? "" : ", ") + std::to_string(n) + " under key " + std::to_string(id);
      }
      Note("sealed blocks found: " + (by_key.empty() ? std::string("none") : by_key));
      if (summary.unsealed > 0) {
        Note(std::to_string(summary.unsealed) +
             " blocks in the clear (or with a record that is not their seal's) erased: block "
             "keys are configured, so only sealed blocks are served");
      }
      if (summary.rotated_out > 0) {
        Note(std::to_string(summary.rotated_out) +
             " blocks sealed under keys no longer configured (rotated out) erased");
      }
    }
    return summary;
  });
}

Result<uint32_t> SsdStore::RegisterNamespace(std::string_view model, std::string_view salt,
                                             const Layout& layout) {
  return Guarded("SSD register namespace", [&]() -> Result<uint32_t> {
    KVTIER_RETURN_IF_ERROR(layout.Validate());
    std::lock_guard lock(ns_mu_);
    for (const SsdNamespace& ns : namespaces_) {
      if (ns.model != model || ns.salt != salt) continue;
      if (ns.layout == layout) return ns.id;
      return InvalidArgumentError("namespace model=" + std::string(model) +
                                  " salt=" + std::string(salt) + " is stored with layout " +
                                  ns.layout.ToString() + ", not " + layout.ToString());
    }
    SsdNamespace ns{static_cast<uint32_t>(namespaces_.size()), std::string(model),
                    std::string(salt), layout};
    rocksdb::WriteOptions wo;
    wo.sync = true;  // rare, and records name it: make it durable at once
    KVTIER_RETURN_IF_ERROR(FromRocks(db_->Put(wo, NamespaceKey(ns.id), EncodeNamespace(ns)),
                                     "put namespace " + std::string(model)));
    ns_fingerprints_.push_back(NamespaceFingerprint(ns.model, ns.salt, ns.layout.ToString()));
    namespaces_.push_back(std::move(ns));
    return namespaces_.back().id;
  });
}

Status SsdStore::ForEachNamespace(const std::function<Status(const SsdNamespace&)>& fn) const {
  return Guarded("SSD namespaces", [&]() -> Status {
    std::vector<SsdNamespace> copy;
    {
      std::lock_guard lock(ns_mu_);
      copy = namespaces_;
    }
    for (const SsdNamespace& ns : copy) KVTIER_RETURN_IF_ERROR(fn(ns));
    return Status::Ok();
  });
}

}  // namespace kvtier::tiers::internal

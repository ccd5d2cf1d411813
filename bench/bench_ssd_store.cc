// SSD storage: write then read of a batch of blocks of 2 MiB and of 256 KiB
// through SsdStore (slot files, O_DIRECT, XXH3-64 on every write and read,
// records in RocksDB), with 1 and with 8 requests in flight (threads, each
// with one synchronous request), reported in bytes per second.
//
// Peers, measured in the same run:
//   - RocksDB with blob files (enable_blob_files, min_blob_size 4 KiB),
//     holding the same payloads as values: the alternative issue 4 asks to
//     try. WAL on, as SsdStore has it, so both survive a kill -9; a write
//     batch ends with a Flush, so its bytes are in blob files. Direct I/O for
//     reads and flushes, so neither side reads from the page cache.
//   - The disk's raw sequential direct-I/O bandwidth by fio, passed in with
//     --fio=FILE (lines "<write|read> <2M|256k> <iodepth> <bytes/s>"), as
//     bench/ssd_vs_fio.sh does. Goal: SsdStore >= 0.8x raw.
//
// Before each write batch (untimed) every slot is erased, freed and
// allocated again. `ssd_write` keeps freed slots allocated on disk
// (kept_free_bytes), so the batch rewrites allocated blocks: the tier's
// steady state, full, where each demotion takes the slot an eviction freed.
// `ssd_write_holes` punches every freed slot (kept_free_bytes 0), so each
// write allocates: the tier filling up. Reads read a batch back in order.
//
// Flags (besides the benchmark flags): --dir=PATH, the parent of the data
// directory PATH/kvtier_bench_ssd (default /var/tmp: a real disk, where /tmp
// may be tmpfs; removed at exit); --batch_mib=N, MiB per batch (default 512;
// at most one batch is on disk at a time); --fio=FILE.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "common/units.h"
#include "tiers/internal/block_file.h"
#include "tiers/internal/ssd_store.h"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;
using tiers::internal::AlignedBuffer;
using tiers::internal::SsdOptions;
using tiers::internal::SsdRecord;
using tiers::internal::SsdStore;

std::string g_dir = "/var/tmp/kvtier_bench_ssd";
uint64_t g_batch_bytes = 512 * kMiB;
std::string g_fio_file;

constexpr int kSources = 32;  // distinct payloads, reused round robin
constexpr int kMaxDepth = 8;

// Payloads and per-thread read buffers for one block size.
struct Buffers {
  uint64_t block_bytes = 0;
  std::vector<AlignedBuffer> sources;
  std::vector<AlignedBuffer> outs;  // one per thread

  explicit Buffers(uint64_t bytes) : block_bytes(bytes) {
    Rng rng(bytes);
    for (int i = 0; i < kSources; ++i) {
      sources.push_back(std::move(AlignedBuffer::Allocate(bytes)).value());
      auto* words = reinterpret_cast<uint64_t*>(sources.back().data());
      for (size_t w = 0; w < bytes / 8; ++w) words[w] = rng.Next();
    }
    for (int t = 0; t < kMaxDepth; ++t) {
      outs.push_back(std::move(AlignedBuffer::Allocate(bytes)).value());
    }
  }
  std::span<const std::byte> Source(size_t i) const {
    return sources[i % kSources].span().first(static_cast<size_t>(block_bytes));
  }
};

// Runs fn(thread, block) for blocks 0..n-1 on `depth` threads, each taking
// the next block as it finishes one: `depth` requests in flight, in order.
// Returns false if any call did.
bool RunParallel(int depth, size_t n, const std::function<bool(int, size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  for (int t = 0; t < depth; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = next++; i < n && ok.load(std::memory_order_relaxed); i = next++) {
        if (!fn(t, i)) ok = false;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  return ok.load();
}

// The data of one (subject, block size) lives until the next one starts, so
// at most one batch is on disk at a time.
struct Subject {
  virtual ~Subject() = default;
};
std::unique_ptr<Subject> g_subject;
std::string g_subject_name;

template <typename T>
T* Use(const std::string& name, const std::function<std::unique_ptr<T>()>& make) {
  if (g_subject_name != name) {
    g_subject.reset();
    fs::remove_all(g_dir);
    g_subject = make();
    g_subject_name = g_subject ? name : "";
  }
  return static_cast<T*>(g_subject.get());
}

// ---- SsdStore ----

struct SsdSubject : Subject {
  Buffers buffers;
  std::unique_ptr<SsdStore> store;
  std::vector<SsdRecord> records;
  bool written = false;

  explicit SsdSubject(uint64_t block_bytes) : buffers(block_bytes) {}

  std::string Refill() {
    for (SsdRecord& r : records) {
      if (!store->Erase(r.ns_id, r.key).ok() || !store->Free(r.slot).ok()) return "free failed";
    }
    for (SsdRecord& r : records) {
      auto slot = store->Allocate(buffers.block_bytes);
      if (!slot.ok()) return slot.status().ToString();
      r.slot = *slot;
    }
    return "";
  }
  std::string WriteAll(int depth) {
    std::string error;
    std::mutex mu;
    const bool ok = RunParallel(depth, records.size(), [&](int, size_t i) {
      auto rec = store->Write(records[i], buffers.Source(i));
      if (!rec.ok()) {
        std::lock_guard lock(mu);
        error = rec.status().ToString();
        return false;
      }
      records[i] = *rec;
      return true;
    });
    written = ok;
    return ok ? "" : error;
  }
};

// `holes`: Free punches every slot (kept_free_bytes 0), so each write lands
// in a hole (the tier filling up). Otherwise every freed slot is kept
// allocated and rewritten (the tier's steady state, full).
std::unique_ptr<SsdSubject> MakeSsd(uint64_t block_bytes, bool holes, std::string* error) {
  auto s = std::make_unique<SsdSubject>(block_bytes);
  SsdOptions o;
  o.dir = g_dir + "/ssd";
  o.capacity_bytes = g_batch_bytes + 64 * kMiB;
  o.kept_free_bytes = holes ? 0 : o.capacity_bytes;
  auto store = SsdStore::Open(o);
  if (!store.ok()) {
    *error = store.status().ToString();
    return nullptr;
  }
  s->store = std::move(store).value();
  const size_t n = g_batch_bytes / block_bytes;
  for (size_t i = 0; i < n; ++i) {
    auto slot = s->store->Allocate(block_bytes);
    if (!slot.ok()) {
      *error = slot.status().ToString();
      return nullptr;
    }
    SsdRecord r;
    r.key = {i, i * 0x9e3779b97f4a7c15ULL};
    r.slot = *slot;
    s->records.push_back(r);
  }
  return s;
}

void SsdWrite(benchmark::State& state, uint64_t block_bytes, int depth, bool holes) {
  std::string error;
  auto* s = Use<SsdSubject>((holes ? "ssd-holes" : "ssd") + std::to_string(block_bytes),
                            [&] { return MakeSsd(block_bytes, holes, &error); });
  if (s == nullptr) return state.SkipWithError(error.c_str());
  for (auto _ : state) {
    state.PauseTiming();
    if (s->written) error = s->Refill();
    state.ResumeTiming();
    if (error.empty()) error = s->WriteAll(depth);
    if (!error.empty()) return state.SkipWithError(error.c_str());
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(s->records.size() * block_bytes));
}

void BM_SsdWrite(benchmark::State& state, uint64_t block_bytes, int depth) {
  SsdWrite(state, block_bytes, depth, /*holes=*/false);
}
void BM_SsdWriteHoles(benchmark::State& state, uint64_t block_bytes, int depth) {
  SsdWrite(state, block_bytes, depth, /*holes=*/true);
}

void BM_SsdRead(benchmark::State& state, uint64_t block_bytes, int depth) {
  std::string error;
  auto* s = Use<SsdSubject>("ssd" + std::to_string(block_bytes),
                            [&] { return MakeSsd(block_bytes, false, &error); });
  if (s == nullptr) return state.SkipWithError(error.c_str());
  if (!s->written && !(error = s->WriteAll(kMaxDepth)).empty()) {
    return state.SkipWithError(error.c_str());
  }
  for (auto _ : state) {
    const bool ok = RunParallel(depth, s->records.size(), [&](int t, size_t i) {
      const size_t bytes = static_cast<size_t>(block_bytes);
      Status st = s->store->Read(s->records[i],
                                 s->buffers.outs[static_cast<size_t>(t)].span().first(bytes));
      return st.ok();
    });
    if (!ok) return state.SkipWithError("SsdStore read failed");
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(s->records.size() * block_bytes));
}

// ---- RocksDB blob files ----

struct BlobSubject : Subject {
  Buffers buffers;
  rocksdb::Options options;
  std::string path;
  std::unique_ptr<rocksdb::DB> db;
  size_t n = 0;
  bool written = false;

  explicit BlobSubject(uint64_t block_bytes) : buffers(block_bytes) {}
  ~BlobSubject() override { Close(); }

  void Close() {
    if (db) db->Close().PermitUncheckedError();
    db.reset();
  }
  std::string Reopen(bool destroy) {
    Close();
    if (destroy) rocksdb::DestroyDB(path, options).PermitUncheckedError();
    rocksdb::DB* raw = nullptr;
    rocksdb::Status st = rocksdb::DB::Open(options, path, &raw);
    db.reset(raw);
    return st.ok() ? "" : st.ToString();
  }
  static std::string Key(size_t i) {
    std::string k(8, '\0');
    for (int b = 0; b < 8; ++b) k[static_cast<size_t>(b)] = static_cast<char>(i >> (56 - 8 * b));
    return k;
  }
  std::string WriteAll(int depth) {
    const bool ok = RunParallel(depth, n, [&](int, size_t i) {
      std::span<const std::byte> v = buffers.Source(i);
      const rocksdb::Slice value(reinterpret_cast<const char*>(v.data()), v.size());
      return db->Put(rocksdb::WriteOptions(), Key(i), value).ok();
    });
    if (!ok) return "RocksDB put failed";
    rocksdb::FlushOptions fo;
    fo.wait = true;
    rocksdb::Status st = db->Flush(fo);
    written = st.ok();
    return st.ok() ? "" : st.ToString();
  }
};

std::unique_ptr<BlobSubject> MakeBlob(uint64_t block_bytes, std::string* error) {
  auto s = std::make_unique<BlobSubject>(block_bytes);
  s->path = g_dir + "/blob";
  s->n = g_batch_bytes / block_bytes;
  rocksdb::Options& o = s->options;
  o.create_if_missing = true;
  o.enable_blob_files = true;
  o.min_blob_size = 4096;
  o.blob_file_size = 256 * kMiB;
  o.enable_blob_garbage_collection = false;
  o.compression = rocksdb::kNoCompression;
  o.blob_compression_type = rocksdb::kNoCompression;
  o.write_buffer_size = 64 * kMiB;
  o.max_background_jobs = 4;
  o.use_direct_reads = true;
  o.use_direct_io_for_flush_and_compaction = true;
  fs::create_directories(g_dir);
  *error = s->Reopen(/*destroy=*/true);
  return error->empty() ? std::move(s) : nullptr;
}

void BM_BlobWrite(benchmark::State& state, uint64_t block_bytes, int depth) {
  std::string error;
  auto* s = Use<BlobSubject>("blob" + std::to_string(block_bytes),
                             [&] { return MakeBlob(block_bytes, &error); });
  if (s == nullptr) return state.SkipWithError(error.c_str());
  for (auto _ : state) {
    state.PauseTiming();
    if (s->written) error = s->Reopen(/*destroy=*/true);  // bounds the disk used
    state.ResumeTiming();
    if (error.empty()) error = s->WriteAll(depth);
    if (!error.empty()) return state.SkipWithError(error.c_str());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s->n * block_bytes));
}

void BM_BlobRead(benchmark::State& state, uint64_t block_bytes, int depth) {
  std::string error;
  auto* s = Use<BlobSubject>("blob" + std::to_string(block_bytes),
                             [&] { return MakeBlob(block_bytes, &error); });
  if (s == nullptr) return state.SkipWithError(error.c_str());
  if (!s->written && !(error = s->WriteAll(kMaxDepth)).empty()) {
    return state.SkipWithError(error.c_str());
  }
  for (auto _ : state) {
    const bool ok = RunParallel(depth, s->n, [&](int t, size_t i) {
      rocksdb::PinnableSlice value;
      if (!s->db
               ->Get(rocksdb::ReadOptions(), s->db->DefaultColumnFamily(), BlobSubject::Key(i),
                     &value)
               .ok() ||
          value.size() != block_bytes) {
        return false;
      }
      std::memcpy(s->buffers.outs[static_cast<size_t>(t)].data(), value.data(), value.size());
      return true;
    });
    if (!ok) return state.SkipWithError("RocksDB get failed");
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s->n * block_bytes));
}

// ---- Registration and summary ----

struct Size {
  const char* name;  // as fio's bs= spells it
  uint64_t bytes;
};
constexpr Size kSizes[] = {{"2M", 2 * kMiB}, {"256k", 256 * kKiB}};
constexpr int kDepths[] = {1, 8};

std::string Name(const char* subject, const char* op, const Size& size, int depth) {
  return std::string(subject) + "_" + op + "/" + size.name + "/depth:" + std::to_string(depth);
}

void Register() {
  using Fn = void (*)(benchmark::State&, uint64_t, int);
  const struct {
    const char* subject;
    const char* op;
    Fn fn;
  } kinds[] = {{"ssd", "write_holes", BM_SsdWriteHoles},
               {"ssd", "write", BM_SsdWrite},
               {"ssd", "read", BM_SsdRead},
               {"blob", "write", BM_BlobWrite},
               {"blob", "read", BM_BlobRead}};
  // Grouped by (subject, size) so each one's data is written once and
  // removed before the next.
  for (const Size& size : kSizes) {
    for (const auto& k : kinds) {
      for (int depth : kDepths) {
        benchmark::RegisterBenchmark(Name(k.subject, k.op, size, depth).c_str(), k.fn, size.bytes,
                                     depth)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

// fio's bandwidth by (op, bs, depth), in bytes/s.
std::map<std::string, double> ReadFio(const std::string& path) {
  std::map<std::string, double> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  std::string op, bs;
  int depth = 0;
  double bw = 0;
  while (in >> op >> bs >> depth >> bw) out[op + "/" + bs + "/" + std::to_string(depth)] = bw;
  if (out.empty()) std::fprintf(stderr, "bench_ssd_store: no fio results in %s\n", path.c_str());
  return out;
}

void Summarize(const SummaryReporter& r) {
  const std::map<std::string, double> fio = ReadFio(g_fio_file);
  std::printf(
      "=== bench_ssd_store summary (GB/s; ratios to fio raw direct I/O and to RocksDB "
      "blobs, same run)\n");
  std::printf("%-11s %-5s %5s %9s %9s %9s %9s %9s\n", "op", "bs", "depth", "SsdStore", "blobs",
              "fio raw", "ssd/raw", "ssd/blob");
  for (const Size& size : kSizes) {
    for (const char* op : {"write", "write_holes", "read"}) {
      const char* peer_op = std::string_view(op) == "read" ? "read" : "write";
      for (int depth : kDepths) {
        auto gbps = [&](const char* subject, const char* o) {
          return r.Counter(Name(subject, o, size, depth) + "/real_time", "bytes_per_second") / 1e9;
        };
        const double ssd = gbps("ssd", op), blob = gbps("blob", peer_op);
        auto it = fio.find(std::string(peer_op) + "/" + size.name + "/" + std::to_string(depth));
        const double raw = it == fio.end() ? 0 : it->second / 1e9;
        std::printf("%-11s %-5s %5d %9.2f %9.2f %9.2f %8.2fx %8.2fx\n", op, size.name, depth, ssd,
                    blob, raw, Ratio(ssd, raw), Ratio(ssd, blob));
      }
    }
  }
  std::printf(
      "goal: ssd/raw >= 0.80 for reads and writes (raw 0 = fio not run: see "
      "bench/ssd_vs_fio.sh)\n");
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using namespace kvtier::bench;  // NOLINT
  // Our flags first; the rest go to Google Benchmark.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--dir=")) {
      g_dir = std::string(arg.substr(6)) + "/kvtier_bench_ssd";
    } else if (arg.starts_with("--batch_mib=")) {
      g_batch_bytes = std::strtoull(argv[i] + 12, nullptr, 10) * kvtier::kMiB;
    } else if (arg.starts_with("--fio=")) {
      g_fio_file = std::string(arg.substr(6));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (g_batch_bytes < 2 * kvtier::kMiB) {
    std::fprintf(stderr, "bench_ssd_store: --batch_mib must be at least 2\n");
    return 1;
  }
  Register();
  const int rc = RunAndSummarize(argc, argv, Summarize);
  g_subject.reset();
  std::filesystem::remove_all(g_dir);
  return rc;
}

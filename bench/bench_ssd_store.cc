// SSD storage: write then read of a batch of blocks of 2 MiB and of 256 KiB
// through SsdStore (slot files, O_DIRECT, XXH3-64 on every write and read,
// records in RocksDB), with 1 and with 8 requests in flight (threads, each
// with one synchronous request), reported in bytes per second.
//
// Two parts:
//   - Google Benchmark runs of SsdStore (ssd_*) and of its alternative,
//     RocksDB with blob files (blob_*: enable_blob_files, min_blob_size
//     4 KiB), holding the same payloads as values, the alternative issue 4
//     asks to try. WAL on, as SsdStore has it, so both survive a kill -9; a
//     write batch ends with a Flush, so its bytes are in blob files. Direct
//     I/O for reads and flushes, so neither side reads from the page cache.
//   - With --fio_bin=PATH, SsdStore against the disk's raw sequential
//     direct-I/O bandwidth by fio, interleaved: for each (op, bs, depth),
//     --rounds rounds of three legs over --slice_mib MiB each, their order
//     rotating by round: one fio run, one SsdStore batch, and "own raw":
//     plain pwrite/pread (the store's BlockFile) of the same payloads at the
//     same offsets of the store's own file — the store less its checksum
//     and record, so ssd/own is what the store's own work costs. On a noisy
//     disk (a VM's: fio alone swings 0.67-1.0 GB/s run to run) measuring fio
//     first and the store a minute later puts the drift into the ratio;
//     interleaved, all see the same disk. Reported: the ratio of the sums
//     (total bytes / total time of each side) and the median and range of
//     the per-round ratios to fio.
//     fio does the store's kind of I/O: synchronous pread/pwrite with
//     O_DIRECT (--ioengine=psync); at depth 8 the store runs 8 threads with
//     one request each on consecutive blocks, so fio runs --numjobs=8 psync
//     jobs, job k on blocks k, k+8, k+16, ... (--rw=read:<7 blocks>,
//     --offset_increment=<1 block>): the same sequential stream with 8 in
//     flight. Goal: SsdStore >= 0.8x.
//
// Write cases: `write` erases, frees and allocates every slot again before
// the batch (untimed) and rewrites them: the tier's steady state, full,
// where each demotion takes the slot an eviction freed. `fill` writes the
// batch into a new store whose file was prepared (written once, untimed, as
// the daemon does at start): the tier filling up. `fill_sparse` does the
// same into a sparse file (SsdPreallocate::kSparse), the write into new
// space that preparation avoids; it is there to show what that buys. Reads
// read a batch back in order. fio's file is written once (untimed) and then
// rewritten and read.
//
// Flags (besides the benchmark flags): --dir=PATH, the parent of the data
// directory PATH/kvtier_bench_ssd (default /var/tmp: a real disk, where /tmp
// may be tmpfs; removed at exit); --batch_mib=N, MiB per Google Benchmark
// batch (default 512; at most one batch is on disk at a time);
// --fio_bin=PATH (default: no fio part), --rounds=N (default 6),
// --slice_mib=N (default 256; on disk at most: 2 slices + 64 MiB),
// --only=op:bs:depth[,...] (e.g. fill:256k:1 or write:*:8; default all),
// --sources=N (payloads: see g_sources; default 0, one per thread as fio);
// --seal: a fourth leg in each round of the fio part, a store with block
// keys (every block sealed with AES-256-GCM on write and opened on read,
// tiers/block_seal.h) over the same payloads, reported as sealed/ssd: what
// encryption at rest costs the tier.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include "tiers/block_seal.h"
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
std::string g_fio_bin;  // empty: no interleaved comparison with fio
int g_rounds = 6;
uint64_t g_slice_bytes = 256 * kMiB;
bool g_seal = false;  // --seal: the sealed store as a fourth leg

// Payloads written: 0 (default) = one per writing thread, reused for each of
// its writes, exactly as fio reuses its one buffer per job; N > 0 = N
// distinct payloads taken round robin by block, spread over N x block bytes
// of memory. On this VM the spread costs the raw write itself ~15% at
// 256 KiB (the host copies from guest memory: a reused buffer stays in its
// caches), whoever writes; --sources=32 shows that.
int g_sources = 0;
constexpr int kMaxDepth = 8;

// Payloads and per-thread read buffers for one block size.
struct Buffers {
  uint64_t block_bytes = 0;
  std::vector<AlignedBuffer> sources;
  std::vector<AlignedBuffer> outs;  // one per thread

  explicit Buffers(uint64_t bytes) : block_bytes(bytes) {
    Rng rng(bytes);
    for (int i = 0; i < std::max(g_sources, kMaxDepth); ++i) {
      sources.push_back(std::move(AlignedBuffer::Allocate(bytes)).value());
      auto* words = reinterpret_cast<uint64_t*>(sources.back().data());
      for (size_t w = 0; w < bytes / 8; ++w) words[w] = rng.Next();
    }
    for (int t = 0; t < kMaxDepth; ++t) {
      outs.push_back(std::move(AlignedBuffer::Allocate(bytes)).value());
    }
  }
  // The payload of block i written by thread t.
  std::span<const std::byte> Source(int t, size_t i) const {
    const size_t k = g_sources > 0 ? i % static_cast<size_t>(g_sources) : static_cast<size_t>(t);
    return sources[k].span().first(static_cast<size_t>(block_bytes));
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
    const bool ok = RunParallel(depth, records.size(), [&](int t, size_t i) {
      auto rec = store->Write(records[i], buffers.Source(t, i));
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
  // The store's own I/O without the store: plain pwrite/pread (the
  // BlockFile it uses) of the same payloads at the same offsets of the same
  // file, on a second descriptor. "" or an error.
  std::string RawAll(int depth, bool read) {
    auto file = tiers::internal::OpenBlockFile(store->dir() + "/blocks.dat", true, {});
    if (!file.ok()) return file.status().ToString();
    const size_t bytes = static_cast<size_t>(buffers.block_bytes);
    const bool ok = RunParallel(depth, records.size(), [&](int t, size_t i) {
      const uint64_t offset = records[i].slot.offset();
      return read ? (*file)
                        ->ReadAt(offset, buffers.outs[static_cast<size_t>(t)].span().first(bytes))
                        .ok()
                  : (*file)->WriteAt(offset, buffers.Source(t, i)).ok();
    });
    return ok ? "" : "raw I/O on the store's file failed";
  }
  bool ReadAll(int depth) {
    const size_t bytes = static_cast<size_t>(buffers.block_bytes);
    return RunParallel(depth, records.size(), [&](int t, size_t i) {
      return store->Read(records[i], buffers.outs[static_cast<size_t>(t)].span().first(bytes)).ok();
    });
  }
};

// The sealed store's keys: one fixed key (what is measured is the cipher's
// cost, not the key's secrecy).
std::shared_ptr<tiers::BlockSealer> BenchSealer() {
  static auto sealer =
      std::make_shared<tiers::BlockSealer>(*tiers::KeyRing::Parse("1:" + std::string(64, '7')));
  return sealer;
}

// A new store under g_dir/ssd (g_dir/ssd-sealed when `sealed`: its blocks
// sealed) whose slots for one batch are allocated. `sparse`: its file is not
// prepared (writes go into holes).
std::unique_ptr<SsdSubject> MakeSsd(uint64_t block_bytes, bool sparse, uint64_t batch_bytes,
                                    std::string* error, bool sealed = false) {
  const std::string dir = g_dir + (sealed ? "/ssd-sealed" : "/ssd");
  fs::remove_all(dir);
  auto s = std::make_unique<SsdSubject>(block_bytes);
  SsdOptions o;
  o.dir = dir;
  o.capacity_bytes = batch_bytes + 64 * kMiB;
  o.preallocate =
      sparse ? tiers::internal::SsdPreallocate::kSparse : tiers::internal::SsdPreallocate::kWrite;
  if (sealed) o.sealer = BenchSealer();
  auto store = SsdStore::Open(o);
  if (!store.ok()) {
    *error = store.status().ToString();
    return nullptr;
  }
  s->store = std::move(store).value();
  // A sealed block's identity names its namespace: namespace 0.
  if (auto ns = s->store->RegisterNamespace("bench", "", Layout{1, 1, 64, DType::kFloat16, 16});
      !ns.ok()) {
    *error = ns.status().ToString();
    return nullptr;
  }
  const size_t n = batch_bytes / block_bytes;
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

void BM_SsdWrite(benchmark::State& state, uint64_t block_bytes, int depth) {
  std::string error;
  auto* s = Use<SsdSubject>("ssd" + std::to_string(block_bytes),
                            [&] { return MakeSsd(block_bytes, false, g_batch_bytes, &error); });
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

void BM_SsdRead(benchmark::State& state, uint64_t block_bytes, int depth) {
  std::string error;
  auto* s = Use<SsdSubject>("ssd" + std::to_string(block_bytes),
                            [&] { return MakeSsd(block_bytes, false, g_batch_bytes, &error); });
  if (s == nullptr) return state.SkipWithError(error.c_str());
  if (!s->written && !(error = s->WriteAll(kMaxDepth)).empty()) {
    return state.SkipWithError(error.c_str());
  }
  for (auto _ : state) {
    if (!s->ReadAll(depth)) return state.SkipWithError("SsdStore read failed");
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
    const bool ok = RunParallel(depth, n, [&](int t, size_t i) {
      std::span<const std::byte> v = buffers.Source(t, i);
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
  } kinds[] = {{"ssd", "write", BM_SsdWrite},
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

// Google Benchmark's results by "subject_op/bs/depth", in GB/s.
std::map<std::string, double> g_gbench;

void Summarize(const SummaryReporter& r) {
  std::printf("=== bench_ssd_store: Google Benchmark (GB/s, medians; same run)\n");
  std::printf("%-11s %-5s %5s %9s %9s %9s\n", "op", "bs", "depth", "SsdStore", "blobs", "ssd/blob");
  for (const Size& size : kSizes) {
    for (const char* op : {"write", "read"}) {
      const char* peer_op = std::string_view(op) == "read" ? "read" : "write";
      for (int depth : kDepths) {
        auto gbps = [&](const char* subject, const char* o) {
          const std::string name = Name(subject, o, size, depth);
          const double v = r.Counter(name + "/real_time", "bytes_per_second") / 1e9;
          if (v > 0) g_gbench[name] = v;
          return v;
        };
        const double ssd = gbps("ssd", op), blob = gbps("blob", peer_op);
        std::printf("%-11s %-5s %5d %9.2f %9.2f %8.2fx\n", op, size.name, depth, ssd, blob,
                    Ratio(ssd, blob));
      }
    }
  }
  std::printf("(0 = not run, e.g. filtered out)\n");
}

// ---- SsdStore interleaved with fio ----

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One fio run of `rw` over `bytes` of `file` in the store's pattern: `depth`
// psync jobs, job k doing blocks k, k + depth, k + 2 * depth, ... (one
// sequential stream with `depth` requests in flight, as RunParallel's
// threads do). Returns bytes/s, or 0 with *error set.
double RunFio(const std::string& file, const char* rw, const Size& size, int depth, uint64_t bytes,
              std::string* error) {
  const uint64_t d = static_cast<uint64_t>(depth);
  const uint64_t skip = (d - 1) * size.bytes;
  const std::string cmd =
      ShellQuote(g_fio_bin) + " --name=raw --filename=" + ShellQuote(file) + " --rw=" + rw +
      (skip > 0 ? ":" + std::to_string(skip) : "") + " --bs=" + std::to_string(size.bytes) +
      " --direct=1 --ioengine=psync --numjobs=" + std::to_string(depth) +
      " --offset_increment=" + std::to_string(size.bytes) +
      " --size=" + std::to_string(bytes - skip) + " --io_size=" + std::to_string(bytes / d) +
      " --group_reporting --output-format=terse --terse-version=3 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *error = "cannot run " + g_fio_bin;
    return 0;
  }
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int rc = ::pclose(pipe);
  // Terse v3 (';'-separated, 1-based): field 7 is the read bandwidth and 48
  // the write bandwidth, in KiB/s.
  std::vector<std::string> fields;
  const size_t start = out.rfind("\n3;", out.size() > 1 ? out.size() - 2 : 0);
  std::string line = out.substr(start == std::string::npos ? 0 : start + 1);
  for (size_t b = 0, e; b <= line.size(); b = e + 1) {
    e = line.find(';', b);
    if (e == std::string::npos) e = line.size();
    fields.push_back(line.substr(b, e - b));
  }
  const size_t field = std::string_view(rw) == "read" ? 7 : 48;
  const double kib = rc == 0 && fields.size() > field && fields[0] == "3"
                         ? std::strtod(fields[field - 1].c_str(), nullptr)
                         : 0;
  if (kib <= 0) *error = "fio failed (rc " + std::to_string(rc) + "): " + cmd + "\n" + out;
  return kib * 1024;
}

struct Interleaved {
  std::string op;
  const Size* size = nullptr;
  int depth = 0;
  std::vector<double> store_bps, raw_bps, fio_bps;  // per round
  std::vector<double> sealed_bps;                   // per round, with --seal

  // Total bytes over total time, each side.
  static double Sum(const std::vector<double>& bps) {
    double seconds = 0;
    for (double v : bps) seconds += 1 / v;  // per byte; equal bytes per round
    return static_cast<double>(bps.size()) / seconds;
  }
  std::vector<double> Ratios() const {
    std::vector<double> r;
    for (size_t i = 0; i < store_bps.size(); ++i) r.push_back(store_bps[i] / fio_bps[i]);
    std::sort(r.begin(), r.end());
    return r;
  }
};

// --only=op:bs:depth[,...] (any part may be *): the interleaved cases to run.
std::string g_only;
bool Selected(std::string_view op, const Size& size, int depth) {
  if (g_only.empty()) return true;
  const std::string d = std::to_string(depth);
  for (size_t b = 0, e; b <= g_only.size(); b = e + 1) {
    e = g_only.find(',', b);
    if (e == std::string::npos) e = g_only.size();
    const std::string_view c = std::string_view(g_only).substr(b, e - b);
    const size_t c1 = c.find(':'), c2 = c.find(':', c1 == c.npos ? c.npos : c1 + 1);
    if (c2 == c.npos) continue;
    auto match = [](std::string_view part, std::string_view v) { return part == "*" || part == v; };
    if (match(c.substr(0, c1), op) && match(c.substr(c1 + 1, c2 - c1 - 1), size.name) &&
        match(c.substr(c2 + 1), d)) {
      return true;
    }
  }
  return false;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Rounds of (fio, store) or (store, fio) for each case; false on an error.
bool RunInterleaved(std::vector<Interleaved>* results) {
  g_subject.reset();
  fs::remove_all(g_dir);
  fs::create_directories(g_dir);
  const std::string fio_file = g_dir + "/fio.dat";
  std::string error;
  for (const Size& size : kSizes) {
    const uint64_t stride = size.bytes * kMaxDepth;
    const uint64_t bytes = g_slice_bytes / stride * stride;
    // fio's file, written once so rewrites and reads see allocated blocks.
    if (RunFio(fio_file, "write", size, 1, bytes, &error) == 0) {
      std::fprintf(stderr, "bench_ssd_store: %s\n", error.c_str());
      return false;
    }
    // `fill` and `fill_sparse` make a new store each round (untimed);
    // `write` makes one that `read` reads.
    std::unique_ptr<SsdSubject> s, sealed;  // sealed: with --seal
    for (const char* op : {"fill", "fill_sparse", "write", "read"}) {
      const std::string_view name = op;
      const bool read = name == "read", fill = name.starts_with("fill");
      if (name == "write") {
        // Written once (untimed), then rewritten by `write` and read by `read`.
        s.reset();  // a store holds its directory's lock
        s = MakeSsd(size.bytes, false, bytes, &error);
        if (s != nullptr) error = s->WriteAll(kMaxDepth);
        if (g_seal && error.empty()) {
          sealed.reset();
          sealed = MakeSsd(size.bytes, false, bytes, &error, true);
          if (sealed != nullptr) error = sealed->WriteAll(kMaxDepth);
        }
      } else if (read && s != nullptr) {
        // Written again (untimed): `write`'s raw legs wrote the payloads of
        // other threads over some blocks (each thread has its own payload),
        // which their checksums would refuse.
        error = s->WriteAll(kMaxDepth);
      }
      for (int depth : kDepths) {
        if (!Selected(op, size, depth)) continue;
        Interleaved r{op, &size, depth, {}, {}, {}, {}};
        for (int round = 0; round < g_rounds && error.empty(); ++round) {
          // Three legs, their order rotating by round: fio, the store, and
          // the store's file written or read raw (RawAll); with --seal a
          // fourth, the sealed store.
          const int legs = g_seal ? 4 : 3;
          double bps[4] = {0, 0, 0, 0};
          for (int k = 0; k < legs && error.empty(); ++k) {
            const int leg = (round + k) % legs;
            if (leg == 0) {
              bps[0] = RunFio(fio_file, read ? "read" : "write", size, depth, bytes, &error);
              continue;
            }
            std::unique_ptr<SsdSubject>& subject = leg == 3 ? sealed : s;
            if (fill) {
              subject.reset();
              subject = MakeSsd(size.bytes, name == "fill_sparse", bytes, &error, leg == 3);
            } else if (!read && leg != 2) {
              error = subject->Refill();
            }
            if (!error.empty()) break;
            const auto t0 = std::chrono::steady_clock::now();
            if (leg == 2) {
              error = s->RawAll(depth, read);
            } else if (read) {
              if (!subject->ReadAll(depth)) error = "SsdStore read failed";
            } else {
              error = subject->WriteAll(depth);
            }
            bps[leg] = static_cast<double>(bytes) / SecondsSince(t0);
          }
          if (!error.empty()) break;
          r.fio_bps.push_back(bps[0]);
          r.store_bps.push_back(bps[1]);
          r.raw_bps.push_back(bps[2]);
          if (g_seal) r.sealed_bps.push_back(bps[3]);
          std::printf(
              "%-11s %-5s depth %d round %d: SsdStore %6.2f GB/s, raw %6.2f GB/s, fio %6.2f GB/s",
              op, size.name, depth, round, bps[1] / 1e9, bps[2] / 1e9, bps[0] / 1e9);
          if (g_seal) std::printf(", sealed %6.2f GB/s", bps[3] / 1e9);
          std::printf("\n");
          std::fflush(stdout);
        }
        if (!error.empty()) {
          std::fprintf(stderr, "bench_ssd_store: %s\n", error.c_str());
          return false;
        }
        results->push_back(std::move(r));
      }
    }
  }
  fs::remove_all(g_dir);
  return true;
}

void PrintInterleaved(const std::vector<Interleaved>& results) {
  std::printf(
      "=== SsdStore vs fio raw direct I/O, interleaved (%d rounds of %llu MiB; fio psync, "
      "numjobs = depth, strided as the store; GB/s = total bytes / total time; payloads: %s)\n",
      g_rounds, static_cast<unsigned long long>(g_slice_bytes / kMiB),
      g_sources > 0 ? (std::to_string(g_sources) + " spread round robin").c_str()
                    : "one per thread, as fio");
  std::printf("%-11s %-5s %5s %9s %9s %8s %8s %15s %9s %8s %9s %9s\n", "op", "bs", "depth",
              "SsdStore", "fio raw", "ssd/fio", "median", "round min-max", "own raw", "ssd/own",
              "blobs", "ssd/blob");
  for (const Interleaved& r : results) {
    const double store = Interleaved::Sum(r.store_bps) / 1e9;
    const double fio = Interleaved::Sum(r.fio_bps) / 1e9;
    const double raw = Interleaved::Sum(r.raw_bps) / 1e9;
    const std::vector<double> ratios = r.Ratios();
    const size_t n = ratios.size();
    const double median = n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    const char* peer_op = r.op == "read" ? "read" : "write";
    auto it = g_gbench.find(Name("blob", peer_op, *r.size, r.depth));
    const double blob = it == g_gbench.end() ? 0 : it->second;
    std::printf("%-11s %-5s %5d %9.2f %9.2f %7.2fx %7.2fx %7.2f-%5.2fx %9.2f %7.2fx %9.2f %8.2fx\n",
                r.op.c_str(), r.size->name, r.depth, store, fio, Ratio(store, fio), median,
                ratios.front(), ratios.back(), raw, Ratio(store, raw), blob, Ratio(store, blob));
  }
  std::printf(
      "goal: ssd/fio >= 0.80 for reads and writes. own raw: the same payloads at the same "
      "offsets of the store's file, plain pwrite/pread (the store less its checksum and "
      "record). blobs 0 = not run\n");
  if (!g_seal) return;
  std::printf(
      "\n=== The sealed store (AES-256-GCM on every write and read) vs the store, same rounds\n");
  std::printf("%-11s %-5s %5s %9s %9s %11s %8s %15s\n", "op", "bs", "depth", "sealed", "SsdStore",
              "sealed/ssd", "median", "round min-max");
  for (const Interleaved& r : results) {
    std::vector<double> ratios;
    for (size_t i = 0; i < r.sealed_bps.size(); ++i) {
      ratios.push_back(r.sealed_bps[i] / r.store_bps[i]);
    }
    std::sort(ratios.begin(), ratios.end());
    const size_t n = ratios.size();
    if (n == 0) continue;
    const double median = n % 2 == 1 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    const double sealed = Interleaved::Sum(r.sealed_bps) / 1e9;
    const double store = Interleaved::Sum(r.store_bps) / 1e9;
    std::printf("%-11s %-5s %5d %9.2f %9.2f %10.2fx %7.2fx %7.2f-%5.2fx\n", r.op.c_str(),
                r.size->name, r.depth, sealed, store, Ratio(sealed, store), median, ratios.front(),
                ratios.back());
  }
  std::printf("goal: sealed/ssd >= 0.90\n");
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
    } else if (arg.starts_with("--fio_bin=")) {
      g_fio_bin = std::string(arg.substr(10));
    } else if (arg.starts_with("--rounds=")) {
      g_rounds = std::atoi(argv[i] + 9);
    } else if (arg.starts_with("--sources=")) {
      g_sources = std::atoi(argv[i] + 10);
    } else if (arg.starts_with("--only=")) {
      g_only = std::string(arg.substr(7));
    } else if (arg == "--seal") {
      g_seal = true;
    } else if (arg.starts_with("--slice_mib=")) {
      g_slice_bytes = std::strtoull(argv[i] + 12, nullptr, 10) * kvtier::kMiB;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (g_batch_bytes < 2 * kvtier::kMiB || g_slice_bytes < 16 * kvtier::kMiB || g_rounds < 1) {
    std::fprintf(stderr,
                 "bench_ssd_store: --batch_mib must be at least 2, --slice_mib at least 16 and "
                 "--rounds at least 1\n");
    return 1;
  }
  Register();
  int rc = RunAndSummarize(argc, argv, Summarize);
  if (rc == 0 && !g_fio_bin.empty()) {
    std::printf("\n=== SsdStore interleaved with fio\n");
    std::vector<Interleaved> results;
    if (RunInterleaved(&results)) {
      std::printf("\n");
      PrintInterleaved(results);
    } else {
      rc = 1;
    }
  }
  g_subject.reset();
  std::filesystem::remove_all(g_dir);
  return rc;
}

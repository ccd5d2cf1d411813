// Kernels: decode attention over gathered blocks, as K/V bytes read per
// second, beside a peer measured in the same run (STYLE.md 19).
//
// Shape: one layer of a Llama-70B-like model (8 KV heads x 128 dims, fp16,
// 64 query heads: GQA ratio 8), 16-token blocks in a shuffled arena (each
// sequence's blocks are scattered, as in a real cache). The arena holds one
// layer per block, so the bytes read are exactly the bytes of the arena.
//   - CPU: DecodeAttentionReference (one thread), beside memcpy of the same
//     bytes (one thread): the no-GPU fallback's speed.
//   - GPU (when one is present): DecodeAttention, timed with CUDA events,
//     L2 flushed before each launch, for batch 1..64 and context 1k..128k;
//     beside the theoretical peak (memory clock x bus width x 2) and a
//     device-to-device cudaMemcpy of 1 GiB (which reads and writes, so its
//     bandwidth counts both). The goal is >= 0.8 of peak at long contexts.
//     The same over fp8 (e4m3) blocks of the same shape (values one byte
//     each plus the block's scale table, dequantized in registers; q and o
//     in fp16): its K/V read rate beside peak, and its time beside the fp16
//     kernel's on the same shape (it reads half the bytes).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/layout.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"

#if KVTIER_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::bench {
namespace {

using kernels::DecodeAttentionParams;

constexpr uint32_t kKvHeads = 8;
constexpr uint32_t kHeadDim = 128;
constexpr uint32_t kGroup = 8;
constexpr uint32_t kBlockTokens = 16;

Layout BenchLayout(bool fp8 = false) {
  return Layout{1, kKvHeads, kHeadDim, fp8 ? DType::kFp8E4M3 : DType::kFloat16, kBlockTokens};
}
// Bytes from one block to the next in the arena (a multiple of 16).
uint64_t SlotStride(bool fp8) { return (BenchLayout(fp8).BlockBytes() + 15) / 16 * 16; }

// K and V of every token of every sequence: what one decode step reads
// (for fp8, the values and every block's scale table).
uint64_t KvBytes(uint64_t batch, uint64_t context, bool fp8 = false) {
  if (fp8) return batch * (context / kBlockTokens) * SlotStride(true);
  return batch * context * kKvHeads * kHeadDim * 2 * sizeof(uint16_t);
}

// Block table of `batch` sequences of `context` tokens over a shuffled arena
// of exactly their blocks.
std::vector<int32_t> ShuffledTable(uint32_t batch, uint32_t blocks_per_seq) {
  std::vector<int32_t> table(static_cast<size_t>(batch) * blocks_per_seq);
  std::iota(table.begin(), table.end(), 0);
  Rng rng(42);
  for (size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[rng.Next() % i]);
  return table;
}

DecodeAttentionParams BaseParams(uint32_t batch, uint32_t context, bool fp8 = false) {
  DecodeAttentionParams p;
  p.layout = BenchLayout(fp8);
  p.io_dtype = DType::kFloat16;
  p.batch = batch;
  p.num_q_heads = kKvHeads * kGroup;
  p.max_blocks_per_seq = context / kBlockTokens;
  p.num_slots = batch * p.max_blocks_per_seq;
  p.slot_stride_bytes = SlotStride(fp8);
  return p;
}

void SetKvRate(benchmark::State& state, uint64_t kv_bytes) {
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kv_bytes));
  state.counters["kv_bytes"] = static_cast<double>(kv_bytes);
}

// ---- CPU ----

struct HostProblem {
  uint32_t batch = 0;
  uint32_t context = 0;
  std::vector<uint16_t> arena;
  std::vector<uint16_t> q;
  std::vector<uint16_t> o;
  std::vector<int32_t> table;
  std::vector<int32_t> lens;
  std::vector<float> workspace;
  DecodeAttentionParams params;
};

// One problem at a time, kept while the same shape is measured.
HostProblem& Host(uint32_t batch, uint32_t context) {
  static std::unique_ptr<HostProblem> cached;
  if (cached && cached->batch == batch && cached->context == context) return *cached;
  cached.reset();
  auto h = std::make_unique<HostProblem>();
  h->batch = batch;
  h->context = context;
  h->params = BaseParams(batch, context);
  h->arena.resize(KvBytes(batch, context) / sizeof(uint16_t));
  Rng rng(7);
  // Finite fp16 values in (-2, 2): sign, a small exponent, random mantissa.
  for (uint16_t& x : h->arena) x = static_cast<uint16_t>(0x3800 | (rng.Next() & 0x83ff));
  h->q.assign(static_cast<size_t>(batch) * h->params.num_q_heads * kHeadDim, 0x3400);
  h->o.assign(h->q.size(), 0);
  h->table = ShuffledTable(batch, h->params.max_blocks_per_seq);
  h->lens.assign(batch, static_cast<int32_t>(context));
  h->params.q = h->q.data();
  h->params.o = h->o.data();
  h->params.arena = h->arena.data();
  h->params.block_table = h->table.data();
  h->params.seq_lens = h->lens.data();
  auto plan = kernels::PlanDecodeAttention(h->params);
  if (plan.ok()) h->workspace.resize(plan->workspace_bytes / sizeof(float) + 4);
  cached = std::move(h);
  return *cached;
}

void BM_CpuDecodeAttention(benchmark::State& state) {
  const auto batch = static_cast<uint32_t>(state.range(0));
  const auto context = static_cast<uint32_t>(state.range(1));
  HostProblem& h = Host(batch, context);
  for (auto _ : state) {
    const Status s = kernels::DecodeAttentionReference(h.params, h.workspace.data(),
                                                       h.workspace.size() * sizeof(float));
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(h.o.data());
  }
  SetKvRate(state, KvBytes(batch, context));
}

// The peer: memcpy of the same bytes, out of the same arena.
void BM_CpuMemcpy(benchmark::State& state) {
  const auto batch = static_cast<uint32_t>(state.range(0));
  const auto context = static_cast<uint32_t>(state.range(1));
  HostProblem& h = Host(batch, context);
  std::vector<uint16_t> dst(h.arena.size(), 1);
  for (auto _ : state) {
    std::memcpy(dst.data(), h.arena.data(), h.arena.size() * sizeof(uint16_t));
    benchmark::ClobberMemory();
  }
  SetKvRate(state, KvBytes(batch, context));
}

// Up to 128 MiB of K/V: the reference runs at a few GB/s on one core.
const std::vector<std::vector<int64_t>> kCpuShapes = {
    {1, 1024}, {1, 8192}, {1, 32768}, {4, 1024}, {4, 8192}};

void RegisterCpu() {
  for (const auto& args : kCpuShapes) {
    benchmark::RegisterBenchmark("BM_CpuDecodeAttention", &BM_CpuDecodeAttention)
        ->ArgNames({"batch", "context"})
        ->Args(args)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_CpuMemcpy", &BM_CpuMemcpy)
        ->ArgNames({"batch", "context"})
        ->Args(args)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

// ---- GPU ----

const std::vector<int64_t> kGpuBatches = {1, 4, 16, 64};
const std::vector<int64_t> kGpuContexts = {1024, 4096, 16384, 32768, 131072};

#if KVTIER_BENCH_CUDA

struct DeviceMemory {
  void* ptr = nullptr;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(ptr); }
  bool Allocate(uint64_t bytes) { return cudaMalloc(&ptr, bytes == 0 ? 16 : bytes) == cudaSuccess; }
};

struct DeviceProblem {
  uint32_t batch = 0;
  uint32_t context = 0;
  bool fp8 = false;
  DeviceMemory arena, q, o, table, lens, workspace;
  uint64_t workspace_bytes = 0;
  DecodeAttentionParams params;
};

// One problem at a time on the device: the largest is 32 GiB.
DeviceProblem* Device(uint32_t batch, uint32_t context, bool fp8, std::string* error) {
  static std::unique_ptr<DeviceProblem> cached;
  if (cached && cached->batch == batch && cached->context == context && cached->fp8 == fp8) {
    return cached.get();
  }
  cached.reset();
  auto d = std::make_unique<DeviceProblem>();
  d->batch = batch;
  d->context = context;
  d->fp8 = fp8;
  d->params = BaseParams(batch, context, fp8);
  auto plan = kernels::PlanDecodeAttention(d->params);
  if (!plan.ok()) return *error = plan.status().ToString(), nullptr;
  d->workspace_bytes = plan->workspace_bytes;
  const std::vector<int32_t> table = ShuffledTable(batch, d->params.max_blocks_per_seq);
  const std::vector<int32_t> lens(batch, static_cast<int32_t>(context));
  const uint64_t q_bytes = uint64_t{batch} * d->params.num_q_heads * kHeadDim * 2;
  const uint64_t kv_bytes = KvBytes(batch, context, fp8);
  if (!d->arena.Allocate(kv_bytes) || !d->q.Allocate(q_bytes) || !d->o.Allocate(q_bytes) ||
      !d->table.Allocate(table.size() * 4) || !d->lens.Allocate(lens.size() * 4) ||
      !d->workspace.Allocate(d->workspace_bytes)) {
    return *error = "cudaMalloc failed (" + std::to_string(kv_bytes >> 20) + " MiB of K/V)",
           nullptr;
  }
  // 0x3c3c is fp16 1.06, 0x3c e4m3 1.5 and 0x3c3c3c3c an fp32 scale of
  // 0.0115: finite values are all that speed needs.
  cudaMemset(d->arena.ptr, 0x3c, kv_bytes);
  cudaMemset(d->q.ptr, 0x30, q_bytes);
  cudaMemcpy(d->table.ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d->lens.ptr, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice);
  d->params.arena = d->arena.ptr;
  d->params.q = d->q.ptr;
  d->params.o = d->o.ptr;
  d->params.block_table = static_cast<const int32_t*>(d->table.ptr);
  d->params.seq_lens = static_cast<const int32_t*>(d->lens.ptr);
  if (cudaDeviceSynchronize() != cudaSuccess) return *error = "device setup failed", nullptr;
  cached = std::move(d);
  return cached.get();
}

// Writing twice the L2's size evicts K/V a previous launch left there, so
// every launch reads from HBM, as a real decode step does.
void FlushL2(cudaStream_t stream) {
  static DeviceMemory buffer;
  static uint64_t bytes = 0;
  if (buffer.ptr == nullptr) {
    int l2 = 0;
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    bytes = 2 * static_cast<uint64_t>(std::max(l2, 1 << 20));
    if (!buffer.Allocate(bytes)) return;
  }
  cudaMemsetAsync(buffer.ptr, 0, bytes, stream);
}

// Times `launch` on the default stream with events; seconds, or < 0.
template <typename Launch>
double TimeOnDevice(Launch launch) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, nullptr);
  const bool ok = launch();
  cudaEventRecord(stop, nullptr);
  float ms = -1;
  if (cudaEventSynchronize(stop) == cudaSuccess && ok) cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3;
}

void BM_GpuDecodeAttention(benchmark::State& state, bool fp8) {
  const auto batch = static_cast<uint32_t>(state.range(0));
  const auto context = static_cast<uint32_t>(state.range(1));
  std::string error;
  DeviceProblem* d = Device(batch, context, fp8, &error);
  if (d == nullptr) return state.SkipWithError(error.c_str());
  Status status;
  for (auto _ : state) {
    FlushL2(nullptr);
    const double s = TimeOnDevice([&] {
      status = kernels::DecodeAttention(d->params, d->workspace.ptr, d->workspace_bytes, nullptr);
      return status.ok();
    });
    if (s < 0) return state.SkipWithError(status.ok() ? "CUDA error" : status.ToString().c_str());
    state.SetIterationTime(s);
  }
  SetKvRate(state, KvBytes(batch, context, fp8));
}

// The peer: a 1 GiB device-to-device copy (it reads 1 GiB and writes 1 GiB;
// its bytes_per_second counts both).
void BM_GpuCopy(benchmark::State& state) {
  constexpr uint64_t kBytes = uint64_t{1} << 30;
  static DeviceMemory src;
  static DeviceMemory dst;
  if (src.ptr == nullptr && (!src.Allocate(kBytes) || !dst.Allocate(kBytes))) {
    return state.SkipWithError("cudaMalloc failed");
  }
  for (auto _ : state) {
    const double s = TimeOnDevice([&] {
      return cudaMemcpyAsync(dst.ptr, src.ptr, kBytes, cudaMemcpyDeviceToDevice, nullptr) ==
             cudaSuccess;
    });
    if (s < 0) return state.SkipWithError("cudaMemcpyAsync failed");
    state.SetIterationTime(s);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(2 * kBytes));
}

// Theoretical peak: memory clock (kHz) x 1000 x bus width (bytes) x 2 (DDR).
double GpuPeakBytesPerSecond() {
  int clock_khz = 0;
  int bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

void RegisterGpu() {
  benchmark::RegisterBenchmark("BM_GpuCopy", &BM_GpuCopy)
      ->Unit(benchmark::kMillisecond)
      ->UseManualTime();
  for (const bool fp8 : {false, true}) {
    for (int64_t batch : kGpuBatches) {
      for (int64_t context : kGpuContexts) {
        benchmark::RegisterBenchmark(fp8 ? "BM_GpuDecodeAttentionFp8" : "BM_GpuDecodeAttention",
                                     &BM_GpuDecodeAttention, fp8)
            ->ArgNames({"batch", "context"})
            ->Args({batch, context})
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
      }
    }
  }
}

#else

double GpuPeakBytesPerSecond() { return 0; }
void RegisterGpu() {}

#endif  // KVTIER_BENCH_CUDA

std::string ShapeName(const char* bench, int64_t batch, int64_t context, const char* time) {
  return std::string(bench) + "/batch:" + std::to_string(batch) +
         "/context:" + std::to_string(context) + "/" + time;
}

double BytesPerSecond(const SummaryReporter& r, const std::string& name) {
  return r.Counter(name, "bytes_per_second");
}

void Summarize(const SummaryReporter& r) {
  std::printf("kernels summary (8 KV heads x 128 dims fp16, 64 query heads, 16-token blocks)\n");
  std::printf("  CPU reference, one thread, K/V read rate vs memcpy of the same bytes:\n");
  for (const auto& shape : kCpuShapes) {
    const std::string ref = ShapeName("BM_CpuDecodeAttention", shape[0], shape[1], "real_time");
    const std::string mem = ShapeName("BM_CpuMemcpy", shape[0], shape[1], "real_time");
    if (r.Find(ref) == nullptr || r.Find(mem) == nullptr) continue;
    std::printf("    batch %3lld context %6lld: %6.2f GB/s = %.2fx memcpy (%.2f GB/s)\n",
                static_cast<long long>(shape[0]), static_cast<long long>(shape[1]),
                BytesPerSecond(r, ref) / 1e9, Ratio(BytesPerSecond(r, ref), BytesPerSecond(r, mem)),
                BytesPerSecond(r, mem) / 1e9);
  }
  if (!kernels::GpuAvailable()) {
    std::printf("  GPU: none (%s)\n", kernels::GpuDescription().c_str());
    return;
  }
  const double peak = GpuPeakBytesPerSecond();
  const double copy = BytesPerSecond(r, "BM_GpuCopy/manual_time");
  std::printf("  GPU %s: peak %.0f GB/s (clock x bus x 2), D2D copy %.0f GB/s (read + write)\n",
              kernels::GpuDescription().c_str(), peak / 1e9, copy / 1e9);
  std::printf("    K/V read rate of DecodeAttention, as a fraction of peak and of the copy:\n");
  for (int64_t batch : kGpuBatches) {
    for (int64_t context : kGpuContexts) {
      const std::string name = ShapeName("BM_GpuDecodeAttention", batch, context, "manual_time");
      if (r.Find(name) == nullptr) continue;
      const double rate = BytesPerSecond(r, name);
      std::printf("    batch %3lld context %6lld: %7.0f GB/s = %.2f of peak, %.2f of copy\n",
                  static_cast<long long>(batch), static_cast<long long>(context), rate / 1e9,
                  Ratio(rate, peak), Ratio(rate, copy));
    }
  }
  std::printf(
      "    over e4m3 blocks (half the bytes, plus scales): K/V read rate as a fraction "
      "of peak, and the fp16 kernel's time over the fp8 one's (speed-up):\n");
  for (int64_t batch : kGpuBatches) {
    for (int64_t context : kGpuContexts) {
      const std::string wide = ShapeName("BM_GpuDecodeAttention", batch, context, "manual_time");
      const std::string narrow =
          ShapeName("BM_GpuDecodeAttentionFp8", batch, context, "manual_time");
      if (r.Find(narrow) == nullptr) continue;
      const double rate = BytesPerSecond(r, narrow);
      // Time is bytes over rate: the speed-up is (bytes16 / rate16) / (bytes8 / rate8).
      const auto b = static_cast<uint64_t>(batch);
      const auto c = static_cast<uint64_t>(context);
      const double t16 = Ratio(static_cast<double>(KvBytes(b, c)), BytesPerSecond(r, wide));
      const double t8 = Ratio(static_cast<double>(KvBytes(b, c, true)), rate);
      std::printf(
          "    batch %3lld context %6lld: %7.0f GB/s = %.2f of peak; %.2fx the fp16 "
          "kernel's speed\n",
          static_cast<long long>(batch), static_cast<long long>(context), rate / 1e9,
          Ratio(rate, peak), Ratio(t16, t8));
    }
  }
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  kvtier::bench::RegisterCpu();
  if (kvtier::kernels::GpuAvailable()) kvtier::bench::RegisterGpu();
  return kvtier::bench::RunAndSummarize(argc, argv, kvtier::bench::Summarize);
}

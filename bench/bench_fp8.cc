// fp8 block codecs on the CPU (common/fp8.h): GB/s of QuantizeBlock (fp16
// or bf16 -> e4m3, scales computed) and DequantizeBlock (back), against
// memcpy of the same 16-bit bytes in the same run (goal >= 0.5x).
//
// Blocks of Llama-3-8B's layout (32 layers, 8 KV heads, head_dim 128, 16
// tokens: 2 MiB in fp16), 16 of them (32 MiB, past the last-level cache of
// this machine), values of a normal distribution. GB/s counts the 16-bit
// bytes (what the codec reads when quantizing, writes when restoring; the
// peer memcpy moves the same bytes). The codecs run their AVX2 + F16C code
// where the CPU has it; the "scalar" rows force the one-value-at-a-time
// code, for comparison.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/fp8.h"
#include "common/half.h"

namespace kvtier::bench {
namespace {

constexpr size_t kBlocks = 16;
constexpr DType kFp8 = DType::kFp8E4M3;

Layout Wide(DType dtype) { return Layout{32, 8, 128, dtype, 16}; }

struct Data {
  std::vector<std::vector<std::byte>> wide, narrow, back;
};

Data Make(DType dtype) {
  const Layout wide = Wide(dtype);
  const Layout narrow = Fp8LayoutOf(wide, kFp8);
  Data d;
  Rng rng(static_cast<uint64_t>(dtype) + 1);
  for (size_t b = 0; b < kBlocks; ++b) {
    std::vector<std::byte> block(wide.BlockBytes());
    for (size_t i = 0; i + 1 < block.size(); i += 2) {
      // Box-Muller from two uniforms: a normal value, as activations are.
      const double u1 = (static_cast<double>(rng.Next() >> 11) + 1) * 0x1p-53;
      const double u2 = static_cast<double>(rng.Next() >> 11) * 0x1p-53;
      const auto v =
          static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * 3.14159265358979 * u2));
      const uint16_t bits = dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(block.data() + i, &bits, 2);
    }
    d.wide.push_back(std::move(block));
    d.narrow.emplace_back(narrow.BlockBytes());
    d.back.emplace_back(wide.BlockBytes());
  }
  for (size_t b = 0; b < kBlocks; ++b) {
    if (!QuantizeBlock(wide, kFp8, d.wide[b], d.narrow[b]).ok()) std::abort();
  }
  return d;
}

Data& DataFor(DType dtype) {
  static Data fp16 = Make(DType::kFloat16);
  static Data bf16 = Make(DType::kBFloat16);
  return dtype == DType::kFloat16 ? fp16 : bf16;
}

DType DTypeArg(const benchmark::State& state) {
  return state.range(0) == 0 ? DType::kFloat16 : DType::kBFloat16;
}

void Count(benchmark::State& state, DType dtype) {
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(Wide(dtype).BlockBytes()));
}

void BM_Memcpy(benchmark::State& state) {
  const DType dtype = DTypeArg(state);
  Data& d = DataFor(dtype);
  size_t b = 0;
  for (auto _ : state) {
    std::memcpy(d.back[b].data(), d.wide[b].data(), d.wide[b].size());
    benchmark::ClobberMemory();
    b = (b + 1) % kBlocks;
  }
  Count(state, dtype);
}

void Quantize(benchmark::State& state, bool scalar) {
  const DType dtype = DTypeArg(state);
  Data& d = DataFor(dtype);
  SetFp8CodecScalarForTesting(scalar);
  size_t b = 0;
  for (auto _ : state) {
    if (!QuantizeBlock(Wide(dtype), kFp8, d.wide[b], d.narrow[b]).ok()) {
      state.SkipWithError("QuantizeBlock failed");
      break;
    }
    b = (b + 1) % kBlocks;
  }
  SetFp8CodecScalarForTesting(false);
  Count(state, dtype);
}

void Dequantize(benchmark::State& state, bool scalar) {
  const DType dtype = DTypeArg(state);
  Data& d = DataFor(dtype);
  const Layout narrow = Fp8LayoutOf(Wide(dtype), kFp8);
  SetFp8CodecScalarForTesting(scalar);
  size_t b = 0;
  for (auto _ : state) {
    if (!DequantizeBlock(narrow, dtype, d.narrow[b], d.back[b]).ok()) {
      state.SkipWithError("DequantizeBlock failed");
      break;
    }
    b = (b + 1) % kBlocks;
  }
  SetFp8CodecScalarForTesting(false);
  Count(state, dtype);
}

void BM_Quantize(benchmark::State& state) { Quantize(state, false); }
void BM_Dequantize(benchmark::State& state) { Dequantize(state, false); }
void BM_QuantizeScalar(benchmark::State& state) { Quantize(state, true); }
void BM_DequantizeScalar(benchmark::State& state) { Dequantize(state, true); }

// Arg 0: fp16, 1: bf16. Repetitions, the median kept: the machine is shared.
#define KVTIER_FP8_BENCH(fn)       \
  BENCHMARK(fn)                    \
      ->Arg(0)                     \
      ->Arg(1)                     \
      ->Repetitions(5)             \
      ->ReportAggregatesOnly(true) \
      ->MinTime(0.2)               \
      ->UseRealTime()
KVTIER_FP8_BENCH(BM_Memcpy);
KVTIER_FP8_BENCH(BM_Quantize);
KVTIER_FP8_BENCH(BM_Dequantize);
KVTIER_FP8_BENCH(BM_QuantizeScalar);
KVTIER_FP8_BENCH(BM_DequantizeScalar);

double GBps(const SummaryReporter& r, const std::string& name, DType dtype) {
  const double s = r.Seconds(name);
  return s > 0 ? static_cast<double>(Wide(dtype).BlockBytes()) / s / 1e9 : 0;
}

}  // namespace
}  // namespace kvtier::bench

int main(int argc, char** argv) {
  using namespace kvtier;
  using namespace kvtier::bench;
  return RunAndSummarize(argc, argv, [](const SummaryReporter& r) {
    std::printf(
        "fp8 codecs (e4m3, 2 MiB fp16/bf16 blocks, path %s) against memcpy of the same "
        "16-bit bytes; goal >= 0.5x\n",
        Fp8CodecPath());
    std::printf("%-6s %10s %22s %24s %22s %24s\n", "dtype", "memcpy", "quantize GB/s (ratio)",
                "dequantize GB/s (ratio)", "scalar quantize", "scalar dequantize");
    for (int arg : {0, 1}) {
      const DType dtype = arg == 0 ? DType::kFloat16 : DType::kBFloat16;
      char suffix[64];
      std::snprintf(suffix, sizeof(suffix), "/%d/min_time:0.200/repeats:5/real_time", arg);
      const std::string a = suffix;
      const double mem = GBps(r, "BM_Memcpy" + a, dtype);
      const double q = GBps(r, "BM_Quantize" + a, dtype), dq = GBps(r, "BM_Dequantize" + a, dtype);
      const double sq = GBps(r, "BM_QuantizeScalar" + a, dtype);
      const double sdq = GBps(r, "BM_DequantizeScalar" + a, dtype);
      std::printf("%-6s %10.2f %14.2f (%.2fx) %16.2f (%.2fx) %14.2f (%.2fx) %16.2f (%.2fx)\n",
                  std::string(DTypeName(dtype)).c_str(), mem, q, Ratio(q, mem), dq, Ratio(dq, mem),
                  sq, Ratio(sq, mem), sdq, Ratio(sdq, mem));
    }
  });
}

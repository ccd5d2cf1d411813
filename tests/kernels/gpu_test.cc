// The CUDA kernels against their CPU references, on the same NaN-canaried
// data. Compiled in every build; each test skips, saying why, when kvtier was
// built without CUDA or the machine has no usable GPU (STYLE.md 16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "attention_test_util.h"
#include "block_copy_test_util.h"
#include "fp8_codec_test_util.h"
#include "kernels/attention.h"
#include "kernels/block_copy.h"
#include "kernels/kernels.h"

#if KVTIER_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::kernels {
namespace {

using testing::AttentionData;
using testing::AttentionShape;
using testing::RunReference;

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GpuAvailable()) GTEST_SKIP() << "no GPU to test the CUDA kernels on: " << GpuDescription();
  }
};

// The kernels carry Hopper's machine code (cmake/cuda.cmake): on an
// H100/H200 they must not run as JIT-compiled code of an older GPU. Reads
// what nvcc compiled, so it needs no GPU.
TEST(CudaArchitecturesTest, KernelsAreBuiltForHopper) {
  const std::vector<int> archs = CompiledCudaArchitectures();
#if KVTIER_TEST_CUDA
  std::string list;
  for (int a : archs) list += std::to_string(a) + " ";
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end())
      << "the kernels are built for compute capabilities " << list << "only, not 9.0";
#else
  EXPECT_TRUE(archs.empty());
#endif
}

#if KVTIER_TEST_CUDA

// Device memory for one test; freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes == 0 ? 16 : bytes), cudaSuccess);
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  void* get() const { return ptr_; }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  uint64_t bytes_;
};

// Runs DecodeAttention on a device copy of `data` (workspace NaN-filled:
// 0xff bytes are fp32 NaNs) and returns o.
std::vector<uint16_t> RunOnGpu(const AttentionData& data) {
  DecodeAttentionParams p = data.Params();
  auto plan = PlanDecodeAttention(p);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  DeviceBuffer arena(data.arena), q(data.q), o(data.o), table(data.table), lens(data.seq_lens);
  DeviceBuffer ws(plan->workspace_bytes);
  EXPECT_EQ(cudaMemset(ws.get(), 0xff, plan->workspace_bytes), cudaSuccess);
  p.arena = arena.get();
  p.q = q.get();
  p.o = o.get();
  p.block_table = static_cast<const int32_t*>(table.get());
  p.seq_lens = static_cast<const int32_t*>(lens.get());
  const Status s = DecodeAttention(p, ws.get(), plan->workspace_bytes, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return o.Download<uint16_t>();
}

void ExpectGpuMatchesReference(const AttentionShape& shape, uint64_t seed) {
  SCOPED_TRACE(shape.ToString());
  const AttentionData data(shape, seed);
  const std::string diff = testing::CompareOutputs(shape.dtype, RunOnGpu(data), RunReference(data),
                                                   testing::GpuTolerance(shape.dtype));
  EXPECT_TRUE(diff.empty()) << diff;
}

#endif  // KVTIER_TEST_CUDA

class GpuAttentionSweepTest : public GpuTest,
                              public ::testing::WithParamInterface<testing::SweepParam> {};

TEST_P(GpuAttentionSweepTest, MatchesReference) {
#if KVTIER_TEST_CUDA
  const auto [dtype, head_dim, group] = GetParam();
  uint64_t seed = 100;
  for (const AttentionShape& shape : testing::SweepShapes(dtype, head_dim, group)) {
    ExpectGpuMatchesReference(shape, seed++);
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuAttentionSweepTest, testing::SweepParams(), testing::SweepName);

TEST_F(GpuTest, LongContextWithAutomaticSplit) {
#if KVTIER_TEST_CUDA
  AttentionShape shape;
  shape.kv_heads = 8;
  shape.group = 8;
  shape.layers = 2;
  shape.seq_lens = {32768 + 5};
  ExpectGpuMatchesReference(shape, 1);
  shape.window = 4000;
  ExpectGpuMatchesReference(shape, 2);
  shape.window = 0;
  shape.dtype = DType::kBFloat16;
  shape.seq_lens = {9000, 17, 1, 4096};
  ExpectGpuMatchesReference(shape, 3);
#endif
}

// fp8 blocks on the device: the kernel against the fp8 reference, both
// formats and io types, short, split and windowed (and long, for a chunk
// count a GPU is filled with).
TEST_F(GpuTest, Fp8BlocksMatchTheReference) {
#if KVTIER_TEST_CUDA
  uint32_t seed = 700;
  for (DType fp8 : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    for (DType io : {DType::kFloat16, DType::kBFloat16}) {
      for (const testing::Fp8Case& c :
           {testing::Fp8Case{io, fp8, 64, 2, {1, 37}}, testing::Fp8Case{io, fp8, 128, 8, {4000, 3}},
            testing::Fp8Case{io, fp8, 128, 4, {700}, 0, 64},
            testing::Fp8Case{io, fp8, 256, 1, {300}, 100}}) {
        SCOPED_TRACE(c.ToString());
        testing::Fp8AttentionData data(c, seed++);
        DecodeAttentionParams p = data.Fp8Params();
        auto plan = PlanDecodeAttention(p);
        ASSERT_TRUE(plan.ok()) << plan.status().ToString();
        std::vector<float> host_ws(plan->workspace_bytes / sizeof(float) + 4);
        ASSERT_TRUE(DecodeAttentionReference(p, host_ws.data(), host_ws.size() * 4).ok());
        const std::vector<uint16_t> want = data.o_fp8;
        DeviceBuffer arena(data.fp8_arena), q(data.q), o(data.o_fp8), table(data.table),
            lens(c.seq_lens), ws(plan->workspace_bytes);
        EXPECT_EQ(cudaMemset(ws.get(), 0xff, plan->workspace_bytes), cudaSuccess);
        p.arena = arena.get();
        p.q = q.get();
        p.o = o.get();
        p.block_table = static_cast<const int32_t*>(table.get());
        p.seq_lens = static_cast<const int32_t*>(lens.get());
        const Status s = DecodeAttention(p, ws.get(), plan->workspace_bytes, nullptr);
        ASSERT_TRUE(s.ok()) << s.ToString();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::string diff =
            testing::CompareOutputs(io, o.Download<uint16_t>(), want, testing::GpuTolerance(io));
        EXPECT_TRUE(diff.empty()) << diff;
      }
    }
  }
#endif
}

// The fp8 codecs on the device: the references' bytes, bit for bit.
TEST_F(GpuTest, Fp8CodecsMatchTheReferencesBitForBit) {
#if KVTIER_TEST_CUDA
  for (DType wide : {DType::kFloat16, DType::kBFloat16}) {
    for (DType fp8 : {DType::kFp8E4M3, DType::kFp8E5M2}) {
      for (const Layout& layout :
           {Layout{4, 8, 128, wide, 16}, Layout{3, 1, 576, wide, 16, KvKind::kLatent}}) {
        testing::Fp8Batch want(layout, fp8, 6, 11);
        want.PoisonWide(4);
        ASSERT_TRUE(QuantizeBlocksReference(want.QuantizeParams()).ok());
        ASSERT_TRUE(DequantizeBlocksReference(want.DequantizeParams()).ok());
        testing::Fp8Batch host = want;
        DeviceBuffer wide_d(host.wide_bytes), narrow_d(host.narrow_bytes), back_d(host.back_bytes),
            refused_d(host.refused);
        Fp8BlocksParams q = host.QuantizeParams();
        q.src = wide_d.get();
        q.dst = narrow_d.get();
        q.refused = static_cast<uint8_t*>(refused_d.get());
        ASSERT_TRUE(QuantizeBlocks(q, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(refused_d.Download<uint8_t>(), want.refused);
        host.narrow_bytes = narrow_d.Download<std::byte>();
        for (uint32_t i : {0u, 1u, 2u, 3u, 5u}) {
          EXPECT_TRUE(std::equal(host.NarrowBlock(i).begin(), host.NarrowBlock(i).end(),
                                 want.NarrowBlock(i).begin()))
              << i;
        }
        Fp8BlocksParams d = host.DequantizeParams();
        d.src = narrow_d.get();
        d.dst = back_d.get();
        d.refused = static_cast<uint8_t*>(refused_d.get());
        ASSERT_TRUE(DequantizeBlocks(d, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        host.back_bytes = back_d.Download<std::byte>();
        for (uint32_t i : {0u, 1u, 2u, 3u, 5u}) {
          EXPECT_TRUE(std::equal(host.BackBlock(i).begin(), host.BackBlock(i).end(),
                                 want.BackBlock(i).begin()))
              << i;
        }
      }
    }
  }
#endif
}

TEST_F(GpuTest, BadTableEntryPoisonsOnlyItsSequence) {
#if KVTIER_TEST_CUDA
  AttentionShape shape;
  shape.seq_lens = {40, 40};
  shape.chunk_tokens = 16;
  AttentionData data(shape, 5);
  data.table[1] = static_cast<int32_t>(data.num_slots()) + 7;  // sequence 0, block 1
  const std::vector<uint16_t> got = RunOnGpu(data);
  const size_t per_seq = data.num_q_heads() * shape.head_dim;
  for (size_t i = 0; i < per_seq; ++i) EXPECT_TRUE(std::isnan(HalfToFloat(got[i]))) << i;
  for (size_t i = per_seq; i < 2 * per_seq; ++i) EXPECT_FALSE(std::isnan(HalfToFloat(got[i])));
#endif
}

TEST_F(GpuTest, GatherAndScatterMatchTheReferencesBitForBit) {
#if KVTIER_TEST_CUDA
  for (const Layout& layout : {Layout{3, 2, 128, DType::kBFloat16, 16},
                               Layout{3, 1, 576, DType::kBFloat16, 16, KvKind::kLatent}}) {
    SCOPED_TRACE(layout.ToString());
    testing::CopyFixture host(layout, 10, 8, 9);
    host.Use({7, 0, 9, 3}, {5, 1, 0, 7});
    testing::CopyFixture want = host;
    ASSERT_TRUE(GatherBlocksReference(want.Params()).ok());

    // The same on the device: arena, per-layer tensors, and the pointer arrays.
    DeviceBuffer arena(host.arena), slots(host.slots), paged(host.paged_blocks);
    std::vector<std::unique_ptr<DeviceBuffer>> k, v;
    std::vector<void*> k_ptrs, v_ptrs;
    for (uint32_t l = 0; l < layout.layers; ++l) {
      k.push_back(std::make_unique<DeviceBuffer>(host.paged_k[l]));
      v.push_back(std::make_unique<DeviceBuffer>(host.paged_v[l]));
      k_ptrs.push_back(k.back()->get());
      v_ptrs.push_back(v.back()->get());
    }
    DeviceBuffer k_array(k_ptrs), v_array(v_ptrs);
    PagedCopyParams p = host.Params();
    p.arena = arena.get();
    p.slots = static_cast<const int32_t*>(slots.get());
    p.paged_blocks = static_cast<const int32_t*>(paged.get());
    p.k_layers = static_cast<void* const*>(k_array.get());
    // A latent layout has no V: its kernel must not read v_layers.
    p.v_layers = layout.Planes() == 2 ? static_cast<void* const*>(v_array.get()) : nullptr;
    ASSERT_TRUE(GatherBlocks(p, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (uint32_t l = 0; l < layout.layers; ++l) {
      EXPECT_EQ(k[l]->Download<uint16_t>(), want.paged_k[l]) << "K layer " << l;
      EXPECT_EQ(v[l]->Download<uint16_t>(), want.paged_v[l]) << "V layer " << l;
    }

    // Scatter back into other slots of a canary arena; compare with the
    // reference doing the same.
    want.FillArenaWithCanary();
    want.Use({2, 4, 6, 8}, {5, 1, 0, 7});
    ASSERT_TRUE(ScatterBlocksReference(want.Params()).ok());
    std::vector<uint16_t> canary_arena(host.arena.size(), host.canary);
    DeviceBuffer target(canary_arena), target_slots(want.slots);
    p.arena = target.get();
    p.slots = static_cast<const int32_t*>(target_slots.get());
    ASSERT_TRUE(ScatterBlocks(p, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(target.Download<uint16_t>(), want.arena);
  }
#endif
}

TEST_F(GpuTest, CopySlotsRoundTripsThroughTheDevice) {
#if KVTIER_TEST_CUDA
  constexpr uint64_t kBlock = 64 * 1024;
  std::vector<uint8_t> host(16 * kBlock);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  DeviceBuffer device(std::vector<uint8_t>(8 * kBlock, 0));
  // A run of consecutive slots (one DMA) and scattered ones.
  const std::vector<int32_t> from = {3, 4, 5, 6, 15, 0};
  const std::vector<int32_t> to = {0, 1, 2, 3, 7, 5};
  SlotCopyParams up;
  up.bytes_per_slot = kBlock;
  up.count = static_cast<uint32_t>(from.size());
  up.src = host.data();
  up.src_stride_bytes = kBlock;
  up.src_num_slots = 16;
  up.dst = device.get();
  up.dst_stride_bytes = kBlock;
  up.dst_num_slots = 8;
  up.src_slots = from.data();
  up.dst_slots = to.data();
  ASSERT_TRUE(CopySlots(up, nullptr).ok());
  std::vector<uint8_t> back(16 * kBlock, 0);
  SlotCopyParams down = up;
  down.src = device.get();
  down.src_stride_bytes = kBlock;
  down.src_num_slots = 8;
  down.dst = back.data();
  down.dst_num_slots = 16;
  down.src_slots = to.data();
  down.dst_slots = from.data();
  ASSERT_TRUE(CopySlots(down, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int32_t s : from) {
    const uint64_t at = static_cast<uint64_t>(s) * kBlock;
    EXPECT_EQ(std::memcmp(back.data() + at, host.data() + at, kBlock), 0) << s;
  }
#endif
}

}  // namespace
}  // namespace kvtier::kernels

// Test data for decode attention: a host arena whose every byte the kernels
// must not read is NaN (unused slots, other layers, tokens past seq_len or
// before the window, the slack between slots, unused table entries, which
// point at NaN slots), and a naive attention to check against.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common/layout.h"
#include "kernels/attention.h"

namespace kvtier::kernels::testing {

struct AttentionShape {
  DType dtype = DType::kFloat16;
  uint32_t head_dim = 128;
  uint32_t kv_heads = 2;
  uint32_t group = 1;  // query heads per KV head
  uint32_t layers = 3;
  uint32_t layer = 1;
  uint32_t block_tokens = 16;
  std::vector<int32_t> seq_lens = {1};
  uint32_t extra_table_blocks = 2;  // table columns beyond the longest sequence
  uint32_t spare_slots = 3;         // NaN slots nobody owns
  uint32_t window = 0;
  uint32_t chunk_tokens = 0;
  float softmax_scale = 0;
  float q_range = 2.0f;  // q uniform in [-q_range, q_range]; K, V in [-1, 1]

  std::string ToString() const;
};

// Bits of a quiet NaN in `dtype`, with a payload, so that "still the canary"
// is a bit-exact check.
uint16_t NanBits(DType dtype);

class AttentionData {
 public:
  AttentionData(const AttentionShape& shape, uint64_t seed);

  // Params over the host buffers below (for the reference).
  DecodeAttentionParams Params() const;
  const AttentionShape& shape() const { return shape_; }
  uint32_t num_q_heads() const { return shape_.kv_heads * shape_.group; }
  uint32_t max_blocks_per_seq() const { return max_blocks_; }
  uint32_t num_slots() const { return num_slots_; }
  uint64_t slot_stride_bytes() const { return slot_stride_; }
  Layout layout() const;

  std::vector<uint16_t> arena;    // num_slots * slot_stride bytes
  std::vector<uint16_t> q;        // [batch][num_q_heads][head_dim]
  std::vector<uint16_t> o;        // same shape, NaN until written
  std::vector<int32_t> table;     // [batch][max_blocks_per_seq]
  std::vector<int32_t> seq_lens;  // [batch]

 private:
  AttentionShape shape_;
  uint32_t max_blocks_ = 0;
  uint32_t num_slots_ = 0;
  uint64_t slot_stride_ = 0;
};

// Softmax attention in double, straight from the definition, one
// (sequence, query head) at a time: [batch][num_q_heads][head_dim].
std::vector<double> NaiveAttention(const AttentionData& data);

// |got - want| <= atol + rtol * |want|, per element.
struct Tolerance {
  double atol;
  double rtol;
};
// Reference vs naive: the reference is fp32 then rounds once to the dtype
// (<= half an ulp, relative 2^-11 fp16 / 2^-8 bf16); allow one ulp plus the
// fp32 accumulation error.
Tolerance ReferenceTolerance(DType dtype);
// GPU vs reference: both round fp32 values that differ by fp32 noise; allow
// two ulps.
Tolerance GpuTolerance(DType dtype);

// Empty when every element of `got` (dtype bits) is within `tol` of `want`;
// else a description of the first few failures.
std::string CompareOutputs(DType dtype, const std::vector<uint16_t>& got,
                           const std::vector<double>& want, Tolerance tol);
std::string CompareOutputs(DType dtype, const std::vector<uint16_t>& got,
                           const std::vector<uint16_t>& want, Tolerance tol);

// A sweep of shapes for one (dtype, head_dim, group): sequence lengths 1,
// block - 1, block, block + 1 and many blocks; split-K off, automatic and
// forced (block-aligned and not); windows; MQA; one or more KV heads.
std::vector<AttentionShape> SweepShapes(DType dtype, uint32_t head_dim, uint32_t group);

// The sweep's combinations for a parameterized test: (dtype, head_dim,
// group), every dtype x 64/128/256 x 1/2/4/8, named "fp16_d128_g2".
using SweepParam = std::tuple<DType, uint32_t, uint32_t>;
inline auto SweepParams() {
  return ::testing::Combine(::testing::Values(DType::kFloat16, DType::kBFloat16),
                            ::testing::Values(64u, 128u, 256u), ::testing::Values(1u, 2u, 4u, 8u));
}
std::string SweepName(const ::testing::TestParamInfo<SweepParam>& param);

// Runs DecodeAttentionReference over a copy of `data`'s host buffers with a
// NaN-filled workspace (so a partial read before it is written shows up)
// and returns o. A failure to plan or run is a test failure.
std::vector<uint16_t> RunReference(AttentionData data);

// Data for decode attention over fp8 blocks: 16-bit blocks of K, V uniform
// in [-1, 1] (no canaries: QuantizeBlock refuses NaN) and their fp8
// quantization (common/fp8.h), q uniform in [-2, 2], a scattered table.
// Two layers of two KV heads, 16-token blocks, layer 1 attended.
struct Fp8Case {
  DType io = DType::kFloat16;  // the 16-bit blocks, q and o
  DType fp8 = DType::kFp8E4M3;
  uint32_t head_dim = 128;
  uint32_t group = 1;
  std::vector<int32_t> seq_lens = {1};
  uint32_t window = 0;
  uint32_t chunk_tokens = 0;
  std::string ToString() const;
};

class Fp8AttentionData {
 public:
  Fp8AttentionData(const Fp8Case& c, uint32_t seed);
  // Over the 16-bit blocks (o written to o_wide) and over the fp8 blocks
  // (o written to o_fp8), the same q, table and lengths.
  DecodeAttentionParams WideParams();
  DecodeAttentionParams Fp8Params();
  const Fp8Case& c() const { return c_; }

  std::vector<std::byte> wide_arena, fp8_arena;
  std::vector<uint16_t> q, o_wide, o_fp8;
  std::vector<int32_t> table;

 private:
  Fp8Case c_;
  Layout wide_;
  uint32_t max_blocks_ = 1, slots_ = 0;
  uint64_t wide_stride_ = 0, fp8_stride_ = 0;
};

}  // namespace kvtier::kernels::testing

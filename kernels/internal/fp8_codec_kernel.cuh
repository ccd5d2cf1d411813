// The fp8 block codec kernels (device code only), included by fp8_codec.cu
// and by tests/kernels/emulated_kernel_test.cc, which runs them on the CPU
// (so only the intrinsics cuda_emulator.h provides).
//
// One CTA per (KV head, layer x plane, block) -- planes K|V, or an MLA
// layout's latent alone: the slice of one head is
// block_tokens rows of head_dim values, strided by kv_heads * head_dim.
// Quantizing: the threads' largest magnitudes are reduced (shuffles, then
// shared memory), the scale computed as the host does, then each thread
// encodes its values. Restoring: each value times the slice's scale.
// A refused block (NaN or infinity in, a NaN code or a bad scale) gets its
// `refused` entry set to 1 by the CTA that saw it; the launcher cleared
// them all first. The bytes equal common/fp8.h's.
#pragma once

#include <cstdint>

#include "common/fp8.h"
#include "kernels/fp8_codec.h"
#include "kernels/internal/fp8_device.cuh"

namespace kvtier::kernels::internal {

constexpr uint32_t kCodecThreads = 128;

struct Fp8BlocksArgs {
  const char* src;
  char* dst;
  uint8_t* refused;
  uint64_t src_stride;
  uint64_t dst_stride;
  uint64_t value_bytes_fp8;  // where the fp8 block's scale table starts
  uint32_t block_tokens;
  uint32_t kv_heads;
  uint32_t head_dim;
};

// Flattens validated params (host code, shared by the launchers and the
// CPU emulation of the kernels).
inline Fp8BlocksArgs MakeFp8BlocksArgs(const Fp8BlocksParams& p) {
  Fp8BlocksArgs args{};
  args.src = static_cast<const char*>(p.src);
  args.dst = static_cast<char*>(p.dst);
  args.refused = p.refused;
  args.src_stride = p.src_stride_bytes;
  args.dst_stride = p.dst_stride_bytes;
  args.value_bytes_fp8 = Fp8LayoutOf(p.layout, p.fp8).ValueBytes();
  args.block_tokens = p.layout.block_tokens;
  args.kv_heads = p.layout.kv_heads;
  args.head_dim = p.layout.head_dim;
  return args;
}

// The CTA's slice (grid (kv_heads, planes * layers, num_blocks)): one head of
// one layer's K or V (or latent) of one block, block_tokens rows of head_dim
// values.
struct Slice {
  uint32_t block;
  uint32_t n;             // values
  uint64_t first;         // element index of its first value
  uint64_t token_stride;  // kv_heads * head_dim
  uint32_t head_dim;
  uint64_t scale_index;  // its entry of the block's scale table

  __device__ explicit Slice(const Fp8BlocksArgs& a)
      : block(blockIdx.z),
        n(a.block_tokens * a.head_dim),
        first(uint64_t{blockIdx.y} * a.block_tokens * a.kv_heads * a.head_dim +
              uint64_t{blockIdx.x} * a.head_dim),
        token_stride(uint64_t{a.kv_heads} * a.head_dim),
        head_dim(a.head_dim),
        scale_index(uint64_t{blockIdx.y} * a.kv_heads + blockIdx.x) {}
  // Element index of its i-th value.
  __device__ uint64_t At(uint32_t i) const {
    return first + (i / head_dim) * token_stride + i % head_dim;
  }
};

template <typename T, typename Format>
__global__ void QuantizeBlocksKernel(const Fp8BlocksArgs a) {
  const Slice sl(a);
  const auto* in = reinterpret_cast<const uint16_t*>(a.src + sl.block * a.src_stride);
  auto* out = reinterpret_cast<uint8_t*>(a.dst + sl.block * a.dst_stride);

  // The slice's largest magnitude, and whether anything is not finite
  // (1.0f), reduced over the warp and then the CTA.
  float amax = 0.0f, bad = 0.0f;
  for (uint32_t i = threadIdx.x; i < sl.n; i += kCodecThreads) {
    const float mag = fabsf(Elem<T>::Lo(in[sl.At(i)]));
    if (!(mag <= 3.4028235e38f)) bad = 1.0f;  // NaN or infinity
    amax = fmaxf(amax, mag);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    bad = fmaxf(bad, __shfl_xor_sync(0xffffffffu, bad, offset));
  }
  __shared__ float s_amax[kCodecThreads / 32];
  __shared__ float s_bad[kCodecThreads / 32];
  if (threadIdx.x % 32 == 0) {
    s_amax[threadIdx.x / 32] = amax;
    s_bad[threadIdx.x / 32] = bad;
  }
  __syncthreads();
  for (uint32_t w = 0; w < kCodecThreads / 32; ++w) {
    amax = fmaxf(amax, s_amax[w]);
    bad = fmaxf(bad, s_bad[w]);
  }
  if (bad != 0.0f) {
    if (threadIdx.x == 0) a.refused[sl.block] = 1;
    return;
  }
  // As the host: at least 2^-126, so that the inverse is finite.
  const float scale = amax > 0.0f ? fmaxf(amax / Format::kMaxFinite, 1.17549435e-38f) : 1.0f;
  const float inv = 1.0f / scale;
  if (threadIdx.x == 0) reinterpret_cast<float*>(out + a.value_bytes_fp8)[sl.scale_index] = scale;
  for (uint32_t i = threadIdx.x; i < sl.n; i += kCodecThreads) {
    const uint64_t e = sl.At(i);
    out[e] = static_cast<uint8_t>(Format::Encode(Elem<T>::Lo(in[e]) * inv));
  }
}

template <typename T, typename Format>
__global__ void DequantizeBlocksKernel(const Fp8BlocksArgs a) {
  const Slice sl(a);
  const auto* in = reinterpret_cast<const uint8_t*>(a.src + sl.block * a.src_stride);
  auto* out = reinterpret_cast<uint16_t*>(a.dst + sl.block * a.dst_stride);
  const float scale = reinterpret_cast<const float*>(in + a.value_bytes_fp8)[sl.scale_index];
  if (!(scale > 0.0f && scale <= 3.4028235e38f)) {
    if (threadIdx.x == 0) a.refused[sl.block] = 1;
    return;
  }
  for (uint32_t i = threadIdx.x; i < sl.n; i += kCodecThreads) {
    const uint64_t e = sl.At(i);
    const float v = Format::Decode(in[e]);
    if (!(fabsf(v) <= 3.4028235e38f)) a.refused[sl.block] = 1;
    out[e] = Elem<T>::Narrow(v * scale);
  }
}

}  // namespace kvtier::kernels::internal

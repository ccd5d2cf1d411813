// fp8 blocks on the GPU: quantizing fp16/bf16 blocks into the fp8 block
// format (values plus a scale per layer, K or V and KV head: common/fp8.h,
// docs/fp8.md) and restoring them, for a batch of blocks at once, with CPU
// references of the same signature (STYLE.md 13) that are common/fp8.h's
// codecs. The GPU's bytes equal the references' bit for bit: the same fp32
// scale, the same product, the same rounding to nearest even.
//
// A block that holds NaN or infinity (quantizing), or a NaN code or a scale
// that is not positive and finite (restoring), is not converted: its entry
// of `refused` is set to 1 and its output holds no block. The calls
// themselves succeed (the GPU cannot answer per block synchronously); the
// caller reads `refused`.
//
// Thread-safety: stateless; concurrent calls on distinct outputs are fine.
#pragma once

#include <cstdint>

#include "common/layout.h"
#include "common/status.h"
#include "kernels/kernels.h"

namespace kvtier::kernels {

struct Fp8BlocksParams {
  // The 16-bit side's layout: dtype kFloat16 or kBFloat16. The fp8 side is
  // Fp8LayoutOf(layout, fp8) (common/fp8.h).
  Layout layout;
  DType fp8 = DType::kFp8E4M3;
  // Blocks to convert; 0 is a no-op. At most 65535.
  uint32_t num_blocks = 0;
  // Block i is read at src + i * src_stride_bytes and written at
  // dst + i * dst_stride_bytes; strides at least the side's block bytes,
  // multiples of 16. Device memory for the CUDA launchers, host memory for
  // the references; 16-byte aligned; src and dst do not overlap.
  const void* src = nullptr;
  uint64_t src_stride_bytes = 0;
  void* dst = nullptr;
  uint64_t dst_stride_bytes = 0;
  // [num_blocks]: 1 for a block refused, else 0 (written for every block).
  uint8_t* refused = nullptr;
};

// src: 16-bit blocks; dst: fp8 blocks.
Status QuantizeBlocksReference(const Fp8BlocksParams& params);
Status QuantizeBlocks(const Fp8BlocksParams& params, Stream stream);
// src: fp8 blocks; dst: 16-bit blocks.
Status DequantizeBlocksReference(const Fp8BlocksParams& params);
Status DequantizeBlocks(const Fp8BlocksParams& params, Stream stream);

// The checks both entry points make: InvalidArgument for a layout, count,
// stride or pointer they refuse.
Status ValidateFp8Blocks(const Fp8BlocksParams& params, bool quantize);

}  // namespace kvtier::kernels

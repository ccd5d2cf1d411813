// The fp8 block codecs' validation and CPU references (common/fp8.h's
// codecs, block by block).
#include "kernels/fp8_codec.h"

#include <cstring>
#include <span>
#include <string>

#include "common/fp8.h"

namespace kvtier::kernels {
namespace {

Status CheckPointer(const void* p, const char* name) {
  if (p == nullptr) return InvalidArgumentError(std::string(name) + " is null");
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    return InvalidArgumentError(std::string(name) + " is not 16-byte aligned");
  }
  return Status();
}

Status CheckStride(uint64_t stride, uint64_t block_bytes, const char* name) {
  if (stride < block_bytes || stride % 16 != 0) {
    return InvalidArgumentError(std::string(name) + " (" + std::to_string(stride) +
                                ") must be >= the block size (" + std::to_string(block_bytes) +
                                ") and a multiple of 16");
  }
  return Status();
}

Status Run(const Fp8BlocksParams& p, bool quantize) {
  KVTIER_RETURN_IF_ERROR(ValidateFp8Blocks(p, quantize));
  const Layout narrow = Fp8LayoutOf(p.layout, p.fp8);
  const uint64_t in_bytes = quantize ? p.layout.BlockBytes() : narrow.BlockBytes();
  const uint64_t out_bytes = quantize ? narrow.BlockBytes() : p.layout.BlockBytes();
  for (uint32_t i = 0; i < p.num_blocks; ++i) {
    const std::span in(static_cast<const std::byte*>(p.src) + i * p.src_stride_bytes, in_bytes);
    const std::span out(static_cast<std::byte*>(p.dst) + i * p.dst_stride_bytes, out_bytes);
    const Status s = quantize ? QuantizeBlock(p.layout, p.fp8, in, out)
                              : DequantizeBlock(narrow, p.layout.dtype, in, out);
    p.refused[i] = s.ok() ? 0 : 1;
  }
  return Status();
}

}  // namespace

Status ValidateFp8Blocks(const Fp8BlocksParams& p, bool quantize) {
  if (Status s = p.layout.Validate(); !s.ok()) return s.WithContext("fp8 blocks layout");
  if (p.layout.dtype != DType::kFloat16 && p.layout.dtype != DType::kBFloat16) {
    return InvalidArgumentError("fp8 blocks convert fp16 or bf16, not " +
                                std::string(DTypeName(p.layout.dtype)));
  }
  if (!IsFp8(p.fp8)) {
    return InvalidArgumentError("fp8 blocks: " + std::string(DTypeName(p.fp8)) + " is not fp8");
  }
  if (p.num_blocks > 65535) return InvalidArgumentError("more than 65535 blocks in one call");
  if (p.num_blocks == 0) return Status();
  const uint64_t wide = p.layout.BlockBytes();
  const uint64_t narrow = Fp8LayoutOf(p.layout, p.fp8).BlockBytes();
  KVTIER_RETURN_IF_ERROR(CheckStride(p.src_stride_bytes, quantize ? wide : narrow, "src stride"));
  KVTIER_RETURN_IF_ERROR(CheckStride(p.dst_stride_bytes, quantize ? narrow : wide, "dst stride"));
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.src, "src"));
  KVTIER_RETURN_IF_ERROR(CheckPointer(p.dst, "dst"));
  if (p.refused == nullptr) return InvalidArgumentError("refused is null");
  return Status();
}

Status QuantizeBlocksReference(const Fp8BlocksParams& params) { return Run(params, true); }

Status DequantizeBlocksReference(const Fp8BlocksParams& params) { return Run(params, false); }

}  // namespace kvtier::kernels

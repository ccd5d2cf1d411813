#include "common/layout.h"

namespace kvtier {

uint32_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat32:
      return "fp32";
    case DType::kFp8E4M3:
      return "fp8_e4m3";
    case DType::kFp8E5M2:
      return "fp8_e5m2";
  }
  return "unknown";
}

bool ParseDType(std::string_view name, DType* out) {
  for (DType d :
       {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFp8E4M3, DType::kFp8E5M2}) {
    if (DTypeName(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

std::string_view KvKindName(KvKind kind) {
  switch (kind) {
    case KvKind::kKeyValue:
      return "kv";
    case KvKind::kLatent:
      return "latent";
  }
  return "unknown";
}

bool ParseKvKind(std::string_view name, KvKind* out) {
  for (KvKind k : {KvKind::kKeyValue, KvKind::kLatent}) {
    if (KvKindName(k) == name) {
      *out = k;
      return true;
    }
  }
  return false;
}

Status Layout::Validate() const {
  if (layers == 0 || kv_heads == 0 || head_dim == 0 || block_tokens == 0) {
    return InvalidArgumentError("layout fields must be positive: " + ToString());
  }
  if (DTypeBytes(dtype) == 0) return InvalidArgumentError("unknown dtype");
  if (static_cast<uint8_t>(kind) > kMaxKvKind) {
    return InvalidArgumentError("unknown layout kind " +
                                std::to_string(static_cast<unsigned>(kind)));
  }
  if (kind == KvKind::kLatent && kv_heads != 1) {
    // MLA caches one latent vector per token and layer, shared by all heads.
    return InvalidArgumentError(
        "an MLA latent layout has kv_heads 1 (one latent vector per "
        "token and layer, its width as head_dim), not " +
        std::to_string(kv_heads) + ": " + ToString());
  }
  // Multiply step by step so a hostile layout cannot overflow the product.
  uint64_t bytes = Planes();
  for (uint64_t factor : {uint64_t{layers}, uint64_t{kv_heads}, uint64_t{head_dim},
                          uint64_t{DTypeBytes(dtype)}, uint64_t{block_tokens}}) {
    if (bytes > kMaxBlockBytes / factor) {
      return InvalidArgumentError("block of " + ToString() + " exceeds the 1 GiB block limit");
    }
    bytes *= factor;
  }
  if (bytes + ScaleBytes() > kMaxBlockBytes) {
    return InvalidArgumentError("block of " + ToString() + " exceeds the 1 GiB block limit");
  }
  return Status::Ok();
}

std::string Layout::ToString() const {
  return "layers=" + std::to_string(layers) + " kv_heads=" + std::to_string(kv_heads) +
         " head_dim=" + std::to_string(head_dim) + " dtype=" + std::string(DTypeName(dtype)) +
         " block_tokens=" + std::to_string(block_tokens) +
         (kind == KvKind::kKeyValue ? "" : " kind=" + std::string(KvKindName(kind)));
}

}  // namespace kvtier

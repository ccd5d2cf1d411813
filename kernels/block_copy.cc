// Validation and CPU references of the block copies.
#include "kernels/block_copy.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/internal/copy_check.h"

namespace kvtier::kernels {
namespace {

Status CheckEntries(const int32_t* entries, uint32_t n, uint32_t bound, const char* name) {
  for (uint32_t i = 0; i < n; ++i) {
    if (entries[i] < 0 || static_cast<uint32_t>(entries[i]) >= bound) {
      return InvalidArgumentError(std::string(name) + "[" + std::to_string(i) +
                                  "] = " + std::to_string(entries[i]) + " out of range [0, " +
                                  std::to_string(bound) + ")");
    }
  }
  return Status();
}

// Everything a reference reads before it writes the first byte.
Status CheckPagedEntries(const PagedCopyParams& p) {
  KVTIER_RETURN_IF_ERROR(ValidatePagedCopy(p));
  KVTIER_RETURN_IF_ERROR(CheckEntries(p.slots, p.num_blocks, p.num_slots, "slots"));
  KVTIER_RETURN_IF_ERROR(
      CheckEntries(p.paged_blocks, p.num_blocks, p.paged_num_blocks, "paged_blocks"));
  if (p.num_blocks == 0) return Status();
  for (uint32_t l = 0; l < p.layout.layers; ++l) {
    if (p.k_layers[l] == nullptr || (p.layout.Planes() == 2 && p.v_layers[l] == nullptr)) {
      return InvalidArgumentError("k_layers/v_layers[" + std::to_string(l) + "] is null");
    }
  }
  return Status();
}

// Arena part (layer, kv) of slot `slot`, and block `block` of the paged
// tensor of (layer, kv); kv is 0 alone for a latent layout.
std::byte* ArenaPart(const PagedCopyParams& p, int32_t slot, uint32_t layer, uint32_t kv) {
  const uint64_t part = internal::PartBytes(p.layout);
  return static_cast<std::byte*>(p.arena) + static_cast<uint64_t>(slot) * p.slot_stride_bytes +
         (uint64_t{p.layout.Planes()} * layer + kv) * part;
}

std::byte* PagedPart(const PagedCopyParams& p, int32_t block, uint32_t layer, uint32_t kv) {
  void* base = kv == 0 ? p.k_layers[layer] : p.v_layers[layer];
  return static_cast<std::byte*>(base) +
         static_cast<uint64_t>(block) * internal::PartBytes(p.layout);
}

template <bool kGather>
Status PagedCopyReference(const PagedCopyParams& p) {
  KVTIER_RETURN_IF_ERROR(CheckPagedEntries(p));
  const uint64_t part = internal::PartBytes(p.layout);
  for (uint32_t i = 0; i < p.num_blocks; ++i) {
    for (uint32_t layer = 0; layer < p.layout.layers; ++layer) {
      for (uint32_t kv = 0; kv < p.layout.Planes(); ++kv) {
        std::byte* arena = ArenaPart(p, p.slots[i], layer, kv);
        std::byte* paged = PagedPart(p, p.paged_blocks[i], layer, kv);
        if constexpr (kGather) {
          std::memcpy(paged, arena, part);
        } else {
          std::memcpy(arena, paged, part);
        }
      }
    }
  }
  return Status();
}

}  // namespace

Status ValidatePagedCopy(const PagedCopyParams& p) {
  if (Status s = p.layout.Validate(); !s.ok()) return s.WithContext("paged copy layout");
  if (p.layout.layers > kMaxCopyLayers) {
    return InvalidArgumentError("paged copy of more than " + std::to_string(kMaxCopyLayers) +
                                " layers");
  }
  if (p.num_blocks == 0) return Status();
  if (p.num_slots == 0 || p.paged_num_blocks == 0) {
    return InvalidArgumentError("num_slots and paged_num_blocks must be positive");
  }
  if (p.slot_stride_bytes < p.layout.BlockBytes()) {
    return InvalidArgumentError("slot_stride_bytes (" + std::to_string(p.slot_stride_bytes) +
                                ") below the block size (" + std::to_string(p.layout.BlockBytes()) +
                                ")");
  }
  if (p.arena == nullptr || p.slots == nullptr || p.paged_blocks == nullptr ||
      p.k_layers == nullptr || (p.layout.Planes() == 2 && p.v_layers == nullptr)) {
    return InvalidArgumentError("paged copy with a null pointer");
  }
  return Status();
}

Status GatherBlocksReference(const PagedCopyParams& params) {
  return PagedCopyReference<true>(params);
}

Status ScatterBlocksReference(const PagedCopyParams& params) {
  return PagedCopyReference<false>(params);
}

namespace internal {

Status CheckSlotCopy(const SlotCopyParams& p) {
  if (p.count == 0) return Status();
  if (p.bytes_per_slot == 0 || p.bytes_per_slot > p.src_stride_bytes ||
      p.bytes_per_slot > p.dst_stride_bytes) {
    return InvalidArgumentError("bytes_per_slot (" + std::to_string(p.bytes_per_slot) +
                                ") must be positive and at most both strides");
  }
  if (p.src == nullptr || p.dst == nullptr || p.src_slots == nullptr || p.dst_slots == nullptr) {
    return InvalidArgumentError("slot copy with a null pointer");
  }
  KVTIER_RETURN_IF_ERROR(CheckEntries(p.src_slots, p.count, p.src_num_slots, "src_slots"));
  return CheckEntries(p.dst_slots, p.count, p.dst_num_slots, "dst_slots");
}

}  // namespace internal

Status CopySlotsReference(const SlotCopyParams& p) {
  KVTIER_RETURN_IF_ERROR(internal::CheckSlotCopy(p));
  for (uint32_t i = 0; i < p.count; ++i) {
    std::memcpy(
        static_cast<std::byte*>(p.dst) + static_cast<uint64_t>(p.dst_slots[i]) * p.dst_stride_bytes,
        static_cast<const std::byte*>(p.src) +
            static_cast<uint64_t>(p.src_slots[i]) * p.src_stride_bytes,
        p.bytes_per_slot);
  }
  return Status();
}

}  // namespace kvtier::kernels

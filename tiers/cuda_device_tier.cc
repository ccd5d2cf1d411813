// The device tier on a real GPU (tier.h: NewCudaDeviceTier): a CudaArena cut
// into slots by a SlabAllocator, like the host arena. Its memory is not
// host-addressable (HostView is empty): the engine moves blocks through
// Read/Write, and promotions into it run on the engine's copy pool
// (copies_async). Workers reach the blocks in place through the arena's IPC
// handle and the slot offsets ACQUIRE returns.
#include <cstdio>
#include <string>
#include <utility>

#include "common/units.h"
#include "tiers/internal/cuda_runtime.h"
#include "tiers/internal/slab_allocator.h"
#include "tiers/internal/slab_tier.h"
#include "tiers/tier.h"

namespace kvtier::tiers {
namespace {

using internal::CudaArena;
using internal::SlabAllocator;

class CudaDeviceTier final : public internal::SlabTier {
 public:
  CudaDeviceTier(std::unique_ptr<CudaArena> arena, SlabAllocator allocator, uint64_t slab_bytes)
      : SlabTier(std::move(allocator)), arena_(std::move(arena)), slab_bytes_(slab_bytes) {}

  TierKind kind() const override { return TierKind::kDevice; }
  std::string description() const override {
    const internal::CudaDeviceInfo& d = arena_->device();
    return "device: GPU " + std::to_string(d.ordinal) + " " + d.name + " (sm_" +
           std::to_string(d.compute_major) + std::to_string(d.compute_minor) +
           "), cudaMalloc arena " + FormatBytes(allocator_.capacity_bytes()) + ", " +
           FormatBytes(slab_bytes_) + " slabs, CUDA IPC";
  }

  // Called from the engine's thread (demotions, inline moves) and from its
  // copy pool (promotions); the slot is pinned or private to the caller
  // either way, and the allocator is only read.
  Status Read(SlotId slot, std::span<std::byte> dst) override {
    KVTIER_RETURN_IF_ERROR(CheckSlot(slot, dst.size(), "GPU read"));
    return arena_->CopyOut(SlotOffset(slot), dst);
  }
  Status Write(SlotId slot, std::span<const std::byte> src) override {
    KVTIER_RETURN_IF_ERROR(CheckSlot(slot, src.size(), "GPU write"));
    return arena_->CopyIn(SlotOffset(slot), src);
  }
  std::span<std::byte> HostView(SlotId, uint64_t) override { return {}; }
  uint64_t arena_bytes() const override { return arena_->bytes(); }

  bool copies_async() const override { return true; }
  std::span<const std::byte> ipc_handle() const override { return arena_->ipc_handle(); }
  int device_ordinal() const override { return arena_->ordinal(); }

 private:
  std::unique_ptr<CudaArena> arena_;
  uint64_t slab_bytes_;
};

}  // namespace

Result<std::unique_ptr<Tier>> NewCudaDeviceTier(const CudaTierOptions& options) {
  if (options.capacity_bytes == 0 || options.capacity_bytes > SlabAllocator::kMaxArenaBytes) {
    return InvalidArgumentError("GPU tier capacity must be > 0 and at most 8 TiB");
  }
  const uint64_t bytes = AlignUp(options.capacity_bytes, kSlotPageBytes);
  KVTIER_ASSIGN_OR_RETURN(SlabAllocator allocator,
                          SlabAllocator::Create(bytes, options.slab_bytes));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<CudaArena> arena,
                          CudaArena::Create(options.device, bytes));
  return std::unique_ptr<Tier>(
      new CudaDeviceTier(std::move(arena), std::move(allocator), options.slab_bytes));
}

std::string DescribeGpus() {
  auto devices = internal::CudaDevices();
  if (!devices) return std::string(devices.status().message());
  std::string out = std::to_string(devices->size()) + (devices->size() == 1 ? " GPU: " : " GPUs: ");
  for (size_t i = 0; i < devices->size(); ++i) {
    const internal::CudaDeviceInfo& d = (*devices)[i];
    out += (i ? ", " : "") + std::to_string(d.ordinal) + " " + d.name + " (sm_" +
           std::to_string(d.compute_major) + std::to_string(d.compute_minor) + ", " +
           FormatBytes(d.total_bytes) + ")";
  }
  return out;
}

}  // namespace kvtier::tiers

// What the tiers need of the CUDA runtime, behind plain C++ so that the rest
// of tiers/ builds and runs without CUDA. Built against the CUDA runtime
// (statically: kvtierd then needs no libcudart at run time, only the driver
// where a GPU is) when KVTIER_HAS_CUDA; otherwise every call answers
// Unavailable. On a machine without a GPU or driver the runtime answers
// errors too (cudaErrorInsufficientDriver, not cudaErrorNoDevice): any
// error reads as "no GPU".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/status.h"

namespace kvtier::tiers::internal {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  uint64_t total_bytes = 0;
  int compute_major = 0, compute_minor = 0;
};

// True when this build carries the CUDA runtime.
bool CudaCompiledIn();
// The GPUs the runtime sees; Unavailable (with the runtime's reason) when
// none, when the driver is missing, or without CUDA compiled in.
Result<std::vector<CudaDeviceInfo>> CudaDevices();

// Page-locks host memory for DMA (cudaHostRegister, portable), so copies
// between it and a GPU run at the bus's speed without a staging copy.
Status CudaHostRegister(void* base, size_t bytes);
void CudaHostUnregister(void* base);

// Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// One cudaMalloc'd arena on one GPU, with an IPC handle that lets another
// process map it, and two streams of its own (one per direction) for the
// copies. Copy calls block their caller until the copy is done; the engine
// makes promotions from its copy pool, not from its own thread (see
// CacheEngine). Thread-safety: copies may run from several threads at once;
// those in one direction queue on that direction's stream, as the GPU's copy
// engine would take them anyway.
class CudaArena {
 public:
  // Unavailable when there is no such GPU; ResourceExhausted when it has
  // not `bytes` free.
  static Result<std::unique_ptr<CudaArena>> Create(int ordinal, uint64_t bytes);
  ~CudaArena();
  CudaArena(const CudaArena&) = delete;
  CudaArena& operator=(const CudaArena&) = delete;

  int ordinal() const { return ordinal_; }
  uint64_t bytes() const { return bytes_; }
  const CudaDeviceInfo& device() const { return device_; }
  const std::array<std::byte, kCudaIpcHandleBytes>& ipc_handle() const { return ipc_handle_; }

  // Host -> arena[offset, offset + src.size()) and back. `host` is best
  // page-locked (CudaHostRegister); pageable memory works, slower.
  Status CopyIn(uint64_t offset, std::span<const std::byte> host);
  Status CopyOut(uint64_t offset, std::span<std::byte> host);

 private:
  struct Impl;
  CudaArena() = default;
  int ordinal_ = 0;
  uint64_t bytes_ = 0;
  CudaDeviceInfo device_;
  std::array<std::byte, kCudaIpcHandleBytes> ipc_handle_{};
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::tiers::internal

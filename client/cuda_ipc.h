// Opening kvtierd's GPU arena in a worker: header-only, so the client
// library itself needs no CUDA; include it where the CUDA runtime is (the
// worker's own build) and link the worker's CUDA runtime as usual.
//
//   auto arena = kvtier::client::DeviceArena::Open(*client);   // once
//   auto lease = client->Acquire(keys, WireTier::kDevice);     // promotes to the GPU
//   auto table = lease->BlockTable();                          // page indices
//   // kernels: K/V of block i at arena->base() + table[i] * 4096
//
// The arena stays mapped until the DeviceArena goes; the bytes of a block
// are valid while its lease is held (the daemon may move it afterwards).
// cudaIpcOpenMemHandle cannot open an arena in the process that made it,
// so this is for workers, not for kvtierd.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>

#include "client/client.h"

namespace kvtier::client {

class DeviceArena {
 public:
  // FailedPrecondition when the daemon's device tier is not a GPU;
  // Unavailable when CUDA cannot open the handle (another node's GPU, no
  // peer access, no driver).
  static Result<std::unique_ptr<DeviceArena>> Open(const Client& client) {
    if (client.device_ordinal() < 0) {
      return FailedPreconditionError("kvtierd at " + client.options().socket_path +
                                     " has no GPU device tier to open");
    }
    cudaIpcMemHandle_t handle{};
    static_assert(sizeof(handle) == protocol::kCudaIpcHandleBytes);
    std::memcpy(&handle, client.device_ipc_handle().data(), sizeof(handle));
    int previous = 0;
    cudaGetDevice(&previous);
    if (cudaError_t err = cudaSetDevice(client.device_ordinal()); err != cudaSuccess) {
      return Error("cudaSetDevice", err);
    }
    void* base = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
    cudaSetDevice(previous);
    if (err != cudaSuccess) return Error("cudaIpcOpenMemHandle of kvtierd's GPU arena", err);
    return std::unique_ptr<DeviceArena>(
        new DeviceArena(base, client.device_arena_bytes(), client.device_ordinal()));
  }
  ~DeviceArena() { cudaIpcCloseMemHandle(base_); }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Device pointer of the arena (on GPU ordinal()); a block at offset o
  // (WriteHandle/ReadLease::offset) is at base() + o.
  std::byte* base() const { return static_cast<std::byte*>(base_); }
  uint64_t bytes() const { return bytes_; }
  int ordinal() const { return ordinal_; }

 private:
  DeviceArena(void* base, uint64_t bytes, int ordinal)
      : base_(base), bytes_(bytes), ordinal_(ordinal) {}
  static Status Error(const char* what, cudaError_t err) {
    cudaGetLastError();
    return UnavailableError(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                            cudaGetErrorString(err) + ")");
  }

  void* base_;
  uint64_t bytes_;
  int ordinal_;
};

}  // namespace kvtier::client

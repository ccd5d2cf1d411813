#include "tiers/internal/cuda_runtime.h"

#include <cstring>
#include <utility>

#if KVTIER_TIERS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvtier::tiers::internal {

#if KVTIER_TIERS_CUDA

namespace {

Status CudaError(const char* what, cudaError_t err) {
  const std::string msg =
      std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) return ResourceExhaustedError(msg);
  return UnavailableError(msg);
}

}  // namespace

struct CudaArena::Impl {
  void* base = nullptr;
  cudaStream_t to_device = nullptr;
  cudaStream_t to_host = nullptr;
};

bool CudaCompiledIn() { return true; }

Result<std::vector<CudaDeviceInfo>> CudaDevices() {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();  // clear it, so later calls do not report it again
    return CudaError("no usable GPU: cudaGetDeviceCount", err);
  }
  if (count == 0) return UnavailableError("no usable GPU: the CUDA runtime sees none");
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaError_t err = cudaGetDeviceProperties(&prop, i); err != cudaSuccess) {
      return CudaError("cudaGetDeviceProperties", err);
    }
    out.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return out;
}

Status CudaHostRegister(void* base, size_t bytes) {
  if (cudaError_t err = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
      err != cudaSuccess) {
    cudaGetLastError();
    return CudaError("cudaHostRegister of the host arena", err);
  }
  return Status::Ok();
}

void CudaHostUnregister(void* base) {
  if (cudaHostUnregister(base) != cudaSuccess) cudaGetLastError();
}

Result<std::unique_ptr<CudaArena>> CudaArena::Create(int ordinal, uint64_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(const std::vector<CudaDeviceInfo> devices, CudaDevices());
  if (ordinal < 0 || ordinal >= static_cast<int>(devices.size())) {
    return UnavailableError("no GPU " + std::to_string(ordinal) + " (" +
                            std::to_string(devices.size()) + " found)");
  }
  std::unique_ptr<CudaArena> arena(new CudaArena());
  arena->ordinal_ = ordinal;
  arena->bytes_ = bytes;
  arena->device_ = devices[static_cast<size_t>(ordinal)];
  arena->impl_ = std::make_unique<Impl>();
  Impl& impl = *arena->impl_;
  if (cudaError_t err = cudaSetDevice(ordinal); err != cudaSuccess) {
    return CudaError("cudaSetDevice", err);
  }
  if (cudaError_t err = cudaMalloc(&impl.base, bytes); err != cudaSuccess) {
    cudaGetLastError();
    return CudaError(("cudaMalloc of a " + std::to_string(bytes) + "-byte arena").c_str(), err);
  }
  for (cudaStream_t* s : {&impl.to_device, &impl.to_host}) {
    if (cudaError_t err = cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); err != cudaSuccess) {
      return CudaError("cudaStreamCreate", err);
    }
  }
  cudaIpcMemHandle_t handle{};
  if (cudaError_t err = cudaIpcGetMemHandle(&handle, impl.base); err != cudaSuccess) {
    return CudaError("cudaIpcGetMemHandle", err);
  }
  static_assert(sizeof(handle) == kCudaIpcHandleBytes);
  std::memcpy(arena->ipc_handle_.data(), &handle, sizeof(handle));
  return arena;
}

CudaArena::~CudaArena() {
  if (!impl_) return;
  cudaSetDevice(ordinal_);
  if (impl_->to_device != nullptr) cudaStreamDestroy(impl_->to_device);
  if (impl_->to_host != nullptr) cudaStreamDestroy(impl_->to_host);
  if (impl_->base != nullptr) cudaFree(impl_->base);
}

Status CudaArena::CopyIn(uint64_t offset, std::span<const std::byte> host) {
  if (offset > bytes_ || host.size() > bytes_ - offset) {
    return InvalidArgumentError("copy past the end of the GPU arena");
  }
  cudaSetDevice(ordinal_);
  std::byte* dst = static_cast<std::byte*>(impl_->base) + offset;
  if (cudaError_t err =
          cudaMemcpyAsync(dst, host.data(), host.size(), cudaMemcpyHostToDevice, impl_->to_device);
      err != cudaSuccess) {
    return CudaError("cudaMemcpyAsync to the GPU", err);
  }
  if (cudaError_t err = cudaStreamSynchronize(impl_->to_device); err != cudaSuccess) {
    return CudaError("copy to the GPU", err);
  }
  return Status::Ok();
}

Status CudaArena::CopyOut(uint64_t offset, std::span<std::byte> host) {
  if (offset > bytes_ || host.size() > bytes_ - offset) {
    return InvalidArgumentError("copy past the end of the GPU arena");
  }
  cudaSetDevice(ordinal_);
  const std::byte* src = static_cast<const std::byte*>(impl_->base) + offset;
  if (cudaError_t err =
          cudaMemcpyAsync(host.data(), src, host.size(), cudaMemcpyDeviceToHost, impl_->to_host);
      err != cudaSuccess) {
    return CudaError("cudaMemcpyAsync from the GPU", err);
  }
  if (cudaError_t err = cudaStreamSynchronize(impl_->to_host); err != cudaSuccess) {
    return CudaError("copy from the GPU", err);
  }
  return Status::Ok();
}

#else  // !KVTIER_TIERS_CUDA

struct CudaArena::Impl {};

bool CudaCompiledIn() { return false; }

Result<std::vector<CudaDeviceInfo>> CudaDevices() {
  return UnavailableError("no GPU support: kvtier was built without CUDA (nvcc not found)");
}
Status CudaHostRegister(void*, size_t) { return CudaDevices().status(); }
void CudaHostUnregister(void*) {}
Result<std::unique_ptr<CudaArena>> CudaArena::Create(int, uint64_t) {
  return CudaDevices().status();
}
CudaArena::~CudaArena() = default;
Status CudaArena::CopyIn(uint64_t, std::span<const std::byte>) { return CudaDevices().status(); }
Status CudaArena::CopyOut(uint64_t, std::span<std::byte>) { return CudaDevices().status(); }

#endif

}  // namespace kvtier::tiers::internal

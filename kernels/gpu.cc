// Whether a GPU can run the kernels. Built in every configuration; with CUDA
// (KVTIER_KERNELS_CUDA) it asks the runtime once.
#include <string>

#include "kernels/kernels.h"

#if KVTIER_KERNELS_CUDA
#include <cuda_runtime_api.h>

#include "kernels/internal/cuda_status.h"
#endif

namespace kvtier::kernels {
namespace {

struct Probe {
  bool available = false;
  std::string description;
};

Probe RunProbe() {
#if KVTIER_KERNELS_CUDA
  int count = 0;
  if (Status s = internal::CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount"); !s.ok()) {
    return Probe{false, s.ToString()};
  }
  if (count == 0) return Probe{false, "no CUDA device"};
  int device = 0;
  cudaDeviceProp prop{};
  if (Status s = internal::CudaStatus(cudaGetDevice(&device), "cudaGetDevice"); !s.ok()) {
    return Probe{false, s.ToString()};
  }
  if (Status s =
          internal::CudaStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      !s.ok()) {
    return Probe{false, s.ToString()};
  }
  return Probe{true, std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                         std::to_string(prop.minor) + ", " +
                         std::to_string(prop.multiProcessorCount) + " SMs)"};
#else
  return Probe{false, "built without CUDA"};
#endif
}

const Probe& CachedProbe() {
  static const Probe probe = RunProbe();
  return probe;
}

}  // namespace

bool BuiltWithCuda() { return KVTIER_KERNELS_CUDA != 0; }

bool GpuAvailable() { return CachedProbe().available; }

std::string GpuDescription() { return CachedProbe().description; }

}  // namespace kvtier::kernels

// cudaError_t -> Status, for the files built only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::kernels::internal {

// OK for cudaSuccess. Errors that mean "no usable device or driver" are
// Unavailable; anything else (a bad launch, a bad pointer) is Internal.
inline Status CudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return Status();
  std::string message(what);
  message += ": ";
  message += cudaGetErrorName(error);
  message += " (";
  message += cudaGetErrorString(error);
  message += ")";
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
      return UnavailableError(message);
    default:
      return InternalError(message);
  }
}

}  // namespace kvtier::kernels::internal

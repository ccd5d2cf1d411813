// What nvcc compiled the kernels for. __CUDA_ARCH_LIST__ (nvcc 11.5 and
// newer) is defined in the host pass too: the virtual architectures of every
// -gencode of this translation unit, the same CMAKE_CUDA_ARCHITECTURES as the
// kernels' own files.
#include <algorithm>
#include <vector>

#include "kernels/kernels.h"

namespace kvtier::kernels {

std::vector<int> CompiledCudaArchitectures() {
  std::vector<int> archs = {__CUDA_ARCH_LIST__};
  for (int& a : archs) a /= 10;  // 900 -> 90
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());
  return archs;
}

}  // namespace kvtier::kernels

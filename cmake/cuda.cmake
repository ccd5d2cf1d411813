# CUDA is optional. With KVTIER_CUDA=AUTO the CUDA parts build whenever nvcc
# is found (no GPU is needed to build them); without it everything else builds.
set(KVTIER_HAS_CUDA OFF)
if(NOT KVTIER_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    if(NOT CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "52")
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    # CMake 3.25 does not know nvcc's C++20 dialect; teach it (3.26 does).
    if(CMAKE_VERSION VERSION_LESS 3.26)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA_STANDARD_COMPUTED_DEFAULT 17)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(KVTIER_HAS_CUDA ON)
    # CUDA-language targets (kernels/) link the shared libcudart through
    # CUDA::cudart, not CMake's default static copy beside it. tiers/ (the
    # daemon's GPU tier) links CUDA::cudart_static itself, so kvtierd needs
    # no libcudart at run time; no program links both.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    # Warnings for .cu files: nvcc's own, and the host compiler's through
    # -Xcompiler (-Wpedantic and -Wold-style-cast do not survive nvcc).
    set(KVTIER_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra)
    if(KVTIER_WERROR)
      list(APPEND KVTIER_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Werror)
    endif()
  elseif(KVTIER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVTIER_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
message(STATUS "kvtier: CUDA parts ${KVTIER_HAS_CUDA}")

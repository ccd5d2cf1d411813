# The GPUs kvtier's kernels are compiled for when the user does not choose:
# machine code for Ampere (8.0; it runs on 8.6 and 8.9 too) and Hopper (9.0),
# and for Blackwell (10.0, 12.0) where the installed nvcc knows them, plus the
# PTX of 8.0, which the driver JIT-compiles on any newer GPU. bf16 arithmetic
# is native from 8.0 on, so nothing older is built.
function(kvtier_default_cuda_architectures out)
  execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch
    OUTPUT_VARIABLE known ERROR_QUIET RESULT_VARIABLE rc)
  set(archs 80 90-real)
  foreach(a 100 120)
    if(rc EQUAL 0 AND known MATCHES "compute_${a}[\r\n]")
      list(APPEND archs ${a}-real)
    endif()
  endforeach()
  set(${out} ${archs} PARENT_SCOPE)
endfunction()

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
    # Unless the user chose (-DCMAKE_CUDA_ARCHITECTURES, or CUDAARCHS in the
    # environment), set ours before enable_language(CUDA), which would
    # otherwise cache nvcc's own default (7.5 for CUDA 13, 5.2 before).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
      kvtier_default_cuda_architectures(_kvtier_default_archs)
      set(CMAKE_CUDA_ARCHITECTURES "${_kvtier_default_archs}" CACHE STRING
        "GPU architectures the kernels are compiled for (kvtier's default: cmake/cuda.cmake)")
    endif()
    enable_language(CUDA)
    # Debian 12's CMake 3.25.1 FindCUDAToolkit stops with "set_property could
    # not find TARGET CUDA::nvToolsExt" when the toolkit has no nvToolsExt
    # (CUDA 12.9 and 13 ship only the header-only nvtx3) and the project
    # requires 3.25 or newer: it then marks the missing target deprecated
    # (fixed in 3.25.2). The version is read only for that, so the module is
    # shown an older one.
    set(_kvtier_min_version ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${_kvtier_min_version})
    # A build that would run on Hopper (H100/H200) only as JIT-compiled code
    # of an older GPU is a mistake: say so now, not on the GPU.
    set(_kvtier_archs "${CMAKE_CUDA_ARCHITECTURES}")
    list(TRANSFORM _kvtier_archs REPLACE "-(real|virtual)$" "")
    if(NOT "90" IN_LIST _kvtier_archs AND NOT "90a" IN_LIST _kvtier_archs
       AND NOT CMAKE_CUDA_ARCHITECTURES MATCHES "^all")
      message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES} leaves out "
        "compute capability 9.0 (H100/H200); add 90, or build without CUDA (-DKVTIER_CUDA=OFF)")
    endif()
    message(STATUS "kvtier: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")
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

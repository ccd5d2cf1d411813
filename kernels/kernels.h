// What the kernels module shares between its two halves (DESIGN.md §6):
// whether a GPU can run them, the stream type the launchers take, and the
// host's fp16/bf16 converters.
//
// Every GPU entry point of kernels/ has a CPU reference taking the identical
// parameter struct (STYLE.md 13). Without CUDA at build time, or without a
// usable device at run time, the GPU entry points return Unavailable and
// GpuAvailable() says false; the references always work.
//
// Thread-safety: every function here may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/half.h"

namespace kvtier::kernels {

// A cudaStream_t, passed opaquely so that callers need no CUDA header.
// nullptr is the legacy default stream.
using Stream = void*;

// True when kvtier was built with CUDA (KVTIER_HAS_CUDA).
bool BuiltWithCuda();

// True when BuiltWithCuda() and cudaGetDeviceCount reports at least one
// device. Probed once, then cached: a driver that appears later is not seen.
// Any CUDA error counts as "no GPU" (a machine without a driver answers
// cudaErrorInsufficientDriver, not cudaErrorNoDevice).
bool GpuAvailable();

// One line for logs: the device's name, or why there is none
// ("built without CUDA", "cudaGetDeviceCount: CUDA driver version is ...").
std::string GpuDescription();

// The GPU architectures this build's kernels were compiled for, as compute
// capability x 10 (80 = sm_80), ascending, as nvcc saw them
// (__CUDA_ARCH_LIST__); empty without CUDA. A GPU of an architecture not
// listed runs the kernels only through the driver's JIT from PTX, if at all.
std::vector<int> CompiledCudaArchitectures();

// IEEE binary16 and bfloat16 <-> binary32, bit-exact on the host
// (common/half.h), here too for the kernels' callers.
using kvtier::BFloat16ToFloat;
using kvtier::FloatToBFloat16;
using kvtier::FloatToHalf;
using kvtier::HalfToFloat;

}  // namespace kvtier::kernels

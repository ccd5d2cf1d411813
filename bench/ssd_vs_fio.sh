#!/usr/bin/env bash
# The SSD storage layer against the disk's raw bandwidth, in one run:
#   1. fio: sequential direct-I/O write then read of a 1 GiB file, bs=2M and
#      bs=256k, iodepth 1 and 8 (libaio): the raw bandwidth of the disk;
#   2. bench_ssd_store: the same block sizes and depths through SsdStore and
#      through RocksDB blob files, on the same filesystem, then a summary with
#      the ratios to raw (goal: SsdStore >= 0.8x raw, reads and writes).
#
# Usage: bench/ssd_vs_fio.sh [build-dir] [parent-dir]
#   build-dir   configured build tree (default: build; Release for numbers)
#   parent-dir  where the data goes (default: /var/tmp). Use a real disk:
#               /tmp may be tmpfs, which measures memory, not the disk.
# MIN_TIME (default 0.2), REPETITIONS (default 3; the summary uses the median)
# and BATCH_MIB (default 512) trade time for stability.
# About 1.5 minutes; at most ~1.1 GiB on disk at a time; all removed at exit.
set -euo pipefail

build_dir="${1:-build}"
parent="${2:-/var/tmp}"
command -v fio >/dev/null || {
  echo "ssd_vs_fio.sh: fio not found (scripts/install-deps.sh installs it)" >&2
  exit 1
}

cmake --build "$build_dir" --target bench_ssd_store

dir=$(mktemp -d "$parent/kvtier_ssd_vs_fio.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "=== data on:"
df -hT "$dir" | tail -n 1

# fio prints bandwidth in KiB/s (terse v3: field 7 read, field 48 write);
# the results file holds bytes/s: "<write|read> <bs> <iodepth> <bytes/s>".
results="$dir/fio.txt"
echo "=== fio (raw sequential direct I/O, 1 GiB, libaio)"
for bs in 2M 256k; do
  for depth in 1 8; do
    for rw in write read; do
      line=$(fio --name=raw --filename="$dir/fio.dat" --rw="$rw" --bs="$bs" --size=1G \
        --direct=1 --ioengine=libaio --iodepth="$depth" --output-format=terse --terse-version=3)
      kib=$(echo "$line" | awk -F';' -v rw="$rw" '{print (rw == "read") ? $7 : $48}')
      echo "$rw $bs $depth $((kib * 1024))" | tee -a "$results"
    done
  done
done
rm -f "$dir/fio.dat"

echo "=== bench_ssd_store"
"$build_dir/bench/bench_ssd_store" --dir="$dir" --fio="$results" \
  --batch_mib="${BATCH_MIB:-512}" --benchmark_min_time="${MIN_TIME:-0.2}" \
  --benchmark_repetitions="${REPETITIONS:-3}" --benchmark_report_aggregates_only=true

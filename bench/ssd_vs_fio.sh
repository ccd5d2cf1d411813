#!/usr/bin/env bash
# The SSD storage layer against the disk's raw bandwidth, in one run:
#   1. bench_ssd_store's Google Benchmark part for RocksDB blob files only
#      (the alternative SsdStore was chosen over; the ssd/blob ratio);
#   2. SsdStore interleaved with fio: for each op (fill, fill into holes,
#      write, read), bs (2M, 256k) and depth (1, 8), ROUNDS rounds of one fio
#      run over SLICE_MIB MiB, one SsdStore batch of the same bytes and the
#      same I/O done raw on the store's own file, in rotating order, so the
#      disk's drift (large on a VM) lands on all alike. fio does what the
#      store does: synchronous direct I/O (psync), numjobs = depth, job k on
#      blocks k, k + depth, ... as the store's threads take them, each thread
#      writing from one buffer of its own as fio's jobs do (SOURCES=32
#      spreads the payloads over 32 buffers instead). Goal: SsdStore >= 0.8x
#      fio, reads and writes.
#
# Usage: bench/ssd_vs_fio.sh [build-dir] [parent-dir]
#   build-dir   configured build tree (default: build; Release for numbers)
#   parent-dir  where the data goes (default: /var/tmp). Use a real disk:
#               /tmp may be tmpfs, which measures memory, not the disk.
# ROUNDS (default 6), SLICE_MIB (default 256), and for the blob part
# MIN_TIME (default 0.2), REPETITIONS (default 1) and BATCH_MIB (default 256)
# trade time for stability; BENCH_FILTER (default blob_) picks the Google
# Benchmark part (e.g. "ssd_|blob_" for both, "none" for neither); ONLY picks
# interleaved cases as op:bs:depth[,...] (e.g. "fill:256k:1", "*:2M:*");
# SEAL=1 adds the store with block keys (every block sealed with AES-256-GCM)
# as a fourth leg of each round, and its table (sealed ÷ the store).
# About 2.5 minutes; at most ~0.6 GiB on disk at a time; all removed at exit.
set -euo pipefail

build_dir="${1:-build}"
parent="${2:-/var/tmp}"
fio_bin=$(command -v fio) || {
  echo "ssd_vs_fio.sh: fio not found (scripts/install-deps.sh installs it)" >&2
  exit 1
}

cmake --build "$build_dir" --target bench_ssd_store

dir=$(mktemp -d "$parent/kvtier_ssd_vs_fio.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "=== data on:"
df -hT "$dir" | tail -n 1

"$build_dir/bench/bench_ssd_store" --dir="$dir" --fio_bin="$fio_bin" \
  --rounds="${ROUNDS:-6}" --slice_mib="${SLICE_MIB:-256}" --only="${ONLY:-}" \
  --sources="${SOURCES:-0}" ${SEAL:+--seal} \
  --batch_mib="${BATCH_MIB:-256}" --benchmark_filter="${BENCH_FILTER:-blob_}" \
  --benchmark_min_time="${MIN_TIME:-0.2}" --benchmark_repetitions="${REPETITIONS:-1}" \
  --benchmark_report_aggregates_only=true

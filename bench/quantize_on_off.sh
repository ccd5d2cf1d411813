#!/usr/bin/env bash
# Quantize on demote against off on the SSD tier (bench_quantize_ssd): blocks
# per second demoted and promoted, twice:
#   1. as the disk is;
#   2. disk-bound: the benchmark in a blkio cgroup that throttles the data
#      disk to THROTTLE_MBPS (default 500 MB/s, a SATA SSD's speed) for reads
#      and writes, so that the disk, not the CPU, is what both modes wait
#      on, as on a server whose cores outrun its SSD. Needs root and the
#      cgroup v1 blkio controller (or v2 with io.max); skipped, with a note,
#      where neither is there.
# Goal: >= 1.6x on the disk-bound load.
#
# Usage: bench/quantize_on_off.sh [build-dir] [parent-dir]
#   build-dir   configured build tree (default: build; Release for numbers)
#   parent-dir  where the data goes (default /var/tmp: a real disk)
# BLOCKS (default 512: 1 GiB of fp16 per round), ROUNDS (default 5).
set -euo pipefail

build_dir="${1:-build}"
parent="${2:-/var/tmp}"
blocks="${BLOCKS:-512}"
rounds="${ROUNDS:-5}"
mbps="${THROTTLE_MBPS:-500}"
cmake --build "$build_dir" --target bench_quantize_ssd
bench=("$build_dir/bench/bench_quantize_ssd" --dir="$parent" --blocks="$blocks" --rounds="$rounds")

echo "=== 1. the disk as it is ($(df -hT "$parent" | tail -n 1 | awk '{print $1, $2}'))"
"${bench[@]}"

echo
echo "=== 2. disk-bound: the disk throttled to $mbps MB/s"
dev=$(lsblk -no PKNAME "$(df --output=source "$parent" | tail -n 1)" 2>/dev/null | head -n 1)
[ -n "$dev" ] || dev=$(basename "$(df --output=source "$parent" | tail -n 1)")
majmin=$(cat "/sys/class/block/$dev/dev" 2>/dev/null || true)
bps=$((mbps * 1000000))
if [ -z "$majmin" ] || [ "$(id -u)" != 0 ]; then
  echo "skipped: needs root and the disk under $parent (found '${dev:-}')"
  exit 0
fi
if [ -d /sys/fs/cgroup/blkio ]; then
  cg=/sys/fs/cgroup/blkio/kvtier_bench_quantize
  mkdir -p "$cg"
  echo "$majmin $bps" >"$cg/blkio.throttle.read_bps_device"
  echo "$majmin $bps" >"$cg/blkio.throttle.write_bps_device"
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw io /sys/fs/cgroup/cgroup.controllers; then
  cg=/sys/fs/cgroup/kvtier_bench_quantize
  mkdir -p "$cg"
  echo "+io" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
  echo "$majmin rbps=$bps wbps=$bps" >"$cg/io.max"
else
  echo "skipped: no blkio (cgroup v1) or io (cgroup v2) controller"
  exit 0
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
bash -c 'echo $$ >"$1/cgroup.procs" 2>/dev/null || echo $$ >"$1/tasks"; shift; exec "$@"' _ "$cg" \
  "${bench[@]}"

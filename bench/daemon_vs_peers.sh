#!/usr/bin/env bash
# kvtierd against its peers, in one run on this machine:
#   control plane: LOOKUP of 1 and 64 keys, 1 and 50 clients, beside
#     redis-benchmark GET on a Unix socket at the same concurrency;
#   data plane: 2 MiB blocks into the worker's buffer (acquire, copy,
#     release) beside memcpy of the same sizes, and beside Redis GET of
#     2 MiB values; inline GET through kvtierd's socket too.
#
# Usage: bench/daemon_vs_peers.sh [build-dir]   (default build-release;
# configured with -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_BENCH=ON)
# SECONDS_PER_RUN (default 3) trades time for stability. ~2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
secs=${SECONDS_PER_RUN:-3}
cmake --build "$build" --target kvtierd bench_control_plane bench_data_plane >/dev/null
command -v redis-server >/dev/null || { echo "redis-server missing: scripts/install-deps.sh" >&2; exit 1; }

dir=$(mktemp -d /tmp/kvtier-bench-XXXXXX)
cleanup() {
  [ -n "${kv_pid:-}" ] && kill "$kv_pid" 2>/dev/null || true
  [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

"$build/daemon/kvtierd" --socket "$dir/kvtierd.sock" --host-capacity 512MiB \
  2>"$dir/kvtierd.log" &
kv_pid=$!
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no \
  >"$dir/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
  [ -S "$dir/kvtierd.sock" ] && [ -S "$dir/redis.sock" ] && break
  sleep 0.1
done

json() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
# redis-benchmark --csv: "test","rps","avg","min","p50","p95","p99","max" (ms)
redis_field() { awk -F'","' -v t="$1" -v f="$2" '$1 == "\"" t { gsub(/"/, "", $f); print $f }'; }

echo "== control plane (ops/s; latency p50/p99 in us)"
printf '%-28s %12s %9s %9s %12s %8s\n' "run" "kvtierd" "p50" "p99" "redis GET" "ratio"
for clients in 1 50; do
  redis=$(redis-benchmark -s "$dir/redis.sock" -t get -c "$clients" -n $((clients * 40000)) \
    --csv 2>/dev/null)
  r_ops=$(echo "$redis" | redis_field GET 2)
  r_p50=$(echo "$redis" | redis_field GET 5)
  r_p99=$(echo "$redis" | redis_field GET 7)
  for keys in 1 64; do
    out=$("$build/bench/bench_control_plane" --socket "$dir/kvtierd.sock" --clients "$clients" \
      --keys "$keys" --seconds "$secs" --json)
    ops=$(echo "$out" | json ops_per_s)
    printf '%-28s %12.0f %9.1f %9.1f %12.0f %7.2fx\n' "LOOKUP $keys key(s), $clients client(s)" \
      "$ops" "$(echo "$out" | json p50_us)" "$(echo "$out" | json p99_us)" "$r_ops" \
      "$(echo "$ops / $r_ops" | bc -l)"
  done
  printf '%-28s %12s %9.1f %9.1f   (Redis latency, same run)\n' "redis GET, $clients client(s)" "" \
    "$(echo "$r_p50 * 1000" | bc -l)" "$(echo "$r_p99 * 1000" | bc -l)"
done

echo
echo "== data plane (2 MiB blocks, GB/s)"
redis=$(redis-benchmark -s "$dir/redis.sock" -t set,get -c 1 -n 2000 -d 2097152 --csv 2>/dev/null)
r_gbs=$(echo "$(echo "$redis" | redis_field GET 2) * 2097152 / 1000000000" | bc -l)
for batch in 1 8; do
  out=$("$build/bench/bench_data_plane" --socket "$dir/kvtierd.sock" --batch "$batch" \
    --seconds "$secs" --json)
  m=$(echo "$out" | json memcpy_gbs)
  z=$(echo "$out" | json acquire_copy_gbs)
  i=$(echo "$out" | json inline_get_gbs)
  printf '%d block(s)/op: memcpy %.2f | acquire+copy+release %.2f (%.2fx memcpy, %.1fx Redis GET) | inline GET %.2f (%.2fx Redis GET %.2f)\n' \
    "$batch" "$m" "$z" "$(echo "$z / $m" | bc -l)" "$(echo "$z / $r_gbs" | bc -l)" "$i" \
    "$(echo "$i / $r_gbs" | bc -l)" "$r_gbs"
done

#!/usr/bin/env bash
# How kvtier's costs grow (issue 32, "How cost grows"): two markdown tables
# on stdout, nothing else there (progress goes to stderr), for
# docs/performance.md (bench/report.sh pastes them).
#
#   Blocks, 10k / 100k / 1M / 10M: one kvtierd per point, its host tier
#     sized to hold exactly that many 4 KiB blocks (not reserved: only what
#     is written becomes resident, and the fill writes no block bytes),
#     filled through the C++ client, then LOOKUP and ACQUIRE of 64-key
#     windows spread over the whole index, the points' runs interleaved
#     (bench_scale_blocks); eviction's cost per block in the engine itself,
#     by CPU time (bench_scale_evict); warm restart from the SSD tier's
#     index with as many blocks (bench_restart).
#   Sessions, 1 / 10 / 100 / 1,000 clients: one kvtierd, each client a
#     thread with its own connection, LOOKUPs of a cached 16-key chain
#     (bench_scale_sessions).
#
# Usage: bench/scale.sh BUILD [--quick]
#   BUILD: a Release build directory (cmake -DCMAKE_BUILD_TYPE=Release).
#   --quick: 10k, 100k and 1M blocks only, shorter runs (~1 minute);
#   the full mode adds 10M blocks (~5 minutes, ~4 GiB of memory at most,
#   and ~1 GiB of RocksDB files under SCALE_DIR, default /var/tmp).
# Every latency is the median of 3 runs (RUNS), with the worst run beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/scale.sh BUILD [--quick]}
quick=0
[ "${2:-}" = "--quick" ] && quick=1
runs=${RUNS:-3}
if [ "$quick" = 1 ]; then
  points="10000 100000 1000000"
  ops=10000
  session_seconds=1
else
  points="10000 100000 1000000 10000000"
  ops=20000
  session_seconds=2
fi
clients="1 10 100 1000"

log() { echo "scale.sh: $*" >&2; }
cmake --build "$build" --target kvtierd bench_scale_blocks bench_scale_sessions \
  bench_scale_evict bench_restart >&2

dir=$(mktemp -d /tmp/kvtier-scale-XXXXXX)
restart_dir="${SCALE_DIR:-/var/tmp}/kvtier-scale-restart-$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir" "$restart_dir"
}
trap cleanup EXIT

# start_daemon NAME FLAGS...: kvtierd on $dir/NAME.sock; sets $started.
start_daemon() {
  local name=$1
  shift
  "$build/daemon/kvtierd" --socket "$dir/$name.sock" --device off --ssd-dir "" \
    --metrics-address "" "$@" 2>"$dir/$name.log" &
  started=$!
  pids+=("$started")
  for _ in $(seq 200); do
    [ -S "$dir/$name.sock" ] && return 0
    kill -0 "$started" 2>/dev/null || break
    sleep 0.05
  done
  log "kvtierd $name did not start:"
  cat "$dir/$name.log" >&2
  exit 1
}
stop_daemons() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

load_before=$(cut -d' ' -f1 /proc/loadavg)

log "blocks: filling one kvtierd per point ($points)"
point_args=()
for n in $points; do
  start_daemon "blocks-$n" --host-capacity $((n * 4096)) --no-reserve-memory
  point_args+=(--point "$n,$dir/blocks-$n.sock,$started")
done
"$build/bench/bench_scale_blocks" "${point_args[@]}" --ops "$ops" --runs "$runs" \
  >"$dir/blocks.txt"
stop_daemons

log "blocks: eviction in the engine"
"$build/bench/bench_scale_evict" --blocks "${points// /,}" --runs 5 >"$dir/evict.txt"
log "blocks: warm restart from the ssd index"
"$build/bench/bench_restart" --blocks "${points// /,}" --runs "$runs" --dir "$restart_dir" \
  >"$dir/restart.txt"

log "sessions: $clients clients"
start_daemon sessions --host-capacity 64MiB --no-reserve-memory
: >"$dir/sessions.txt"
for c in $clients; do
  "$build/bench/bench_scale_sessions" --socket "$dir/sessions.sock" --pid "$started" \
    --clients "$c" --seconds "$session_seconds" --runs "$runs" >>"$dir/sessions.txt"
done
alive=1
kill -0 "$started" 2>/dev/null || alive=0
stop_daemons
load_after=$(cut -d' ' -f1 /proc/loadavg)

# Restart lines to name=value: blocks, median s, worst s, re-index s.
sed -n 's/^restart with \([0-9]*\) blocks: \([0-9.]*\) s (worst \([0-9.]*\) s of [0-9]*; open [0-9.]* s, re-index \([0-9.]*\) s).*/blocks=\1 restart_s=\2 restart_worst_s=\3 reindex_s=\4/p' \
  "$dir/restart.txt" >"$dir/restart.kv"

awk -v cores="$(nproc)" -v load_before="$load_before" -v load_after="$load_after" \
  -v alive="$alive" '
function kv(line, into,   n, i, f, parts) {
  n = split(line, f, " ")
  for (i = 1; i <= n; ++i) { split(f[i], parts, "="); into[parts[1]] = parts[2] }
}
function count(n) {
  if (n >= 1000000) return (n / 1000000) "M"
  if (n >= 1000) return (n / 1000) "k"
  return n
}
function us(v, worst) { return sprintf("%.1f µs (worst %.1f)", v, worst) }
function verdict(ok) { return ok ? "holds" : "**does not hold**" }
FILENAME ~ /blocks.txt$/ { kv($0, b); n = b["blocks"]; order[++points] = n
  for (k in b) B[n, k] = b[k] }
FILENAME ~ /evict.txt$/ { kv($0, e); for (k in e) E[e["blocks"], k] = e[k] }
FILENAME ~ /restart.kv$/ { kv($0, r); for (k in r) R[r["blocks"], k] = r[k] }
FILENAME ~ /sessions.txt$/ { kv($0, s); c = s["clients"]; corder[++cpoints] = c
  for (k in s) S[c, k] = s[k] }
END {
  printf "_%d cores; load average %s before, %s after (what else ran on the machine)._\n\n", \
    cores, load_before, load_after
  print "| blocks | daemon RSS | memory / block: marginal (growth ÷ blocks) | index / block | fill | LOOKUP 64 keys p50 | LOOKUP p99 | ACQUIRE 64 keys p50 | ACQUIRE p99 | eviction / block | warm restart |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for (i = 1; i <= points; ++i) {
    n = order[i]
    printf "| %s | %.0f MiB | %.0f B (%.0f B) | %.0f B | %.2f s | %s | %s | %s | %s | %.0f ns (worst %.0f) | %.2f s (worst %.2f) |\n", \
      count(n), B[n, "rss_mib"], B[n, "marginal_bytes_per_block"], B[n, "anon_bytes_per_block"], \
      B[n, "index_bytes_per_block"], \
      B[n, "fill_s"], us(B[n, "lookup_p50"], B[n, "lookup_p50_worst"]), \
      us(B[n, "lookup_p99"], B[n, "lookup_p99_worst"]), \
      us(B[n, "acquire_p50"], B[n, "acquire_p50_worst"]), \
      us(B[n, "acquire_p99"], B[n, "acquire_p99_worst"]), \
      E[n, "evict_ns"], E[n, "evict_ns_worst"], R[n, "restart_s"], R[n, "restart_worst_s"]
  }
  lo = order[1]; hi = order[points]
  mem = B[hi, "marginal_bytes_per_block"] / B[lo, "marginal_bytes_per_block"]
  lp = B[hi, "lookup_p99"] / B[lo, "lookup_p99"]
  ap = B[hi, "acquire_p99"] / B[lo, "acquire_p99"]
  per_m = ""
  for (i = 1; i <= points; ++i) {
    n = order[i]
    per_m = per_m sprintf("%s%.2f at %s", i > 1 ? ", " : "", R[n, "reindex_s"] / n * 1e6, count(n))
  }
  lin = (R[hi, "reindex_s"] / hi) / (R[order[2], "reindex_s"] / order[2])
  ev = E[hi, "evict_ns"] / E[lo, "evict_ns"]
  print ""
  printf "Goals, %s ÷ %s: marginal memory/block %s ÷ %s = %.2f (flat, within 0.8–1.25: %s); LOOKUP p99 %s ÷ %s = %.2f, ACQUIRE p99 %s ÷ %s = %.2f (within 2×: %s); restart re-index s per M blocks %s, %s per block ÷ %s per block = %.2f (linear, within 0.8–1.25: %s); eviction per block %s ÷ %s = %.2f (no goal).\n", \
    count(hi), count(lo), count(hi), count(lo), mem, verdict(mem >= 0.8 && mem <= 1.25), \
    count(hi), count(lo), lp, count(hi), count(lo), ap, verdict(lp <= 2 && ap <= 2), per_m, \
    count(hi), count(order[2]), lin, verdict(lin >= 0.8 && lin <= 1.25), count(hi), count(lo), ev
  print ""
  print "| clients | daemon RSS | RSS / session | daemon fds | LOOKUP 16 keys p50 | LOOKUP p99 | LOOKUPs/s, all clients | min / median client throughput | errors |"
  print "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  base_rss = S[corder[1], "rss_base_mib"]
  errors = 0; worst_fair = 1
  for (i = 1; i <= cpoints; ++i) {
    c = corder[i]
    printf "| %s | %.1f MiB | %.0f KiB | %d | %s | %s | %.0f (worst %.0f) | %.2f (worst %.2f) | %d |\n", \
      c, S[c, "rss_mib"], (S[c, "rss_mib"] - S[c, "rss_base_mib"]) * 1024 / c, S[c, "fds"], \
      us(S[c, "p50"], S[c, "p50_worst"]), us(S[c, "p99"], S[c, "p99_worst"]), \
      S[c, "ops_per_s"], S[c, "ops_per_s_worst"], S[c, "fairness"], S[c, "fairness_worst"], \
      S[c, "errors"] + S[c, "connect_failures"]
    errors += S[c, "errors"] + S[c, "connect_failures"]
    if (c > 1 && S[c, "fairness_worst"] < worst_fair) worst_fair = S[c, "fairness_worst"]
  }
  c1 = corder[1]; growth = ""; grows_ok = 1
  for (i = 2; i <= cpoints; ++i) {
    c = corder[i]; g = S[c, "p99"] / S[c1, "p99"]
    growth = growth sprintf("%sp99 at %s ÷ p99 at %s = %.1f vs %s× clients", i > 2 ? ", " : "", c, c1, g, c / c1)
    if (g > c / c1) grows_ok = 0
  }
  print ""
  printf "Goals: nothing falls over (%d errors or refused connections, kvtierd %s: %s); %s (%s); min/median throughput, worst run of any point = %.2f (no client under half the median: %s).\n", \
    errors, alive ? "still up" : "gone", verdict(errors == 0 && alive), growth, \
    verdict(grows_ok), worst_fair, verdict(worst_fair >= 0.5)
}' "$dir/blocks.txt" "$dir/evict.txt" "$dir/restart.kv" "$dir/sessions.txt"

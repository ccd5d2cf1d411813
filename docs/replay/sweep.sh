#!/usr/bin/env bash
# Regenerates the policy sweeps of `kvtier replay` on the traces the project
# carries (the README's "Eviction: which policy where" reads them):
#
#   docs/replay/sweep.sh [path/to/kvtier]     (default: build/client/kvtier)
#
# - mooncake.{csv,json,svg}, kv-cache-tester.{csv,json,svg}: every policy and
#   OPT at a few capacities (the kv-cache-tester files interleaved by time);
# - adaptive-goal.txt: the adaptive policy against the best fixed policy and
#   against LRU at 1 %, 2 %, 5 %, 10 %, 20 %, 35 %, 50 %, 75 % and 100 % of
#   each trace's distinct blocks, for the Mooncake trace and the
#   kv-cache-tester files interleaved and one after another (--combine
#   concat), with the ratio of LRU's refs/s to adaptive's in the same run.
set -euo pipefail
cd "$(dirname "$0")/../.."
kvtier=${1:-build/client/kvtier}
out=docs/replay
all=lru,leaf-lru,lfu,s3fifo,priority,adaptive,opt
kvct=(tests/data/kv-cache-tester/*.json)
kvct_args=()
for t in "${kvct[@]}"; do kvct_args+=(--trace "$t"); done

"$kvtier" replay --quiet --trace tests/data/mooncake_synthetic_trace.jsonl --policies "$all" \
  --capacity-blocks 195,1953,3906,7813,15625,19531,97656 \
  --json "$out/mooncake.json" --csv "$out/mooncake.csv" --plot "$out/mooncake.svg" >/dev/null
"$kvtier" replay --quiet "${kvct_args[@]}" --policies "$all" \
  --capacity-blocks 1000,3000,10000,30000 \
  --json "$out/kv-cache-tester.json" --csv "$out/kv-cache-tester.csv" \
  --plot "$out/kv-cache-tester.svg" >/dev/null

fixed=lru,leaf-lru,lfu,s3fifo,leaf-s3fifo,leaf-lfu
goal() {  # name, distinct blocks, replay args...
  local name=$1 distinct=$2 tmp
  shift 2
  tmp=$(mktemp)
  local caps
  caps=$(python3 -c "import sys; n=int(sys.argv[1]); print(','.join(str(max(1, round(n * f))) for f in (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)))" "$distinct")
  "$kvtier" replay --quiet "$@" --policies "$fixed,adaptive" --capacity-blocks "$caps" \
    --csv "$tmp" >/dev/null
  python3 - "$name" "$tmp" <<'PY'
import csv, sys
name, path = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(path)))
worst_best = worst_lru = 0.0
for cap in sorted({int(r["capacity_blocks"]) for r in rows}):
    at = {r["policy"]: r for r in rows if int(r["capacity_blocks"]) == cap}
    hit = {p: float(r["block_hit_rate"]) for p, r in at.items()}
    fixed = {p: h for p, h in hit.items() if p != "adaptive"}
    best = max(fixed, key=fixed.get)
    d_best = (hit["adaptive"] - fixed[best]) * 100
    d_lru = (hit["adaptive"] - hit["lru"]) * 100
    cost = float(at["lru"]["refs_per_second"]) / float(at["adaptive"]["refs_per_second"])
    worst_best, worst_lru = min(worst_best, d_best), min(worst_lru, d_lru)
    print(f"{name:16} {cap:7d}  lru {hit['lru']:.4f}  best {best:11} {fixed[best]:.4f}"
          f"  adaptive {hit['adaptive']:.4f}  vs best {d_best:+.2f} pt  vs lru {d_lru:+.2f} pt"
          f"  cost {cost:.2f}x")
print(f"{name}: worst {worst_best:+.2f} pt against the best fixed policy, "
      f"{worst_lru:+.2f} pt against lru")
PY
  rm -f "$tmp"
}
{
  echo "# docs/replay/sweep.sh: adaptive against the best fixed policy ($fixed)"
  echo "# at 1-100 % of each trace's distinct blocks; block hit rates; cost = lru refs/s / adaptive refs/s"
  goal mooncake 43924 --trace tests/data/mooncake_synthetic_trace.jsonl
  goal kvct-interleave 25456 "${kvct_args[@]}" --combine interleave
  goal kvct-concat 25456 "${kvct_args[@]}" --combine concat
} >"$out/adaptive-goal.txt"

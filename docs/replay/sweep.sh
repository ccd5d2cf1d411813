#!/usr/bin/env bash
# Regenerates the policy sweeps of `kvtier replay` on the traces the project
# carries (docs/eviction.md reads them):
#
#   docs/replay/sweep.sh [path/to/kvtier]     (default: build/cli/kvtier)
#
# - mooncake.{csv,json,svg}, kv-cache-tester.{csv,json,svg}: every policy and
#   OPT at a few capacities (the kv-cache-tester files interleaved by time);
# - adaptive-goal.txt: the adaptive policy against the best fixed policy and
#   against LRU at 1 %, 2 %, 5 %, 10 %, 20 %, 35 %, 50 %, 75 % and 100 % of
#   each trace's distinct blocks, for the Mooncake trace, the
#   kv-cache-tester files interleaved and one after another (--combine
#   concat), and each kv-cache-tester file (one coding-agent session) alone;
#   then adaptive's cost per block reference against LRU's at the
#   same capacities: the median over 8 runs of LRU's refs/s over adaptive's,
#   and of leaf-first LRU's (adaptive's usual choice on agent traffic, dearer
#   than LRU by itself), run back to back in one process, rotating which goes
#   first
#   (together, since the machine's speed drifts between runs; the Mooncake trace
#   16 times over, one copy after another, since one copy replays in ~40 ms,
#   too short to time).
set -euo pipefail
cd "$(dirname "$0")/../.."
kvtier=${1:-build/cli/kvtier}
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
caps_of() {  # distinct blocks -> the 9 capacities
  python3 -c "import sys; n=int(sys.argv[1]); print(','.join(str(max(1, round(n * f))) for f in (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)))" "$1"
}
distinct_of() {  # a kv-cache-tester file -> its distinct blocks
  python3 - "$1" <<'PY'
import json, sys
ids = set()
def walk(reqs):
    for r in reqs:
        ids.update(r.get("hash_ids", ()))
        walk(r.get("requests", ()))
walk(json.load(open(sys.argv[1]))["requests"])
print(len(ids))
PY
}
goal() {  # name, distinct blocks, replay args...
  local name=$1 distinct=$2 tmp
  shift 2
  tmp=$(mktemp)
  local caps
  caps=$(caps_of "$distinct")
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
    worst_best, worst_lru = min(worst_best, d_best), min(worst_lru, d_lru)
    print(f"{name:16} {cap:7d}  lru {hit['lru']:.4f}  best {best:11} {fixed[best]:.4f}"
          f"  adaptive {hit['adaptive']:.4f}  vs best {d_best:+.2f} pt  vs lru {d_lru:+.2f} pt")
print(f"{name}: worst {worst_best:+.2f} pt against the best fixed policy, "
      f"{worst_lru:+.2f} pt against lru")
PY
  rm -f "$tmp"
}
cost() {  # name, distinct blocks, replay args...
  local name=$1 dir cap i order
  local -a caps
  IFS=, read -ra caps <<<"$(caps_of "$2")"
  shift 2
  dir=$(mktemp -d)
  for cap in "${caps[@]}"; do
    for i in 1 2 3 4 5 6 7 8; do
      order=(adaptive,lru,leaf-lru lru,leaf-lru,adaptive leaf-lru,adaptive,lru)
      order=${order[i % 3]}
      "$kvtier" replay --quiet "$@" --policies "$order" --capacity-blocks "$cap" \
        --csv "$dir/$cap-$i.csv" >/dev/null
    done
  done
  python3 - "$name" "$dir" <<'PY'
import csv, glob, statistics, sys
name, d = sys.argv[1], sys.argv[2]
ratios = {}
for f in glob.glob(d + "/*.csv"):
    rate = {r["policy"]: float(r["refs_per_second"]) for r in csv.DictReader(open(f))}
    cap = int(f.rsplit("/", 1)[1].split("-")[0])
    ratios.setdefault(cap, []).append(
        (rate["lru"] / rate["adaptive"], rate["leaf-lru"] / rate["adaptive"]))
for i, peer in enumerate(("lru", "leaf-lru")):
    med = {c: statistics.median(r[i] for r in rs) for c, rs in ratios.items()}
    print(f"{name:16} cost vs {peer:8} " + " ".join(f"{c}:{med[c]:.2f}x" for c in sorted(med))
          + f"  (worst {max(med.values()):.2f}x)")
PY
  rm -rf "$dir"
}
mooncake16=()
for _ in $(seq 16); do mooncake16+=(--trace tests/data/mooncake_synthetic_trace.jsonl); done
{
  echo "# docs/replay/sweep.sh: adaptive against the best fixed policy ($fixed)"
  echo "# at 1-100 % of each trace's distinct blocks; block hit rates"
  goal mooncake 43924 --trace tests/data/mooncake_synthetic_trace.jsonl
  goal kvct-interleave 25456 "${kvct_args[@]}" --combine interleave
  goal kvct-concat 25456 "${kvct_args[@]}" --combine concat
  for t in "${kvct[@]}"; do goal "$(basename "$t" .json)" "$(distinct_of "$t")" --trace "$t"; done
  echo "# cost: lru's (leaf-lru's) refs/s over adaptive's at each capacity, median of 8 runs of the three back to back"
  cost mooncake 43924 "${mooncake16[@]}" --combine concat
  cost kvct-interleave 25456 "${kvct_args[@]}" --combine interleave
  cost kvct-concat 25456 "${kvct_args[@]}" --combine concat
} >"$out/adaptive-goal.txt"

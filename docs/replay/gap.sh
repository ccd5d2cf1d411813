#!/usr/bin/env bash
# How much of the distance from LRU to Belady's OPT the default configuration
# closes, on every trace the project carries (docs/eviction.md reads it):
#
#   docs/replay/gap.sh [path/to/kvtier]     (default: build/cli/kvtier)
#
# writes docs/replay/admission-{mooncake,kv-cache-tester}.svg (token hit rate
# against capacity: lru, adaptive and opt, each admitting all, with `seen`
# and with the oracle) and docs/replay/gap-closed.txt: for the Mooncake trace, the
# kv-cache-tester files interleaved by time and one after another, and each
# kv-cache-tester file (one coding-agent session) alone, at 1 %, 5 %, 20 %
# and 50 % of the trace's distinct blocks:
# - the gap: OPT's block hit rate minus LRU's, in points;
# - the share of it closed by the default (`adaptive`, its admission filters
#   chosen by its miniature caches), (adaptive - lru) / (opt - lru), and by the
#   best fixed policy (lru, leaf-lru, lfu, s3fifo, leaf-s3fifo, leaf-lfu, each
#   admitting every block, or with the `seen` filter);
# - the same with hints of the next request (--lookahead-requests 1: what
#   the engine's queue adds on top);
# - the oracle's share (LRU admitting only what the trace uses again within
#   4 capacities: what admission alone could do, knowing the future).
# A share is "-" where the gap is under 0.5 points (nothing to close).
set -euo pipefail
cd "$(dirname "$0")/../.."
kvtier=${1:-build/cli/kvtier}
out=docs/replay/gap-closed.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
kvct=(tests/data/kv-cache-tester/*.json)
kvct_args=()
for t in "${kvct[@]}"; do kvct_args+=(--trace "$t"); done

distinct_of() {  # replay args... -> the trace's distinct blocks (from replay's own count)
  "$kvtier" replay --quiet "$@" --policies lru --capacity-blocks 1 2>&1 >/dev/null |
    sed -n 's/.* \([0-9]*\) distinct blocks.*/\1/p'
}
row() {  # name, replay args...
  local name=$1 distinct caps
  shift
  distinct=$(distinct_of "$@")
  caps=$(python3 -c "import sys; n=int(sys.argv[1]); print(','.join(str(max(1, round(n * f))) for f in (0.01, 0.05, 0.2, 0.5)))" "$distinct")
  "$kvtier" replay --quiet "$@" --capacity-blocks "$caps" \
    --policies lru,leaf-lru,lfu,s3fifo,leaf-s3fifo,leaf-lfu,adaptive,opt --admission off,seen \
    --csv "$tmp/plain.csv" >/dev/null 2>&1
  "$kvtier" replay --quiet "$@" --capacity-blocks "$caps" --policies adaptive \
    --lookahead-requests 1 --csv "$tmp/hints.csv" >/dev/null 2>&1
  "$kvtier" replay --quiet "$@" --capacity-blocks "$caps" --policies lru --admission oracle \
    --csv "$tmp/oracle.csv" >/dev/null 2>&1
  python3 - "$name" "$distinct" "$tmp" <<'PY'
import csv, sys
name, distinct, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rows(f):
    return list(csv.DictReader(open(f"{d}/{f}")))
hit = {}
for f in ("plain.csv", "hints.csv", "oracle.csv"):
    for r in rows(f):
        key = r["policy"] + ("+hints" if f == "hints.csv" else "")
        if r.get("admission", "off") != "off":
            key += "/" + r["admission"]
        hit[(key, int(r["capacity_blocks"]))] = float(r["block_hit_rate"])
caps = sorted({c for (_, c) in hit})
for i, cap in enumerate(caps):
    lru, opt = hit[("lru", cap)], hit[("opt", cap)]
    gap = opt - lru
    fixed = {p: h for (p, c), h in hit.items()
             if c == cap and not p.startswith(("adaptive", "opt")) and "oracle" not in p}
    best = max(fixed, key=fixed.get)
    hinted = [h for (p, c), h in hit.items() if c == cap and p.startswith("adaptive+")][0]
    share = lambda h: f"{(h - lru) / gap:+.2f}" if gap >= 0.005 else "-"
    print(f"{name:16} {(1, 5, 20, 50)[i]:3d}% {cap:6d}  gap {100 * gap:5.1f} pt  "
          f"default {share(hit[('adaptive', cap)]):>5}  best fixed {share(fixed[best]):>5} ({best})  "
          f"default+hints {share(hinted):>5}  oracle admission {share(hit[('lru/oracle', cap)]):>5}")
PY
}
# The plots: token hit rate against capacity of LRU, the default and OPT,
# and LRU with each admission filter (the oracle's included).
"$kvtier" replay --quiet --trace tests/data/mooncake_synthetic_trace.jsonl \
  --capacity-blocks 195,1953,3906,7813,15625,19531 --policies lru,adaptive,opt \
  --admission off,seen,oracle --plot docs/replay/admission-mooncake.svg >/dev/null 2>&1
"$kvtier" replay --quiet "${kvct_args[@]}" --capacity-blocks 255,1000,3000,10000 \
  --policies lru,adaptive,opt --admission off,seen,oracle \
  --plot docs/replay/admission-kv-cache-tester.svg >/dev/null 2>&1
{
  echo "# docs/replay/gap.sh: share of the LRU -> OPT gap (block hit rate) closed at 1/5/20/50 % of each"
  echo "# trace's distinct blocks: by the default (adaptive), the best fixed policy (with or without the"
  echo "# seen filter), the default with hints of the next request, and LRU with the oracle's admission"
  row mooncake --trace tests/data/mooncake_synthetic_trace.jsonl
  row kvct-interleave "${kvct_args[@]}" --combine interleave
  row kvct-concat "${kvct_args[@]}" --combine concat
  for t in "${kvct[@]}"; do row "$(basename "$t" .json)" --trace "$t"; done
} >"$out"

#!/usr/bin/env bash
# Regenerates docs/replay/lookahead-*: the waiting-queue lookahead sweep of
# `kvtier replay` (hints, CacheEngine::Hint) on the traces the project
# carries, at the capacities of the policy sweeps (docs/replay/*.csv).
#
#   docs/replay/lookahead.sh [path/to/kvtier]     (default: build/cli/kvtier)
#
# Per trace: lookahead-<trace>.txt (the tables, with the share of the gap
# to OPT each run closes against its own policy without hints), .csv and
# .json (both sweeps, plain lru and opt once), and one plot per kind
# (-requests.svg, -seconds.svg). A queue is
# measured in requests or in seconds, never both in one run, hence two
# sweeps per trace.
set -euo pipefail
cd "$(dirname "$0")/../.."
kvtier=${1:-build/cli/kvtier}
out=docs/replay

sweep() {  # name, capacities, trace files...
  local name=$1 caps=$2
  shift 2
  local traces=()
  for t in "$@"; do traces+=(--trace "$t"); done
  local tmp
  tmp=$(mktemp -d)
  "$kvtier" replay --quiet "${traces[@]}" --capacity-blocks "$caps" \
    --policies lru,adaptive,opt --lookahead-requests 0,1,10,100 \
    --csv "$tmp/r.csv" --json "$tmp/r.json" --plot "$out/lookahead-$name-requests.svg" \
    >"$tmp/r.txt"
  "$kvtier" replay --quiet "${traces[@]}" --capacity-blocks "$caps" \
    --policies lru,opt --lookahead-seconds 0,1,10,60 \
    --csv "$tmp/s.csv" --json "$tmp/s.json" --plot "$out/lookahead-$name-seconds.svg" \
    >"$tmp/s.txt"
  {
    echo "# docs/replay/lookahead.sh: $name, lookahead in requests"
    cat "$tmp/r.txt"
    echo
    echo "# docs/replay/lookahead.sh: $name, lookahead in seconds"
    cat "$tmp/s.txt"
  } >"$out/lookahead-$name.txt"
  # One CSV and one JSON: the seconds sweep without its plain runs (the
  # requests sweep has them).
  python3 - "$tmp" "$out/lookahead-$name" <<'PY'
import csv, json, sys
tmp, dest = sys.argv[1], sys.argv[2]
with open(f"{tmp}/r.csv") as f:
    rows = list(csv.DictReader(f))
with open(f"{tmp}/s.csv") as f:
    rows += [r for r in csv.DictReader(f) if float(r["lookahead_seconds"]) != 0]
with open(f"{dest}.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
records = json.load(open(f"{tmp}/r.json"))
records += [r for r in json.load(open(f"{tmp}/s.json")) if r["lookahead_seconds"] != 0]
with open(f"{dest}.json", "w") as f:
    json.dump(records, f, indent=2)
    f.write("\n")
PY
  rm -r "$tmp"
}

sweep mooncake 195,1953,3906,7813,15625,19531,97656 tests/data/mooncake_synthetic_trace.jsonl
sweep kv-cache-tester 1000,3000,10000,30000 tests/data/kv-cache-tester/*.json

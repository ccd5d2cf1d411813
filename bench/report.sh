#!/usr/bin/env bash
# One command for every side-by-side figure of kvtier (bench/report.py):
#
#   bench/report.sh BUILD [--quick | --full] [--only a,b] [--out FILE] [--check]
#
# BUILD: a configured build tree with the benchmarks (Release, or the tests'
# RelWithDebInfo build); what the report needs is built first. --quick (the
# default) takes a few minutes, --full about half an hour. Writes the tables of
# docs/performance.md and the summary of README.md; --out FILE writes FILE
# instead and leaves README.md alone. Run it on a machine as quiet as you can:
# it says what else ran, and where it placed the servers and load generators.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/report.sh BUILD [--quick|--full] [--only a,b] [--out FILE] [--check]}
shift
cmake --build "$build" --target kvtierd kvtier bench_control_plane bench_data_plane \
  bench_ssd_store bench_remote bench_fp8 bench_seal bench_quantize_ssd >/dev/null
exec python3 bench/report.py "$build" "$@"

#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of kvtier from Debian 12's
# packages. Idempotent: safe to run again; apt-get skips what is present.
# Run as root (or through sudo) on a fresh Debian 12 machine.
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build pkg-config g++ clang-format
  # sanitizer and fuzzing builds (scripts/test.sh, docs/hardening.md)
  clang-14 libclang-rt-14-dev # clang with its ASan/UBSan/TSan runtimes and libFuzzer
  llvm-14             # llvm-symbolizer: file:line in sanitizer reports
  # libraries
  libboost-dev        # Boost.Asio (header-only) for the daemon
  librocksdb-dev      # SSD tier index
  libxxhash-dev       # XXH3-128 block keys, XXH3-64 checksums
  prometheus-cpp-dev  # metrics exposer
  libtomlplusplus-dev # configuration file (TOML)
  libcli11-dev        # command-line flags of kvtierd and kvtier
  nlohmann-json3-dev  # the trace readers of kvtier replay (JSON, JSONL)
  redis-server        # the peer the control- and data-plane benchmarks compare against
  bc                  # arithmetic in bench/daemon_vs_peers.sh
  fio                 # raw disk bandwidth, the peer of bench/ssd_vs_fio.sh
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus          # promtool and a real Prometheus server for the metrics tests
)

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then exec sudo -E "$0" "$@"; fi
  echo "install-deps.sh: run as root (apt-get needs it)" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

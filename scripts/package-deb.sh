#!/usr/bin/env bash
# Builds kvtier's .deb: a Release tree installed under /usr (config in
# /etc/kvtier, the systemd unit in /lib/systemd/system), stripped, with its
# library dependencies found by dpkg-shlibdeps.
#   scripts/package-deb.sh [build-dir]   (default: build-deb)
# Install it with: apt-get install ./build-deb/kvtier_<version>_amd64.deb
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-deb}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF
cmake --build "$build" --target kvtierd kvtier
(cd "$build" && cpack -G DEB)
ls -l "$build"/*.deb

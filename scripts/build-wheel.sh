#!/usr/bin/env bash
# Builds the kvtier wheel that carries the daemon: the Python package, and
# kvtierd and the kvtier CLI with every shared library they need beside them,
# so that a Linux x86-64 machine with Python and pip runs them.
#
#   scripts/build-wheel.sh              # -> dist/kvtier-VERSION-cpXY-cpXY-manylinux_2_36_x86_64.whl
#   DIST=/tmp/wheels scripts/build-wheel.sh
#   scripts/build-wheel.sh --build-only # the executables' Release build, no wheel
#
# The way of `auditwheel repair`: the executables are built here (Release, the
# project's CMake, the CUDA runtime static as always), each shared library
# `ldd` names outside glibc is copied into kvtier/bin/lib/ (libstdc++ and
# libgcc_s too: a machine's own may be older than Debian 12's GCC 12), and
# the run paths are rewritten with patchelf to $ORIGIN/lib (executables) and
# $ORIGIN (the libraries), as DT_RPATH (as auditwheel does), which is searched
# before LD_LIBRARY_PATH: a user's LD_LIBRARY_PATH (conda's, CUDA's) cannot
# swap in another RocksDB or libstdc++. The platform tag names the glibc it was built
# against, Debian 12's 2.36: the oldest it is known to run on.
# Needs scripts/install-deps.sh's packages and the project's .venv
# (scripts/python-env.sh: scikit-build-core and nanobind, pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "" | --build-only) ;;
  *) echo "usage: scripts/build-wheel.sh [--build-only]" >&2; exit 2 ;;
esac
build=${BUILD_DIR:-build-release}
dist=${DIST:-dist}
venv=${KVTIER_VENV:-.venv}
cmake=$(command -v /usr/bin/cmake || command -v cmake)

"$cmake" -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF >&2
"$cmake" --build "$build" --target kvtierd kvtier >&2
[ "${1:-}" != --build-only ] || exit 0

bundle="$(realpath "$build")/wheel-bundle"
rm -rf "$bundle"
mkdir -p "$bundle/lib"
cp "$build/daemon/kvtierd" "$build/cli/kvtier" "$bundle/"

# glibc's own libraries and the kernel's vDSO stay the machine's.
system='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so)'
for exe in "$bundle/kvtierd" "$bundle/kvtier"; do
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    if ! grep -Eq "$system" <<<"$name"; then
      cp -L "$path" "$bundle/lib/$name"
    fi
  done
done
for lib in "$bundle"/lib/*.so*; do
  chmod 0644 "$lib"
  patchelf --force-rpath --set-rpath '$ORIGIN' "$lib"
done
for exe in "$bundle/kvtierd" "$bundle/kvtier"; do
  patchelf --force-rpath --set-rpath '$ORIGIN/lib' "$exe"
done
# What the bundle needs from outside it now: glibc and nothing else.
for f in "$bundle/kvtierd" "$bundle/kvtier" "$bundle"/lib/*.so*; do
  outside=$(LD_LIBRARY_PATH= ldd "$f" | awk '$2 == "=>" {print $1, $3}' |
    grep -Ev "$system" | grep -v " $bundle/" || true)
  if [ -n "$outside" ]; then
    echo "build-wheel.sh: $f still loads from outside the wheel:" >&2
    echo "$outside" >&2
    exit 1
  fi
done

mkdir -p "$dist"
out=$(mktemp -d)
"$venv/bin/python" -m pip --disable-pip-version-check wheel -q --no-build-isolation --no-deps \
  -w "$out" --config-settings=cmake.define.KVTIER_BUNDLE_DIR="$bundle" \
  --config-settings=build-dir="$(realpath "$build")/wheel-build" ./python >&2
# The platform tag: linux_x86_64 -> manylinux_2_36_x86_64 (in the name, in
# WHEEL, and WHEEL's hash in RECORD), as auditwheel would write it.
"$venv/bin/python" - "$out"/kvtier-*.whl "$dist" <<'PY'
import base64, hashlib, pathlib, sys, zipfile

src, dist = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
old, new = "linux_x86_64", "manylinux_2_36_x86_64"
dst = dist / src.name.replace(old, new)
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    names = zin.namelist()
    wheel_name = next(n for n in names if n.endswith(".dist-info/WHEEL"))
    record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
    wheel = zin.read(wheel_name).decode().replace(f"-{old}", f"-{new}").encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(wheel).digest()).rstrip(b"=").decode()
    record = []
    for line in zin.read(record_name).decode().splitlines():
        if line.startswith(wheel_name + ","):
            line = f"{wheel_name},sha256={digest},{len(wheel)}"
        record.append(line)
    for info in zin.infolist():
        data = zin.read(info)
        if info.filename == wheel_name:
            data = wheel
        elif info.filename == record_name:
            data = ("\n".join(record) + "\n").encode()
        zout.writestr(info, data)
print(dst)
PY
rm -rf "$out"

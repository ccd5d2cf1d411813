#!/usr/bin/env bash
# SGLang's environment: .venv-sglang, with the pinned packages of
# python/requirements-sglang.txt (its header says why SGLang needs an environment
# apart from .venv) and kvtier from this checkout, made by scripts/python-env.sh.
# Idempotent, as that script is.
#
#   scripts/sglang-env.sh   # then: .venv-sglang/bin/python python/tests/sglang_driver.py
set -euo pipefail
cd "$(dirname "$0")/.."
KVTIER_VENV=.venv-sglang KVTIER_REQUIREMENTS=python/requirements-sglang.txt KVTIER_IMPORTS=kvtier \
  exec scripts/python-env.sh "$@"

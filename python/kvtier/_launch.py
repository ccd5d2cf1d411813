"""The ``kvtierd`` and ``kvtier`` commands of a wheel built by
scripts/build-wheel.sh: the executables live in the package (``kvtier/bin/``,
with the shared libraries they need in ``kvtier/bin/lib/``) and these entry
points replace the Python process with them.

A kvtier installed from the source tree (``pip install ./python``) carries no
executables; the commands then say how to get them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"


def executable(name: str) -> Path:
    """The bundled executable `name`; FileNotFoundError (with what to do) if absent."""
    path = BIN / name
    if not path.is_file():
        raise FileNotFoundError(
            f"this kvtier package has no bundled {name} ({path}): it was installed from the "
            "source tree. Install the wheel scripts/build-wheel.sh builds, or build the daemon "
            "with scripts/run.sh (build-release/daemon/kvtierd, build-release/cli/kvtier).")
    return path


def _exec(name: str) -> None:
    try:
        path = executable(name)
    except FileNotFoundError as e:
        print(f"{name}: {e}", file=sys.stderr)
        raise SystemExit(127) from None
    os.execv(path, [str(path), *sys.argv[1:]])


def kvtierd() -> None:
    _exec("kvtierd")


def kvtier() -> None:
    _exec("kvtier")

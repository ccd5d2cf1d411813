"""kvtierd as LMCache's L2 store, against LMCache's own disk L2 and memcpy, in one run
(bench/README.md, "LMCache").

LMCache's server-side StorageManager (python/tests/lmcache_driver.py, as ``lmcache
server`` runs it) stores --chunks chunks of LMCache's layout (2 x 32 layers x 256
tokens x 1024 fp16 values: 32 MiB, about one 256-token chunk of an 8B model) into
its L1, its store controller pushing them to the L2 adapter; then drops them from
L1 and prefetches them back from L2. For each L2:

  store  from finish_write until the L2 holds every chunk (kvtierd: its LOOKUPs;
         LMCache's fs_native: every chunk's file at its full size);
  load   the prefetch of every chunk from L2 into L1.

L2s: kvtier.lmcache.KvtierL2Client (kvtierd's host tier) and LMCache's own
``fs_native`` (files under --fs-dir, page cache warm). The limit: memcpy of the
same bytes between two buffers written before. Median of --rounds rounds after
three unmeasured (worst stated); kvtierd's host tier holds three rounds (LRU),
so the measured ones reuse slots this process has mapped, as in serving.

Usage: .venv/bin/python bench/python/bench_lmcache.py [--build build-release]
       [--chunks 8] [--rounds 3] [--fs-dir DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

import kvtier  # noqa: E402
from kvtier._chunks import chunk_layout  # noqa: E402
from kvtier.lmcache import namespace_model, page_keys  # noqa: E402

from plug_bench import start_daemon, summarize  # noqa: E402
from lmcache_driver import Server, key_string, kvtier_adapter  # noqa: E402

SHAPE = [2, 32, 256, 1024]
PAGE = 2 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(REPO / "build-release"))
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fs-dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    n = args.chunks
    chunk = int(np.prod(SHAPE)) * 2
    total = n * chunk
    pages = -(-(chunk + 16) // PAGE)
    work = tempfile.mkdtemp(prefix="kvtier-bench-lmcache-")
    # Room for three rounds' chunks, evicted LRU (no admission filter: a round's
    # chunks are new keys), so that from the fourth round on a store reuses
    # slots this process has mapped before, as a serving process does.
    pages_bytes = -(-(chunk + 16) // PAGE) * PAGE * n
    proc, sock = start_daemon(Path(args.build), work, "--host-capacity",
                              str(3 * pages_bytes + (64 << 20)), "--host-policy", "lru")
    fs_dir = args.fs_dir or os.path.join(work, "fs")
    os.makedirs(fs_dir, exist_ok=True)
    l1_gb = 2 * total / 1e9 + 0.1
    probe_client = kvtier.Client(namespace_model(PAGE), chunk_layout(PAGE), socket=sock)

    def kvtier_has(keys: list) -> bool:
        return all(probe_client.lookup(kvtier.Keys(page_keys(key_string(k), pages))).hits
                   == pages for k in keys)

    def fs_has(keys: list) -> bool:
        sizes = [e.stat().st_size for e in os.scandir(fs_dir) if e.is_file()]
        return sum(1 for s in sizes if s >= chunk) >= len(keys) * (fs_has.round + 1)
    fs_has.round = 0  # type: ignore[attr-defined]

    l2s = {
        "kvtier": (kvtier_adapter(sock), kvtier_has),
        "lmcache-fs": (json.dumps({"type": "fs_native", "base_path": fs_dir}), fs_has),
    }
    rows: dict = {name: {"store": [], "load": []} for name in l2s}
    memcpy = []
    try:
        for name, (adapter, has) in l2s.items():
            with Server(adapter, l1_gb=l1_gb, shape=SHAPE) as s:
                for r in range(-3, args.rounds):
                    fs_has.round = r + 3  # type: ignore[attr-defined]
                    keys = s.keys(f"{name}-{r}".encode(), n)
                    s.store(keys)
                    stored_at = time.perf_counter()
                    if not s.wait_stored(keys, has, timeout=120):
                        raise SystemExit(f"{name}: the L2 did not get every chunk (round {r})")
                    store_s = time.perf_counter() - stored_at
                    # (Untimed: the store controller lets go of the chunks once
                    # it has seen the L2's completions; dropping them from L1
                    # before that aborts a write.)
                    time.sleep(0.5)
                    s.drop_l1(keys)
                    start = time.perf_counter()
                    hits, got = s.prefetch(keys, timeout=120)
                    load_s = time.perf_counter() - start
                    if hits != n or got is None:
                        raise SystemExit(f"{name}: {hits} of {n} chunks came back")
                    del got
                    s.drop_l1(keys)  # (L1 holds one round at a time)
                    if r >= 0:
                        rows[name]["store"].append(store_s)
                        rows[name]["load"].append(load_s)
        for _ in range(args.rounds):
            src = np.ones(total, np.uint8)
            dst = np.zeros(total, np.uint8)
            np.copyto(dst, src)
            start = time.perf_counter()
            np.copyto(dst, src)
            memcpy.append(time.perf_counter() - start)
    finally:
        probe_client.close()
        proc.terminate()
        proc.wait()
    out = summarize(rows, memcpy, n, chunk, args.rounds, "lmcache-fs", "LMCache's fs_native")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

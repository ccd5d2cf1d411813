"""kvtierd as a tier of vLLM's own offloading, against vLLM's alternatives, in one run
(bench/README.md, "vLLM's offloading").

A long prefix (--chunks chunks of --chunk-mib MiB, 16 tokens each: 2 MiB is one
16-token chunk of Llama-3.1-8B in bf16) is stored through vLLM's
TieringOffloadingManager (its CPU tier, then cascaded to the secondary tier) and
loaded back by a second manager with an empty CPU tier (the secondary tier's
chunks promoted into it), vLLM's scheduler side driven on the CPU as in
python/tests/vllm_offload_driver.py. For each secondary tier:

  store  from complete_store until every cascade job has finished;
  load   from the first lookup until every chunk is HIT in the CPU tier.

Secondary tiers: kvtier.vllm_offload.KvtierTier (kvtierd's host tier), and
vLLM's own file-system tier ("fs", its files under --fs-dir, the page cache
warm). The limit: memcpy of the same bytes between two buffers written
before (what vLLM's CPU tier alone costs per direction on the host side).
Each figure the median of --rounds rounds after two unmeasured ones (worst
stated), GB/s and ms a chunk. One manager a tier serves every round, as in a
serving engine, so its connections and mappings are warm.

Usage: .venv/bin/python bench/python/bench_vllm_offload.py [--build build-release]
       [--chunks 64] [--chunk-mib 2] [--rounds 3] [--fs-dir DIR] [--json F]
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

from vllm.v1.kv_offload.base import LookupResult  # noqa: E402

from plug_bench import start_daemon, summarize  # noqa: E402
from vllm_offload_driver import Offload, payload  # noqa: E402  (the tests' driver)


def store_seconds(o: Offload, seed: bytes, n: int) -> float:
    """Writes n chunks into vLLM's CPU tier (untimed, the GPU's part), then times
    complete_store -> every cascade to the secondary tier finished."""
    ctx, keys = o.request(seed, n)
    out = o.mgr.prepare_store(keys, ctx)
    assert out is not None and len(out.keys_to_store) == n
    for key, cid in zip(out.keys_to_store, out.store_spec.chunk_ids):
        o.chunk(int(cid))[:] = payload(key, o.chunk_bytes)
    o.step()
    start = time.perf_counter()
    o.mgr.complete_store(set(out.keys_to_store), ctx)
    o.mgr.on_request_finished(ctx)
    while o.mgr.has_pending_work():
        o.step()
    return time.perf_counter() - start


def load_seconds(o: Offload, seed: bytes, n: int, name: str) -> float:
    """Times the scheduler's lookups of n chunks in the secondary tier, step after
    step, until all are HIT in vLLM's CPU tier; then checks their bytes."""
    ctx, keys = o.request(seed, n)
    start = time.perf_counter()
    while True:
        results = [o.mgr.lookup(k, ctx) for k in keys]
        if all(r is LookupResult.HIT for r in results):
            break
        if LookupResult.MISS in results:
            raise SystemExit(f"{name}: a chunk was not found: {[r.name for r in results]}")
        o.step()
    elapsed = time.perf_counter() - start
    spec = o.mgr.prepare_load(keys, ctx)
    for k, cid in zip(keys, spec.chunk_ids):
        if bytes(o.chunk(int(cid))[:64]) != payload(k, o.chunk_bytes)[:64]:
            raise SystemExit("a loaded chunk holds other bytes")
    o.step()
    o.mgr.complete_load(keys, ctx)
    o.mgr.on_request_finished(ctx)
    o.settle()
    return elapsed


def memcpy_seconds(total: int) -> float:
    src = np.ones(total, np.uint8)
    dst = np.zeros(total, np.uint8)
    np.copyto(dst, src)
    start = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(REPO / "build-release"))
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--chunk-mib", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fs-dir", default=None, help="the fs tier's directory (default: a "
                    "temporary one)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    chunk_bytes = int(args.chunk_mib * (1 << 20))
    n = args.chunks
    total = n * chunk_bytes
    work = tempfile.mkdtemp(prefix="kvtier-bench-offload-")
    proc, sock = start_daemon(Path(args.build), work, "--host-capacity",
                              str(2 * total + (64 << 20)))
    fs_dir = args.fs_dir or os.path.join(work, "fs")
    os.makedirs(fs_dir, exist_ok=True)
    tiers = {
        "kvtier": {"type": "KvtierTier", "module_path": "kvtier.vllm_offload", "socket": sock,
                   "model_id": "bench/offload"},
        "vllm-fs": {"type": "fs", "root_dir": fs_dir, "n_read_threads": 2,
                    "n_write_threads": 2},
    }
    rows: dict = {name: {"store": [], "load": []} for name in tiers}
    memcpy: list = []
    try:
        # One manager a tier, as in a serving engine (its tier's connections and
        # mappings warm): vLLM's CPU tier holds one prefix, so storing another
        # evicts the first from it, and its load comes from the secondary tier.
        # Two rounds warm up, unmeasured.
        offloads = {name: Offload(cfg, chunks=n, chunk_bytes=chunk_bytes)
                    for name, cfg in tiers.items()}
        try:
            for r in range(-2, args.rounds):
                for name, o in offloads.items():
                    stored = store_seconds(o, f"{name}-{r}".encode(), n)
                    store_seconds(o, f"{name}-{r}-other".encode(), n)  # evicts it from vLLM's
                    loaded = load_seconds(o, f"{name}-{r}".encode(), n, name)
                    if r >= 0:
                        rows[name]["store"].append(stored)
                        rows[name]["load"].append(loaded)
                memcpy.append(memcpy_seconds(total))
        finally:
            for o in offloads.values():
                o.__exit__()
    finally:
        proc.terminate()
        proc.wait()
    out = summarize(rows, memcpy, n, chunk_bytes, args.rounds, "vllm-fs",
                    "vLLM's fs tier")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

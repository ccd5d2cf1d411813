"""What bench_vllm_offload.py and bench_lmcache.py share: their kvtierd, and their
table of each store's and load's median against memcpy and against the engine's
own alternative."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Dict, List


def start_daemon(build: Path, workdir: str, *args: str) -> "tuple[subprocess.Popen, str]":
    """kvtierd of `build` on a socket in `workdir`, no SSD tier, no metrics; `args`
    its other flags (--host-capacity ...)."""
    sock = os.path.join(workdir, "kvtierd.sock")
    log = open(os.path.join(workdir, "kvtierd.log"), "wb")
    proc = subprocess.Popen([str(build / "daemon" / "kvtierd"), "--socket", sock,
                             "--ssd-dir", "", "--metrics-address", "", *args],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if os.path.exists(sock):
            return proc, sock
        time.sleep(0.05)
    raise SystemExit(f"kvtierd did not start; see {log.name}")


def summarize(rows: Dict[str, Dict[str, List[float]]], memcpy: List[float], chunks: int,
              chunk_bytes: int, rounds: int, peer: str, peer_label: str) -> dict:
    """Prints and returns, for each store in `rows` (name -> "store"/"load" -> seconds
    of every round), GB/s, ms a chunk and x memcpy (median, and the worst round),
    then kvtier's speed over `peer`'s."""
    total = chunks * chunk_bytes
    limit = statistics.median(memcpy)
    out: dict = {"chunks": chunks, "chunk_bytes": chunk_bytes, "rounds": rounds,
                 "memcpy_gbps": total / limit / 1e9, "stores": {}}
    print(f"{chunks} chunks of {chunk_bytes / (1 << 20):g} MiB ({total / (1 << 20):.0f} MiB), "
          f"median of {rounds} (worst); memcpy {total / limit / 1e9:.2f} GB/s")
    print(f"{'store':11} {'op':6} {'GB/s':>7} {'ms/chunk':>9} {'x memcpy':>9} {'worst x':>8}")
    for name, ops in rows.items():
        out["stores"][name] = {}
        for op in ("store", "load"):
            t = statistics.median(ops[op])
            worst = max(ops[op])
            out["stores"][name][op] = {"gbps": total / t / 1e9, "ms_per_chunk": t / chunks * 1e3,
                                       "x_memcpy": limit / t, "worst_x_memcpy": limit / worst}
            print(f"{name:11} {op:6} {total / t / 1e9:7.2f} {t / chunks * 1e3:9.3f} "
                  f"{limit / t:9.2f} {limit / worst:8.2f}")
    for op in ("store", "load"):
        k = statistics.median(rows["kvtier"][op])
        f = statistics.median(rows[peer][op])
        out[f"{op}_kvtier_over_{peer}"] = f / k
        print(f"{op}: kvtier {f / k:.2f}x as fast as {peer_label}")
    return out

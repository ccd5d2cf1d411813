"""The Python package against its peers, in one run (bench/README.md, "Python").

  lookup  LOOKUP of 64 keys per second from Python (kvtier.Client.lookup of what
          block_keys returned) against the C++ client library doing the same
          (`kvtier bench --op lookup`), one client each, alternating rounds on one
          daemon, every lookup of either a hit of all 64 keys. Goal >= 0.9x.
  load    kvtier.hf.PrefixCache.load of a long cached prefix (host tier) into a
          DynamicCache, in GB/s, against memcpy of the same bytes into memory written
          before (and, for reference, into a new buffer, which pays a page fault per
          4 KiB). Goal >= 0.5x.
  ttft    time to first token of a request whose long prefix is cached in the host
          tier: kvtier against recomputing the prompt and against transformers'
          own in-process reuse of a copied DynamicCache (the upper limit: no IPC,
          no copy out of shared memory). Goal: within 1.5x of in-process reuse.

Usage: .venv/bin/python bench/python/bench_python.py [--build build-release]
       [--only lookup,load,ttft] [--rounds N] [--context 4096] [--json F]
Starts its own kvtierd (--build's) on a temporary socket.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import kvtier
import kvtier.hf

REPO = Path(__file__).resolve().parents[2]


def start_daemon(build: Path, workdir: str) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(workdir, "kvtierd.sock")
    log = open(os.path.join(workdir, "kvtierd.log"), "wb")
    proc = subprocess.Popen([str(build / "daemon" / "kvtierd"), "--socket", sock,
                             "--host-capacity", "2GiB", "--ssd-dir", "", "--metrics-address", ""],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if os.path.exists(sock):
            return proc, sock
        time.sleep(0.05)
    raise SystemExit(f"kvtierd did not start; see {log.name}")


# ---- lookup --------------------------------------------------------------------


def bench_lookup(build: Path, sock: str, rounds: int, seconds: float) -> dict:
    """Python lookups of 64-key chains vs `kvtier bench` (C++ client), same prompts and layout."""
    layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, dtype="fp16", block_tokens=16)
    prompts, blocks = 1024, 64
    common = ["--socket", sock, "--model", "kvtier-bench-py", "--layers", "2", "--kv-heads", "2",
              "--head-dim", "64", "--dtype", "fp16", "--block-tokens", "16"]
    cpp_args = ["--clients", "1", "--keys", str(prompts), "--blocks", str(blocks)] + common
    kvtier_cli = str(build / "cli" / "kvtier")
    rng = random.Random(1)
    py, cpp = [], []
    with kvtier.Client("kvtier-bench-py", layout, socket=sock) as c:
        # Each Python lookup passes block_keys' kvtier.Keys as it is.
        chains = [c.block_keys([rng.randrange(150000) for _ in range(16 * blocks)])
                  for _ in range(prompts)]
        for keys in chains:
            with c.allocate(keys) as w:
                w.commit()  # slots not filled: lookups read no bytes
        # `kvtier bench --op lookup` looks up prompts of its own (from --seed)
        # without writing them: its lookups would end at the first key, a
        # cheaper request for the daemon and a reply without 64 tiers to
        # decode. `--op get` writes those same prompts first, so that its
        # lookups hit all 64 keys too, as the Python ones do.
        subprocess.run([kvtier_cli, "bench", "--op", "get", "--ops", "1", "--json"] + cpp_args,
                       capture_output=True, check=True)

        def hits_per_lookup(before: dict) -> float:
            now = c.stats()
            return (now["lookup_hits"] - before["lookup_hits"]) / max(
                1, now["lookups"] - before["lookups"])

        for r in range(rounds):
            for leg in (("py", "cpp") if r % 2 == 0 else ("cpp", "py")):
                before = c.stats()
                if leg == "py":
                    n, i = 0, 0
                    start = time.perf_counter()
                    end = start + seconds
                    while time.perf_counter() < end:
                        for _ in range(100):
                            assert c.lookup(chains[i]).hits == blocks
                            i = (i + 1) % prompts
                        n += 100
                    py.append(n / (time.perf_counter() - start))
                else:
                    out = subprocess.run(
                        [kvtier_cli, "bench", "--op", "lookup", "--seconds", str(seconds),
                         "--json"] + cpp_args, capture_output=True, text=True, check=True)
                    cpp.append(json.loads(out.stdout)["results"]["lookup"]["ops_per_s"])
                hits = hits_per_lookup(before)
                assert hits == blocks, f"{leg} lookups hit {hits:.1f} of {blocks} keys"
    ratio = statistics.median(py) / statistics.median(cpp)
    worst = min(p / q for p, q in zip(py, cpp))  # a round's two legs ran back to back
    print(f"lookup, 64 keys (all hits), 1 client: Python {statistics.median(py):,.0f} ops/s, "
          f"C++ client {statistics.median(cpp):,.0f} ops/s: {ratio:.2f}x (goal >= 0.9); "
          f"worst round {worst:.2f}x")
    return {"python_ops_per_s": py, "cpp_ops_per_s": cpp, "ratio": ratio, "worst_round": worst}


# ---- the model -------------------------------------------------------------------


def bench_model(dtype: torch.dtype) -> LlamaForCausalLM:
    """A ~25M-parameter Llama (8 layers, GQA 8:2, head dim 64), seeded random weights."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536,
                         num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=16384)
    return LlamaForCausalLM(config).to(dtype).eval()


# ---- load --------------------------------------------------------------------------


def bench_load(sock: str, rounds: int, context: int) -> dict:
    model = bench_model(torch.float32)
    ids = torch.randint(0, 32000, (1, context + 1), generator=torch.Generator().manual_seed(2))
    with kvtier.hf.PrefixCache(model, model_id="kvtier-bench/llama-25m", socket=sock) as cache:
        with torch.no_grad():
            cache.generate(ids, max_new_tokens=1)
        nbytes = cache.layout.bytes_per_token * context
        # The peers: memcpy of the same bytes from a warm source (as the
        # arena's blocks are) into a new buffer (as load() allocates the
        # cache's: page faults included), alternating with the loads so that
        # both meet the same allocator; and into a buffer written before (no
        # page faults: memcpy's best).
        src = torch.ones(nbytes, dtype=torch.uint8)
        warm = torch.empty(nbytes, dtype=torch.uint8).fill_(0)
        load, cold_copy, warm_copy = [], [], []
        for _ in range(rounds):
            t = time.perf_counter()
            past, n = cache.load(ids)
            load.append(nbytes / (time.perf_counter() - t) / 1e9)
            assert n == context
            del past
            t = time.perf_counter()
            dst = torch.empty(nbytes, dtype=torch.uint8)
            ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)
            cold_copy.append(nbytes / (time.perf_counter() - t) / 1e9)
            del dst
            t = time.perf_counter()
            ctypes.memmove(warm.data_ptr(), src.data_ptr(), nbytes)
            warm_copy.append(nbytes / (time.perf_counter() - t) / 1e9)
    med = statistics.median
    ratio = med(load) / med(warm_copy)
    print(f"load of a {context}-token prefix ({nbytes / 2**20:.0f} MiB, "
          f"{nbytes // cache.layout.block_bytes} blocks) into a DynamicCache: {med(load):.2f} GB/s; "
          f"memcpy of the same bytes into a written buffer {med(warm_copy):.2f} GB/s: "
          f"{ratio:.2f}x (goal >= 0.5); into a new buffer {med(cold_copy):.2f} GB/s "
          f"(page faults): {med(load) / med(cold_copy):.2f}x")
    return {"load_gbps": load, "memcpy_new_buffer_gbps": cold_copy,
            "memcpy_written_buffer_gbps": warm_copy, "ratio": ratio, "bytes": nbytes}


# ---- ttft ----------------------------------------------------------------------------


def bench_ttft(sock: str, rounds: int, context: int) -> dict:
    model = bench_model(torch.float32)
    gen = torch.Generator().manual_seed(3)
    prefix = torch.randint(0, 32000, (1, context), generator=gen)

    def request() -> torch.Tensor:  # the shared prefix and a new question of 32 tokens
        return torch.cat([prefix, torch.randint(0, 32000, (1, 32), generator=gen)], 1)

    def first_token(ids: torch.Tensor, **kw) -> float:
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=1, do_sample=False, **kw)
        return time.perf_counter() - t

    results = {"recompute": [], "in_process": [], "kvtier": []}
    with kvtier.hf.PrefixCache(model, model_id="kvtier-bench/llama-25m", socket=sock) as cache:
        with torch.no_grad():  # the prefix, once: cached in kvtierd and in-process
            out = model(prefix, use_cache=True)
            cache.store(prefix[0], out.cache)
        kept: DynamicCache = out.cache
        for r in range(rounds):
            legs = ["recompute", "in_process", "kvtier"]
            for leg in legs[r % 3:] + legs[: r % 3]:
                ids = request()
                if leg == "recompute":
                    results[leg].append(first_token(ids))
                elif leg == "in_process":
                    t = time.perf_counter()
                    past = copy.deepcopy(kept)  # generate() extends the cache it is given
                    results[leg].append(time.perf_counter() - t + first_token(
                        ids, **{cache.cache_kwarg: past}))
                else:  # what PrefixCache.generate does before the first token
                    t = time.perf_counter()
                    past, cached = cache.load(ids)
                    assert cached == context
                    results[leg].append(time.perf_counter() - t + first_token(
                        ids, **{cache.cache_kwarg: past}))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"time to first token, {context}-token cached prefix + 32 new tokens: "
          f"recompute {med['recompute'] * 1e3:.0f} ms, in-process reuse "
          f"{med['in_process'] * 1e3:.1f} ms, kvtier {med['kvtier'] * 1e3:.1f} ms: "
          f"kvtier / in-process {med['kvtier'] / med['in_process']:.2f}x (goal <= 1.5), "
          f"recompute / kvtier {med['recompute'] / med['kvtier']:.1f}x")
    return {"seconds": results, "median": med,
            "kvtier_over_in_process": med["kvtier"] / med["in_process"],
            "recompute_over_kvtier": med["recompute"] / med["kvtier"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=str(REPO / "build-release"))
    p.add_argument("--only", default="lookup,load,ttft")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0, help="per lookup round and leg")
    p.add_argument("--context", type=int, default=4096, help="cached prefix, tokens")
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    report = {"torch_threads": torch.get_num_threads(), "context": a.context}
    with tempfile.TemporaryDirectory(prefix="kvtier-pybench-") as d:
        proc, sock = start_daemon(Path(a.build), d)
        try:
            for name in a.only.split(","):
                fn = {"lookup": lambda: bench_lookup(Path(a.build), sock, a.rounds, a.seconds),
                      "load": lambda: bench_load(sock, a.rounds, a.context),
                      "ttft": lambda: bench_ttft(sock, a.rounds, a.context)}[name]
                report[name] = fn()
        finally:
            proc.terminate()
            proc.wait()
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())

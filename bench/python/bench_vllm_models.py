"""kvtier.vllm on the models it serves: what a sliding window and an fp8 KV cache save.

    .venv/bin/python bench/python/bench_vllm_models.py --build build-test --out models.json

Real vLLM engines (its CPU build, the tests' python/tests/vllm_engine.py driven
by python/tests/vllm_driver.py's Engine; vLLM's own prefix cache off, so that
every hit is kvtierd's) against a kvtierd started here (1 GiB host tier, no SSD,
Prometheus metrics on a free local port). Every byte count is kvtierd's, not a
formula's:

- Sliding window (the tests' tiny Gemma 3: 4 layers, 2 sliding-window with a
  window of 256 tokens and 2 full-attention, fp32; vLLM's hybrid KV cache, one
  kvtier namespace per group). For prompts of P prefix tokens (+ 3), the bytes
  kvtierd's host tier took for the prompt's blocks (``tier.host.used_bytes``,
  the growth: slot bytes, whole 4 KiB pages) and the bytes a hit (the same P
  tokens + 4 others) loaded (each namespace's ``kvtier_namespace_hit_tokens_total``
  growth over its block tokens, times its layout's block bytes), each against
  storing every layer's every block (the layouts the connector logs when it
  attaches, summed over groups, times the prompt's full blocks). Per group,
  which of the prompt's blocks kvtierd holds (one LOOKUP per key). TTFT
  (generate with max_tokens=1) of the hit against recomputing a fresh prompt
  of the same length on an engine without the connector: medians of --repeat
  fresh prompts, a ratio.
- fp8 KV cache (the tests' tiny Llama, kv_cache_dtype fp8): the connector's
  fp8 layout (one byte a value plus a scale table, fp32 per layer x K|V x KV
  head), and the same shape in fp32 (the engines' dtype) and bf16 (16-bit):
  for each, a kvtierd of its own with a --host-capacity tier filled by PUTs of
  distinct blocks until it evicts; the blocks it then holds, times the block
  tokens, per GiB of tier, is the capacity in tokens/GiB. The slot bytes per
  block that the fp8 engine's own stores took are checked against the fill's.
  TTFT of an fp8 hit against fp8 recompute, as above.

Ratios are measured in one run: this machine is shared and absolute times
drift. The default run starts four engines (~40-80 s each on 2 cores): ~4 minutes.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import socket as socketlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

import kvtier  # noqa: E402

from vllm_driver import Engine, connector  # noqa: E402  (the tests' engine driver)
from vllm_engine import TINY, TINY_GEMMA3  # noqa: E402

BLOCK = 128  # vLLM's CPU block, in tokens
GIB = 1 << 30
ATTACHED = re.compile(r"attached to kvtierd at \S+ as '([^']*)' \((Layout\([^)]*\))\)")
WORKER_TOTALS = re.compile(r"kvtier: (\d+) blocks loaded \((\d+) failed, recomputed\), "
                           r"(\d+) stored")
HIT_TOKENS = re.compile(r'^kvtier_namespace_hit_tokens_total\{namespace="\d+",'
                        r'model="((?:[^"\\]|\\.)*)",tier="\w+"\} (\S+)$', re.M)


class Daemon:
    """A kvtierd on a socket of its own in `workdir` (conftest.Daemon's flags)."""

    def __init__(self, build: Path, workdir: Path, name: str, capacity: str,
                 metrics: bool = False) -> None:
        self.socket = str(workdir / f"{name}.sock")
        self.log_path = workdir / f"{name}.log"
        self.port = free_port() if metrics else 0
        cmd = [str(build / "daemon" / "kvtierd"), "--socket", self.socket,
               "--metrics-address", f"127.0.0.1:{self.port}" if metrics else "",
               "--no-reserve-memory", "--busy-poll-us", "0", "--host-capacity", capacity,
               "--ssd-dir", ""]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "listening on" not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("kvtierd did not start:\n" + self.log_path.read_text())
            time.sleep(0.05)
        self.probe = kvtier.Client("bench-probe", kvtier.Layout(1, 1, 32, "fp16", 16),
                                   socket=self.socket, map_arenas=False)

    def stats(self) -> Dict[str, Any]:
        return self.probe.stats()

    def hit_tokens(self) -> Dict[str, int]:
        """Tokens of blocks acquires found, per namespace name (all tiers)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics").read().decode()
        out: Dict[str, int] = {}
        for model, value in HIT_TOKENS.findall(text):
            out[model] = out.get(model, 0) + int(float(value))
        return out

    def settle(self, committed: int, timeout: float = 60) -> Dict[str, Any]:
        """Waits until at least `committed` blocks are committed and the count has
        stood still for a second with nothing pending (the connector's stores are
        asynchronous, one group after another); returns the stats then."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while True:
            s = self.stats()
            n = int(s["committed_blocks"])
            if n != last or s["pending_blocks"] or s["open_allocations"]:
                last, since = n, time.monotonic()
            elif n >= committed and time.monotonic() - since >= 1.0:
                return s
            if time.monotonic() > deadline:
                raise SystemExit(f"kvtierd committed {n} blocks, expected {committed}")
            time.sleep(0.05)

    def stop(self) -> None:
        if getattr(self, "probe", None) is not None:
            self.probe.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def free_port() -> int:
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_layout(text: str) -> kvtier.Layout:
    fields = re.findall(r"(\w+)=(')?([^,')]*)'?", text[len("Layout("):-1])
    kw: Dict[str, Any] = {k: (v if q else int(v)) for k, q, v in fields}
    return kvtier.Layout(**kw)


def attached(engine: Engine) -> Dict[str, kvtier.Layout]:
    """The namespaces the connector attached to, from its log, and their layouts."""
    if not engine.logged("attached to kvtierd"):
        raise SystemExit("the connector did not attach:\n" + engine.log())
    time.sleep(1)  # every group's line
    return {name: parse_layout(layout)
            for name, layout in ATTACHED.findall("".join(engine.lines))}


def worker_totals(engine: Engine) -> Optional[Dict[str, int]]:
    """The worker's shutdown line: blocks loaded, failed, stored (None if not logged)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = WORKER_TOTALS.findall("".join(engine.lines))
        if m:
            loaded, failed, stored = (sum(int(x[i]) for x in m) for i in range(3))
            return {"loaded_blocks": loaded, "load_failed_blocks": failed,
                    "stored_blocks": stored}
        time.sleep(0.1)
    return None


def held_blocks(sock: str, name: str, layout: kvtier.Layout, prompt: List[int]) -> List[int]:
    """Which of the prompt's full blocks namespace `name` holds, one LOOKUP a key."""
    with kvtier.Client(name, layout, socket=sock, map_arenas=False) as c:
        keys = c.block_keys(prompt)
        return [i for i, k in enumerate(keys) if c.lookup([k]).hits]


def recompute_ttfts(model_dir: Path, log: Path, engine_args: Dict[str, Any],
                    lengths: List[int], repeat: int, fresh: Any) -> Dict[int, List[float]]:
    """TTFT of fresh prompts of each length, all computed, on an engine without kvtier."""
    plain = Engine(model_dir, log, **engine_args)
    try:
        plain.generate(fresh(lengths[0]), max_tokens=1)  # one-time set-up
        return {n: [plain.generate(fresh(n), max_tokens=1)["elapsed_s"] for _ in range(repeat)]
                for n in lengths}
    finally:
        plain.close()


def hits(engine: Engine, d: Daemon, prefix_tokens: int, repeat: int, fresh: Any,
         layouts: Dict[str, kvtier.Layout]) -> Dict[str, Any]:
    """`repeat` times: a fresh prompt of prefix + 3 tokens (a miss, stored), then one of
    the same prefix + 4 others (a hit): kvtierd's bytes for each, the hit's TTFT."""
    blocks = (prefix_tokens + 3) // BLOCK  # the stored prompt's full blocks
    hit_blocks = prefix_tokens // BLOCK
    ttft: List[float] = []
    miss: List[float] = []
    stored_bytes, stored_blocks, loaded_bytes, loaded_blocks = [], [], [], []
    held: Dict[str, List[int]] = {}
    loaded_per_group: Dict[str, int] = {}
    for r in range(repeat):
        prefix = fresh(prefix_tokens)
        first, second = prefix + [1, 2, 3], prefix + [4, 5, 6, 7]
        s0 = d.stats()
        out = engine.generate(first, max_tokens=1)
        assert out["cached"] == 0, out
        miss.append(out["elapsed_s"])
        s1 = d.settle(int(s0["committed_blocks"]) + blocks)
        stored_bytes.append(s1["tier.host.used_bytes"] - s0["tier.host.used_bytes"])
        stored_blocks.append(s1["committed_blocks"] - s0["committed_blocks"])
        if r == 0:
            held = {name: held_blocks(d.socket, name, lay, first)
                    for name, lay in layouts.items()}
        h0 = d.hit_tokens()
        out = engine.generate(second, max_tokens=1)
        assert out["cached"] == hit_blocks * BLOCK, out
        ttft.append(out["elapsed_s"])
        h1 = d.hit_tokens()
        got = {name: (h1.get(name, 0) - h0.get(name, 0)) // lay.block_tokens
               for name, lay in layouts.items()}
        loaded_per_group = got
        loaded_blocks.append(sum(got.values()))
        loaded_bytes.append(sum(n * layouts[name].block_bytes for name, n in got.items()))
    all_bytes = sum(lay.block_bytes for lay in layouts.values())  # one block, every layer
    med = statistics.median
    return {"prefix_tokens": prefix_tokens, "stored_prompt_tokens": prefix_tokens + 3,
            "blocks": blocks, "hit_blocks": hit_blocks,
            "layers": sum(lay.layers for lay in layouts.values()),
            "all_layers_blocks_bytes": all_bytes * blocks,
            "stored_bytes": med(stored_bytes), "stored_blocks": med(stored_blocks),
            "stored_share": med(stored_bytes) / (all_bytes * blocks),
            "hit_all_layers_blocks_bytes": all_bytes * hit_blocks,
            "loaded_bytes": med(loaded_bytes), "loaded_blocks": med(loaded_blocks),
            "loaded_share": med(loaded_bytes) / (all_bytes * hit_blocks),
            "held_blocks_per_group": held, "loaded_blocks_per_group": loaded_per_group,
            "ttft_hit_s": med(ttft), "ttft_miss_s": med(miss), "ttft_hit_all_s": ttft}


def run_engine(model_dir: Path, log: Path, engine_args: Dict[str, Any], d: Daemon,
               prefixes: List[int], repeat: int, fresh: Any) -> Tuple[List[Dict[str, Any]],
                                                                     Dict[str, Any]]:
    """The engine with the connector: hits() for each prefix, then its totals against
    kvtierd's over the engine's life."""
    before = d.stats()
    engine = Engine(model_dir, log, **engine_args, **connector(d.socket))
    try:
        engine.generate(fresh(prefixes[0] + 3), max_tokens=1)  # set-up; stored
        layouts = attached(engine)
        d.settle(int(before["committed_blocks"]) + (prefixes[0] + 3) // BLOCK)
        results = [hits(engine, d, n, repeat, fresh, layouts) for n in prefixes]
    finally:
        engine.close()
    after = d.stats()
    totals = {"namespaces": {name: repr(lay) for name, lay in layouts.items()},
              "kvtierd_committed_blocks": after["committed_blocks"] - before["committed_blocks"],
              "kvtierd_acquired_blocks": after["acquired_blocks"] - before["acquired_blocks"],
              "connector_log": worker_totals(engine)}
    return results, totals


def run_sliding(build: Path, workdir: Path, d: Daemon, prefixes: List[int],
                repeat: int) -> Dict[str, Any]:
    rng = random.Random(7)

    def fresh(n: int) -> List[int]:
        return [rng.randrange(1, TINY_GEMMA3["vocab_size"]) for _ in range(n)]

    model_dir = workdir / "tiny-gemma3"
    args: Dict[str, Any] = dict(model_config=TINY_GEMMA3, enable_prefix_caching=False)
    recompute = recompute_ttfts(model_dir, workdir / "gemma3-plain.log", args,
                                [n + 4 for n in prefixes], repeat, fresh)
    results, totals = run_engine(model_dir, workdir / "gemma3-kvtier.log", args, d, prefixes,
                                 repeat, fresh)
    for r in results:
        r["ttft_recompute_s"] = statistics.median(recompute[r["prefix_tokens"] + 4])
        r["ttft_recompute_all_s"] = recompute[r["prefix_tokens"] + 4]
        r["hit_speedup"] = r["ttft_recompute_s"] / r["ttft_hit_s"]
    return {"model": "tiny gemma3", "window": TINY_GEMMA3["sliding_window"],
            "prompts": results, **totals}


def blocks_that_fit(build: Path, workdir: Path, layout: kvtier.Layout,
                    capacity: str) -> Dict[str, Any]:
    """A kvtierd of its own, its host tier filled with distinct blocks of `layout` until it
    evicts: how many it holds, and the slot bytes they take."""
    import numpy as np

    d = Daemon(build, workdir, f"capacity-{layout.dtype}", capacity)
    rng = random.Random(11)
    try:
        with kvtier.Client(f"bench-capacity|{layout.dtype}", layout, socket=d.socket,
                           map_arenas=False) as c:
            batch = 16
            data = np.zeros(batch * layout.block_bytes, np.uint8)
            s = d.stats()
            while s["tier.host.evictions"] == 0:
                c.put(c.block_keys([rng.randrange(1, 1 << 20)
                                    for _ in range(batch * layout.block_tokens)]), data)
                s = d.stats()
        n = int(s["tier.host.blocks"])
        cap = int(s["tier.host.capacity_bytes"])
        return {"layout": repr(layout), "block_bytes": layout.block_bytes,
                "slot_bytes": s["tier.host.used_bytes"] / n, "capacity_bytes": cap,
                "blocks": n, "tokens_per_gib": layout.block_tokens * n * GIB / cap}
    finally:
        d.stop()


def run_fp8(build: Path, workdir: Path, d: Daemon, prefix: int, repeat: int,
            capacity: str) -> Dict[str, Any]:
    rng = random.Random(9)

    def fresh(n: int) -> List[int]:
        return [rng.randrange(1, TINY["vocab_size"]) for _ in range(n)]

    model_dir = workdir / "tiny-llama"
    args: Dict[str, Any] = dict(model_config=TINY, enable_prefix_caching=False,
                                kv_cache_dtype="fp8")
    recompute = recompute_ttfts(model_dir, workdir / "fp8-plain.log", args, [prefix + 4],
                                repeat, fresh)[prefix + 4]
    before = d.stats()
    (result,), totals = run_engine(model_dir, workdir / "fp8-kvtier.log", args, d, [prefix],
                                   repeat, fresh)
    after = d.stats()
    (fp8,) = [parse_layout(v) for v in totals["namespaces"].values()]
    assert fp8.dtype.startswith("fp8"), fp8
    layouts = {"fp8": fp8}
    for dtype in ("fp32", "bf16"):
        layouts[dtype] = kvtier.Layout(fp8.layers, fp8.kv_heads, fp8.head_dim, dtype,
                                       fp8.block_tokens)
    fit = {name: blocks_that_fit(build, workdir, lay, capacity) for name, lay in layouts.items()}
    # The slot bytes each block of the engine's own fp8 stores took.
    engine_slot = ((after["tier.host.used_bytes"] - before["tier.host.used_bytes"])
                   / totals["kvtierd_committed_blocks"])
    med = statistics.median
    return {"model": "tiny llama", "kv_cache_dtype": "fp8", "capacity": fit,
            "fp8_scale_bytes": fp8.scale_bytes, "engine_fp8_slot_bytes": engine_slot,
            "fp8_vs_16bit": fit["fp8"]["tokens_per_gib"] / fit["bf16"]["tokens_per_gib"],
            "fp8_vs_fp32": fit["fp8"]["tokens_per_gib"] / fit["fp32"]["tokens_per_gib"],
            "hit": result, "ttft_recompute_s": med(recompute), "ttft_recompute_all_s": recompute,
            "hit_speedup": med(recompute) / result["ttft_hit_s"], **totals}


def table(out: Dict[str, Any]) -> str:
    lines = []
    if "sliding_window" in out:
        sw = out["sliding_window"]
        lines += [f"Sliding window: tiny Gemma 3 (4 layers: 2 sliding, window {sw['window']}, "
                  "2 full; fp32), one namespace per KV cache group", "",
                  "| prompt tokens | full blocks | every layer, every block | stored | "
                  "stored ÷ all | hit: loaded | loaded ÷ all | blocks held (full / window) | "
                  "TTFT recompute | TTFT hit | recompute ÷ hit |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
        for r in sw["prompts"]:
            held = r["held_blocks_per_group"]
            full = [v for k, v in held.items() if k.endswith("-full")]
            window = [v for k, v in held.items() if "-window" in k]
            groups = f"{len(full[0])} / {len(window[0])} {window[0]}" if full and window else "?"
            lines.append(
                f"| {r['stored_prompt_tokens']} | {r['blocks']} | "
                f"{r['all_layers_blocks_bytes'] / 2**20:.2f} MiB | "
                f"{r['stored_bytes'] / 2**20:.2f} MiB | {r['stored_share']:.3f} | "
                f"{r['loaded_bytes'] / 2**20:.2f} MiB | {r['loaded_share']:.3f} | {groups} | "
                f"{r['ttft_recompute_s'] * 1e3:.1f} ms | {r['ttft_hit_s'] * 1e3:.1f} ms | "
                f"{r['hit_speedup']:.2f}x |")
        lines += ["", life(sw), ""]
    if "fp8" in out:
        f = out["fp8"]
        cap = f["capacity"]
        lines += [f"fp8 KV cache: tiny Llama (2 layers, 2 KV heads of 32), a "
                  f"{cap['fp8']['capacity_bytes'] / 2**20:.0f} MiB host tier filled until it "
                  "evicts", "",
                  "| layout | block bytes | slot bytes | blocks held | tokens/GiB | "
                  "fp8 ÷ this |", "|---|---:|---:|---:|---:|---:|"]
        for name in ("fp8", "bf16", "fp32"):
            c = cap[name]
            lines.append(f"| {name} | {c['block_bytes']:,} | {c['slot_bytes']:,.0f} | "
                         f"{c['blocks']:,} | {c['tokens_per_gib']:,.0f} | "
                         f"{cap['fp8']['tokens_per_gib'] / c['tokens_per_gib']:.3f} |")
        h = f["hit"]
        by_bytes = cap["bf16"]["block_bytes"] / cap["fp8"]["block_bytes"]
        lines += ["", f"fp8 block: {f['fp8_scale_bytes']} bytes of scales (by block bytes "
                      f"alone fp8 ÷ bf16 would be {by_bytes:.3f}; slots are whole 4 KiB pages); "
                      f"the engine's own fp8 stores took {f['engine_fp8_slot_bytes']:,.0f} slot "
                      "bytes a block.",
                  f"fp8 TTFT, {h['stored_prompt_tokens'] + 1}-token prompt, "
                  f"{h['hit_blocks']} blocks from kvtierd: hit {h['ttft_hit_s'] * 1e3:.1f} ms, "
                  f"recompute {f['ttft_recompute_s'] * 1e3:.1f} ms: recompute ÷ hit "
                  f"{f['hit_speedup']:.2f}x", life(f)]
    return "\n".join(lines)


def life(r: Dict[str, Any]) -> str:
    log = r["connector_log"]
    return (f"kvtierd over the engine's life: {r['kvtierd_committed_blocks']} blocks committed, "
            f"{r['kvtierd_acquired_blocks']} acquired; the connector's shutdown line: "
            + (f"{log['stored_blocks']} stored, {log['loaded_blocks']} loaded" if log
               else "not logged"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build-test")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--only", default="sliding,fp8", help="sliding, fp8 or both")
    ap.add_argument("--prefixes", default="900,1800",
                    help="sliding window: prefix tokens of the prompts (under 2045)")
    ap.add_argument("--fp8-prefix", type=int, default=1536)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--host-capacity", default="64MiB", help="fp8: the tier filled")
    args = ap.parse_args()
    build = args.build.resolve()
    only = set(args.only.split(","))
    out: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kvtier-bench-models-") as tmp:
        workdir = Path(tmp)
        d = Daemon(build, workdir, "kvtierd", "1GiB", metrics=True)
        try:
            if "sliding" in only:
                out["sliding_window"] = run_sliding(
                    build, workdir, d, [int(x) for x in args.prefixes.split(",")], args.repeat)
            if "fp8" in only:
                out["fp8"] = run_fp8(build, workdir, d, args.fp8_prefix, args.repeat,
                                     args.host_capacity)
        finally:
            d.stop()
    print(table(out), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

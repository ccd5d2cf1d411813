"""vLLM with kvtier.vllm: time to first token with a prefix hit, against recompute.

    .venv/bin/python bench/python/bench_vllm.py --build build-release [--models tiny,0.5b]

For each model (a Llama made from a config: "tiny" is the tests' model,
"0.5b" a Qwen2-0.5B-sized Llama with random weights), two vLLM engines (its
CPU build) run one after the other against one kvtierd:

- without the connector (vLLM's prefix cache off): the time to first token of
  fresh prompts of PREFIX+8 tokens, all computed: the *recompute* time;
- with the connector (vLLM's prefix cache off, so that every hit is kvtierd's):
  the same kind of fresh prompts, which miss (the connector's *no-hit
  overhead* is their time against the first engine's), and after each, a
  prompt sharing its PREFIX tokens with another tail, whose prefix comes from
  kvtierd's host tier: the *hit* time.

The time to first token is generate() with max_tokens=1, medians of --repeat
prompts. Results are ratios measured in the same run (recompute / hit, miss
with / without the connector), since this machine's absolute times drift.
The two engines are two processes, whose speeds differ by more than the
connector's cost on a miss; so the bench also times that cost alone (the
scheduler's block_keys + LOOKUP of the prompt, what a miss adds before its
first token) as a share of the recompute time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

from vllm_driver import Engine, connector  # noqa: E402  (the tests' engine driver)
from vllm_engine import TINY  # noqa: E402

MODELS: Dict[str, Dict[str, Any]] = {
    "tiny": {"config": TINY, "prefix": 1536, "engine": {"max_model_len": 2048}},
    # Qwen2-0.5B's shape (24 layers, 14 query and 2 KV heads of 64), a 32k vocabulary.
    "0.5b": {"config": dict(vocab_size=32000, hidden_size=896, intermediate_size=4864,
                            num_hidden_layers=24, num_attention_heads=14,
                            num_key_value_heads=2, max_position_embeddings=4096),
             "prefix": 1024, "engine": {"load_format": "dummy", "max_model_len": 4096}},
}


def start_daemon(build: Path, workdir: Path) -> subprocess.Popen:
    sock = workdir / "kvtierd.sock"
    log = open(workdir / "kvtierd.log", "wb")
    proc = subprocess.Popen([str(build / "daemon" / "kvtierd"), "--socket", str(sock),
                             "--metrics-address", "", "--host-capacity", "2GiB", "--ssd-dir",
                             ""], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if "listening on" in (workdir / "kvtierd.log").read_text(errors="replace"):
            return proc
        time.sleep(0.05)
    raise SystemExit("kvtierd did not start: " + (workdir / "kvtierd.log").read_text())


def run_model(name: str, spec: Dict[str, Any], sock: str, workdir: Path,
              repeat: int) -> Dict[str, Any]:
    rng = random.Random(7)
    vocab = spec["config"]["vocab_size"]
    n = spec["prefix"]
    blocks = n // 128

    def fresh() -> List[int]:
        return [rng.randrange(1, vocab) for _ in range(n + 8)]

    model_dir = workdir / name
    engine_args = dict(spec["engine"], model_config=spec["config"], enable_prefix_caching=False)
    plain = Engine(model_dir, workdir / f"{name}-plain.log", **engine_args)
    try:
        plain.generate(fresh(), max_tokens=1)  # the first forward pays one-time set-up
        recompute = [plain.generate(fresh(), max_tokens=1)["elapsed_s"] for _ in range(repeat)]
    finally:
        plain.close()
    engine = Engine(model_dir, workdir / f"{name}-kvtier.log", **engine_args, **connector(sock))
    miss: List[float] = []
    hit: List[float] = []
    try:
        committed = engine.wait_committed(sock, 0)  # the daemon's count so far
        engine.generate(fresh(), max_tokens=1)
        committed += blocks
        engine.wait_committed(sock, committed)
        for _ in range(repeat):
            prompt = fresh()
            out = engine.generate(prompt, max_tokens=1)
            assert out["cached"] == 0, out
            miss.append(out["elapsed_s"])
            committed += blocks
            engine.wait_committed(sock, committed)
            out = engine.generate(prompt[:n] + [1, 2, 3, 4, 5, 6, 7, 8], max_tokens=1)
            assert out["cached"] == n, out
            hit.append(out["elapsed_s"])
    finally:
        engine.close()
    # What the connector adds to a request that misses, before its first token:
    # the scheduler keys the prompt's full blocks and looks them up (one LOOKUP).
    import kvtier

    cfg = spec["config"]
    heads = cfg["num_attention_heads"]
    layout = kvtier.Layout(cfg["num_hidden_layers"], cfg["num_key_value_heads"],
                           cfg["hidden_size"] // heads, "fp32", 128)
    lookup = []
    with kvtier.Client(name + "-probe", layout, socket=sock, map_arenas=False) as c:
        for _ in range(200):
            prompt = fresh()
            t = time.perf_counter()
            c.lookup(c.block_keys(prompt[:n]))
            lookup.append(time.perf_counter() - t)
    med = statistics.median
    return {"model": name, "prefix_tokens": n, "prompt_tokens": n + 8,
            "ttft_recompute_s": med(recompute), "ttft_hit_s": med(hit),
            "ttft_miss_with_connector_s": med(miss),
            "hit_speedup": med(recompute) / med(hit),
            "no_hit_overhead": med(miss) / med(recompute) - 1,
            "lookup_s": med(lookup), "lookup_share_of_ttft": med(lookup) / med(recompute)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build-release")
    ap.add_argument("--models", default="tiny,0.5b")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    with tempfile.TemporaryDirectory(prefix="kvtier-bench-vllm-") as tmp:
        workdir = Path(tmp)
        daemon = start_daemon(args.build.resolve(), workdir)
        try:
            for name in args.models.split(","):
                r = run_model(name, MODELS[name], str(workdir / "kvtierd.sock"), workdir,
                              args.repeat)
                print(json.dumps(r), flush=True)
                print(f"{name}: {r['prompt_tokens']}-token prompt, {r['prefix_tokens']} in "
                      f"kvtierd: TTFT {r['ttft_hit_s'] * 1e3:.1f} ms with the hit, "
                      f"{r['ttft_recompute_s'] * 1e3:.1f} ms recomputed "
                      f"({r['hit_speedup']:.1f}x); no hit: {r['no_hit_overhead'] * 100:+.1f}% "
                      f"with the connector (another process); its lookup "
                      f"{r['lookup_s'] * 1e6:.0f} us = {r['lookup_share_of_ttft'] * 100:.2f}% "
                      f"of the TTFT", flush=True)
        finally:
            daemon.terminate()
            daemon.wait()


if __name__ == "__main__":
    main()

"""A serving benchmark: the real servers, recorded traffic, configurations side by side.

    .venv/bin/python -m bench.serving.run --out bench-results/serving \\
        --trace mooncake --requests 200 --time-scale 0.3 \\
        --configs vllm,kvtier-host,kvtier-ssd

Each configuration starts its servers (kvtierd from the build, ``vllm serve``
as the README writes it, over a model this harness writes to disk), sends the
same requests, scrapes every /metrics once a second and writes
``config-<n>-<name>.json``; at the end ``table.md``, ``summary.json`` and the
plots (report.py). Every request's greedy output is compared, token for
token, with the baseline configuration's (the first one).

Configurations (``--configs``, comma-separated, in the order run):

- ``vllm``: vLLM alone, its prefix cache on, its KV cache ``--kv-blocks``
  blocks (by default a quarter of the trace's working set, or less).
- ``kvtier-host``: the same vLLM with kvtier.vllm; kvtierd's host tier holds
  the working set (``--host``), no SSD.
- ``kvtier-ssd``: host tier smaller than the working set (``--small-host``)
  over an SSD tier (``--ssd``). ``kvtier-ssd-sync``: the same with SSD hits
  loaded inside the step (``load_async: never``), and ``kvtier-ssd-nohints``
  without hints: what asynchronous loads and hints are worth.
- ``kvtier-remote``: host tier smaller than the working set (``--small-host``)
  over a remote tier, a Redis Cluster this harness starts (3 masters with a
  replica each, redis_cluster.py); no SSD.
- ``vllm-2x-rr``, ``vllm-2x-affine``, ``kvtier-2x-rr``, ``kvtier-2x-affine``:
  two vLLM replicas (one core each) behind the harness's router, round robin
  or prefix-affine (a session always to the same replica), without or with one
  kvtierd shared by both.
- ``vllm-fits``, ``kvtier-fits``: vLLM's cache holds the whole working set
  (``--big-kv-blocks``): what kvtier costs when it cannot help.
- ``vllm-offload``: vLLM's own CPU offloading (``--kv-offloading-size``).
- ``lmcache``: LMCache's connector (LMCacheConnectorV1, CPU backend).

``--faults`` (kvtier configurations): ``restart@S`` kills kvtierd with SIGKILL
S seconds into the load and starts it again (repeatable), ``ssd-read-errors=F``
fails that fraction of kvtierd's SSD reads (its test-only fault setting),
``redis-kill@S`` (kvtier-remote) SIGKILLs the Redis master holding the most
keys S seconds in (its replica is promoted; what it had not replicated is lost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import model as models
from . import report, traces
from .loadgen import Router, Scraper, result_dicts, run_load
from .redis_cluster import RedisCluster, remote_args
from .servers import Kvtierd, VllmServer, kvtier_connector, offloading_connector

BLOCK = 128  # vLLM's block size on the CPU, and kvtier's block here
KV_BYTES_PER_TOKEN = {"tiny": 2 * 2 * 2 * 32 * 4, "small": 4 * 2 * 2 * 64 * 4}


@dataclass
class Config:
    name: str
    order: int
    replicas: int = 1
    routing: str = "round_robin"
    connector: Optional[str] = None  # None, "kvtier", "offload", "lmcache"
    extra: Dict[str, Any] = field(default_factory=dict)  # kv_connector_extra_config
    host: Optional[str] = None  # kvtierd's host tier
    ssd: Optional[str] = None  # kvtierd's SSD tier
    remote: bool = False  # kvtierd's remote tier, on a Redis Cluster of the run's own
    kv_blocks: int = 0
    faults: List[str] = field(default_factory=list)


def configs(names: List[str], a: argparse.Namespace) -> List[Config]:
    out = []
    for i, n in enumerate(names):
        c = Config(name=n, order=i, kv_blocks=a.kv_blocks)
        if n.endswith("-fits"):
            c.kv_blocks = a.big_kv_blocks
        if "-2x-" in n:
            c.replicas = 2
            c.routing = "prefix_affine" if n.endswith("affine") else "round_robin"
        if n.startswith("kvtier"):
            c.connector = "kvtier"
            c.host = a.host
            if n.startswith("kvtier-ssd"):
                c.host, c.ssd = a.small_host, a.ssd
            if n.startswith("kvtier-remote"):
                c.host, c.remote = a.small_host, True
            if n.endswith("-sync"):  # SSD hits loaded inside the step, as before
                c.extra["load_async"] = "never"
            if n.endswith("-nohints"):
                c.extra["hints"] = False
            c.faults = list(a.faults)
        elif n == "vllm-offload":
            c.connector = "offload"
        elif n == "lmcache":
            c.connector = "lmcache"
        elif not (n == "vllm" or n.startswith("vllm-")):
            raise SystemExit(f"unknown configuration {n!r}")
        out.append(c)
    return out


def install_lmcache(out: Path) -> Path:
    """LMCache and what it needs beyond the project's environment, pinned
    (peers-requirements.txt), into <out>/peers/lmcache: once."""
    import subprocess

    target = out / "peers" / "lmcache"
    reqs = Path(__file__).with_name("peers-requirements.txt")
    stamp = target / ".installed"
    if stamp.exists() and stamp.read_text() == reqs.read_text():
        return target
    print(f"  installing LMCache ({reqs.name}) into {target}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-deps", "--only-binary", ":all:", "--target", str(target), "-r",
                    str(reqs)], check=True)
    stamp.write_text(reqs.read_text())
    return target


def warm_up(urls: List[str], model: str, vocab: int) -> None:
    """One short request per server: first-call costs out of the measurement."""
    import urllib.request

    rng = random.Random(12345)
    for u in urls:
        body = json.dumps({"model": model, "prompt": [rng.randrange(3, vocab) for _ in range(300)],
                           "max_tokens": 4, "temperature": 0}).encode()
        req = urllib.request.Request(u + "/v1/completions", data=body,
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            r.read()


def fault_thread(cfg: Config, daemon: Optional[Kvtierd], redis: Optional[RedisCluster],
                 events: List[dict], t0: float,
                 stop: threading.Event) -> Optional[threading.Thread]:
    timed = []  # (seconds in, what)
    for f in cfg.faults:
        if f.startswith("restart@") and daemon is not None:
            timed.append((float(f.split("@", 1)[1]), "restart"))
        elif f.startswith("redis-kill@") and redis is not None:
            timed.append((float(f.split("@", 1)[1]), "redis-kill"))
    if not timed:
        return None

    def run() -> None:
        for at, what in sorted(timed):
            if stop.wait(max(0.0, at - (time.monotonic() - t0))):
                return
            t = time.monotonic() - t0
            if what == "restart":
                assert daemon is not None
                took = daemon.kill9_and_restart()
                events.append({"t": t, "fault": "kvtierd SIGKILL + restart",
                               "back_after_s": took})
                print(f"  [{cfg.name}] kvtierd killed (SIGKILL) and restarted: serving again "
                      f"after {took:.2f} s", flush=True)
            else:
                assert redis is not None
                r = redis.kill_a_master()
                events.append({"t": t, "fault": "Redis master SIGKILL", **r})
                print(f"  [{cfg.name}] Redis master :{r['port']} killed (SIGKILL) with "
                      f"{r['keys_on_it']} keys; cluster healthy again after "
                      f"{r['healthy_after_s']:.2f} s", flush=True)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def run_config(cfg: Config, reqs: List[traces.Request], a: argparse.Namespace,
               model_dir: Path, out: Path) -> Dict[str, Any]:
    work = out / "work" / cfg.name
    work.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        daemon = None
        redis = None
        if cfg.connector == "kvtier":
            extra = []
            if cfg.remote:
                redis = stack.enter_context(RedisCluster(work / "redis"))
                extra += remote_args(redis, work)
            for f in cfg.faults:
                if f.startswith("ssd-read-errors=") and cfg.ssd:
                    extra += ["--ssd-fault-read-errors", f.split("=", 1)[1]]
            daemon = Kvtierd(work, host=cfg.host or "1GiB", ssd=cfg.ssd, extra=extra)
            stack.enter_context(daemon)
        servers = []
        for k in range(cfg.replicas):
            conn: Optional[Dict[str, Any]] = None
            env: Dict[str, str] = {}
            if cfg.connector == "kvtier":
                assert daemon is not None
                conn = kvtier_connector(daemon.socket, **cfg.extra)
            elif cfg.connector == "offload":
                conn = offloading_connector(int(a.offload_gib * 2**30))
            elif cfg.connector == "lmcache":
                conn = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
                env = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_CHUNK_SIZE": str(BLOCK),
                       "LMCACHE_MAX_LOCAL_CPU_SIZE": str(a.offload_gib),
                       "PYTHONPATH": str(install_lmcache(out))}
            cores = None if cfg.replicas == 1 else str(k % (os.cpu_count() or 1))
            srv = VllmServer(model_dir, work / f"vllm{k}.log", kv_blocks=cfg.kv_blocks,
                             connector=conn, cores=cores, env=env)
            print(f"  [{cfg.name}] starting vllm serve #{k} (log {srv.log_path})", flush=True)
            stack.enter_context(srv)
            servers.append(srv)
        urls = [s.url for s in servers]
        warm_up(urls, str(model_dir), models.MODELS[a.model]["vocab_size"])
        events: List[dict] = []
        stop = threading.Event()
        with Scraper(urls, daemon.metrics_url if daemon else None) as scraper:
            t0 = time.monotonic()
            th = fault_thread(cfg, daemon, redis, events, t0, stop)
            t_start = time.perf_counter()
            results = asyncio.run(run_load(reqs, urls, str(model_dir),
                                           Router(urls, cfg.routing), a.concurrency,
                                           label=cfg.name))
            wall = time.perf_counter() - t_start
            stop.set()
            if th:
                th.join()
            time.sleep(1.5)  # one more scrape after the last request
    res = {"config": cfg.__dict__, "wall_s": wall, "results": result_dicts(results),
           "samples": scraper.samples, "events": events,
           "restarts": daemon.restarts if daemon else 0}
    path = out / f"config-{cfg.order:02d}-{cfg.name}.json"
    path.write_text(json.dumps(res))
    return res


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("bench-results/serving"))
    p.add_argument("--trace", choices=("mooncake", "agent"), default="mooncake")
    p.add_argument("--requests", type=int, default=200, help="request-count cap")
    p.add_argument("--time-scale", type=float, default=0.3,
                   help="arrival times are the trace's times this factor (open loop)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="closed loop: this many users instead of the trace's arrivals")
    p.add_argument("--configs", default="vllm,kvtier-host,kvtier-ssd")
    p.add_argument("--model", choices=sorted(models.MODELS), default="small")
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--kv-blocks", type=int, default=0,
                   help="vLLM's KV cache in blocks (default: the working set / 4)")
    p.add_argument("--big-kv-blocks", type=int, default=0,
                   help="for the *-fits configurations (default: 1.25 x the working set)")
    p.add_argument("--host", default="2GiB", help="kvtierd's host tier")
    p.add_argument("--small-host", default="", help="kvtier-ssd's host tier "
                   "(default: a quarter of the working set)")
    p.add_argument("--ssd", default="4GiB", help="kvtier-ssd's SSD tier")
    p.add_argument("--offload-gib", type=float, default=2.0,
                   help="the CPU bytes of vllm-offload and lmcache")
    p.add_argument("--faults", default="",
                   help="restart@S,...,ssd-read-errors=F,redis-kill@S")
    p.add_argument("--max-output", type=int, default=32)
    a = p.parse_args(argv)
    a.faults = [f for f in a.faults.split(",") if f]
    vocab = models.MODELS[a.model]["vocab_size"]
    reqs = traces.load(a.trace, a.requests, a.time_scale, vocab, max_output=a.max_output)
    ws = traces.working_set_tokens(reqs, BLOCK)
    ws_blocks = ws // BLOCK
    if not a.kv_blocks:
        a.kv_blocks = max(80, ws_blocks // 4)
    # vLLM refuses a KV cache that cannot hold one request of its max length
    # (8,192 tokens here) and a block more.
    min_blocks = 8192 // BLOCK + 1
    if a.kv_blocks < min_blocks:
        raise SystemExit(f"--kv-blocks {a.kv_blocks}: vLLM needs at least {min_blocks} blocks "
                         f"(one 8,192-token request and a block more)")
    if not a.big_kv_blocks:
        a.big_kv_blocks = int(ws_blocks * 1.25) + 64
    ws_bytes = ws * KV_BYTES_PER_TOKEN[a.model]
    if not a.small_host:
        a.small_host = f"{max(32, ws_bytes // 4 // 2**20)}MiB"
    a.out.mkdir(parents=True, exist_ok=True)
    model_dir = a.model_dir or (a.out / "models" / a.model)
    models.write_model(a.model, model_dir)
    names = [n for n in a.configs.split(",") if n]
    cfgs = configs(names, a)
    meta = {"trace": a.trace, "requests": len(reqs), "time_scale": a.time_scale,
            "concurrency": a.concurrency, "model": a.model, "model_config": models.MODELS[a.model],
            "working_set_tokens": ws, "working_set_bytes": ws_bytes,
            "prompt_tokens": sum(len(r.prompt) for r in reqs), "kv_blocks": a.kv_blocks,
            "big_kv_blocks": a.big_kv_blocks, "host": a.host, "small_host": a.small_host,
            "ssd": a.ssd, "faults": a.faults, "cpus": os.cpu_count()}
    (a.out / "run.json").write_text(json.dumps(meta, indent=1))
    print(f"serving run: {len(reqs)} requests of the {a.trace} trace, "
          f"{meta['prompt_tokens']} prompt tokens, working set {ws} tokens "
          f"({ws_bytes / 2**20:.0f} MiB of KV) = {ws_blocks / a.kv_blocks:.1f}x vLLM's "
          f"{a.kv_blocks} blocks; configurations {', '.join(names)}", flush=True)
    for old in a.out.glob("config-*.json"):
        old.unlink()
    for cfg in cfgs:
        print(f"[{cfg.name}]", flush=True)
        try:
            run_config(cfg, reqs, a, model_dir, a.out)
        except RuntimeError as e:  # a peer that does not start here: say why, go on
            print(f"  [{cfg.name}] did not run: {e}", flush=True)
            (a.out / f"failed-{cfg.name}.txt").write_text(str(e))
    print(report.report(a.out, names[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

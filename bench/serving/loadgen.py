"""The client side of a serving run: requests through vLLM's OpenAI-compatible
API with streaming, timed at the client, and the servers' /metrics scraped
while they run.

- Open loop: each request is sent at its arrival time (the trace's, scaled).
  Closed loop: N users, each sending the next request of the trace when its
  previous one finished.
- A router picks the server of each request: ``round_robin``, or
  ``prefix_affine`` (every request of a session to the same server, as a
  KV-aware router would send them).
- Each request's result: time to first token (the first streamed token),
  time per output token (the rest, per token), the output token ids and, per
  token, the two best log-probabilities (to tell a near-tie from a wrong block),
  and the prompt tokens vLLM reports as cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional

import aiohttp

from .traces import Request


@dataclass
class Result:
    index: int
    server: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float  # mean time per output token after the first (0 for one token)
    e2e_s: float
    sent_s: float  # from the start of the run
    tokens: List[int] = field(default_factory=list)
    top2: List[List[float]] = field(default_factory=list)  # per token: best two logprobs
    error: str = ""


class Router:
    def __init__(self, servers: List[str], policy: str) -> None:
        if policy not in ("round_robin", "prefix_affine"):
            raise ValueError(f"unknown routing policy {policy!r}")
        self.servers, self.policy = servers, policy

    def pick(self, req: Request) -> int:
        if len(self.servers) == 1:
            return 0
        if self.policy == "round_robin":
            return req.index % len(self.servers)
        digest = hashlib.blake2b(req.session.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % len(self.servers)


async def one_request(session: aiohttp.ClientSession, url: str, model: str, req: Request,
                      server: int, t0: float, timeout_s: float) -> Result:
    body = {"model": model, "prompt": req.prompt, "max_tokens": req.max_tokens,
            "temperature": 0, "stream": True, "logprobs": 2, "return_token_ids": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    res = Result(index=req.index, server=server, prompt_tokens=len(req.prompt),
                 cached_tokens=0, output_tokens=0, ttft_s=0.0, tpot_s=0.0, e2e_s=0.0,
                 sent_s=sent - t0)
    first = last = 0.0
    try:
        async with session.post(url + "/v1/completions", json=body,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return res
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = str(chunk["error"])[:300]
                    break
                usage = chunk.get("usage")
                if usage:
                    details = usage.get("prompt_tokens_details") or {}
                    res.cached_tokens = int(details.get("cached_tokens") or 0)
                for choice in chunk.get("choices") or []:
                    ids = choice.get("token_ids") or []
                    if not ids:
                        continue
                    now = time.perf_counter()
                    if not res.tokens:
                        first = now
                    last = now
                    res.tokens.extend(ids)
                    lp = choice.get("logprobs") or {}
                    for top in lp.get("top_logprobs") or []:
                        best = sorted((top or {}).values(), reverse=True)[:2]
                        res.top2.append([float(v) for v in best])
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    end = time.perf_counter()
    res.output_tokens = len(res.tokens)
    if res.tokens:
        res.ttft_s = first - sent
        if len(res.tokens) > 1:
            res.tpot_s = (last - first) / (len(res.tokens) - 1)
    elif not res.error:
        res.error = "no tokens streamed"
    res.e2e_s = end - sent
    return res


class Progress:
    """One line every `every_s` seconds: requests done, hit rate so far, elapsed."""

    def __init__(self, total: int, label: str, every_s: float = 5.0) -> None:
        self.total, self.label, self.every_s = total, label, every_s
        self.done = self.errors = self.prompt = self.cached = 0
        self.t0 = time.monotonic()
        self._last = 0.0

    def add(self, r: Result) -> None:
        self.done += 1
        self.errors += bool(r.error)
        self.prompt += r.prompt_tokens
        self.cached += r.cached_tokens
        now = time.monotonic()
        if now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            hit = self.cached / self.prompt if self.prompt else 0.0
            print(f"  [{self.label}] {self.done}/{self.total} requests, hit rate {hit:.1%}, "
                  f"{self.errors} errors, {now - self.t0:.0f} s", flush=True)


async def run_load(reqs: List[Request], servers: List[str], model: str, router: Router,
                   concurrency: Optional[int] = None, label: str = "",
                   timeout_s: float = 1800.0,
                   on_progress: Optional[Callable[[float], None]] = None) -> List[Result]:
    """Open loop (concurrency None: each request at its arrival) or closed loop."""
    results: List[Optional[Result]] = [None] * len(reqs)
    progress = Progress(len(reqs), label)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        t0 = time.perf_counter()

        async def send(i: int, req: Request) -> None:
            k = router.pick(req)
            r = await one_request(session, servers[k], model, req, k, t0, timeout_s)
            results[i] = r
            progress.add(r)

        if concurrency is None:
            async def at(i: int, req: Request) -> None:
                delay = req.arrival_s - (time.perf_counter() - t0)
                if delay > 0:
                    await asyncio.sleep(delay)
                await send(i, req)

            await asyncio.gather(*(at(i, r) for i, r in enumerate(reqs)))
        else:
            queue = list(enumerate(reqs))
            queue.reverse()

            async def user() -> None:
                while queue:
                    i, req = queue.pop()
                    await send(i, req)

            await asyncio.gather(*(user() for _ in range(concurrency)))
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ metrics

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)')


def parse_prometheus(text: str, prefixes: tuple) -> Dict[str, float]:
    """Samples whose name starts with one of `prefixes`: "name{labels}" -> value."""
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line)
        if m and m.group(1).startswith(prefixes):
            try:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return out


VLLM_METRICS = ("vllm:prefix_cache_", "vllm:external_prefix_cache_", "vllm:prompt_tokens",
                "vllm:num_requests_", "vllm:kv_cache_usage", "vllm:num_preemptions",
                "vllm:kv_offload", "vllm:generation_tokens_total")
KVTIER_METRICS = ("kvtier_lookup_hit_blocks_total", "kvtier_acquire_hit_blocks_total",
                  "kvtier_tier_used_bytes", "kvtier_tier_blocks", "kvtier_committed_blocks",
                  "kvtier_acquired_blocks_total", "kvtier_prefix_tokens_saved_total",
                  "kvtier_lookup_blocks_total", "kvtier_evictions_total",
                  "kvtier_checksum_failures_total", "kvtier_io_errors_total",
                  "kvtier_namespace_", "kvtier_promotions_total", "kvtier_demotions_total",
                  "kvtier_remote_", "kvtier_prefetched_blocks_total")


class Scraper:
    """Polls every server's /metrics once a second, in a thread, while the load runs."""

    def __init__(self, vllm_urls: List[str], kvtier_url: Optional[str],
                 every_s: float = 1.0) -> None:
        self.targets = [(f"vllm{i}", u + "/metrics", VLLM_METRICS)
                        for i, u in enumerate(vllm_urls)]
        if kvtier_url:
            self.targets.append(("kvtierd", kvtier_url, KVTIER_METRICS))
        self.every_s = every_s
        self.samples: List[Dict[str, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic()

    def _run(self) -> None:
        import urllib.request

        while not self._stop.is_set():
            sample: Dict[str, object] = {"t": time.monotonic() - self.t0}
            for name, url, prefixes in self.targets:
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        sample[name] = parse_prometheus(r.read().decode(), prefixes)
                except OSError:
                    sample[name] = None  # down (a restart under way)
            self.samples.append(sample)
            self._stop.wait(self.every_s)

    def __enter__(self) -> "Scraper":
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def result_dicts(results: List[Result]) -> List[dict]:
    return [asdict(r) for r in results]

"""Prefill/decode disaggregation through kvtierd, with real processes: a kvtierd, a
prefill instance of ``vllm serve`` (kvtier.vllm as ``kv_producer``), a decode
instance (``kv_consumer``), both on the tests' tiny seeded Llama (vLLM's CPU
build, one core each), and python/examples/pd_proxy.py in front of them.

A request through the proxy is prefilled by the producer, which stores the
prompt's full blocks into kvtierd and names them in its response's
kv_transfer_params; the consumer loads them (waiting for the store to land)
and computes only the prompt's last partial block and the output. Its output
is a single vLLM engine's without any connector, token for token; vLLM's own
prefix caches are off in both instances, so every hit is kvtierd's.

Prompts are token ids (no tokenizer: --skip-tokenizer-init). One set of
servers serves the whole module: each vLLM start costs about a minute here.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from conftest import REPO, Daemon
from test_vllm import BLOCK, assert_same_output
from vllm_driver import Engine
from vllm_engine import committed

sys.path.insert(0, str(REPO))
from bench.serving.servers import VllmServer, free_port  # noqa: E402

PROXY = REPO / "python" / "examples" / "pd_proxy.py"

_rng = random.Random(7)
# 7 full blocks and 124 tokens more: the consumer's prefill computes those 124,
# then 8 tokens of output take it past 8 blocks, one a kv_both engine would store.
PROMPT = [_rng.randrange(1, 1000) for _ in range(7 * BLOCK + 124)]
# The same first 5 blocks, another tail: 1000 tokens, 7 full blocks, 2 of them new.
SECOND = PROMPT[:5 * BLOCK] + [_rng.randrange(1, 1000) for _ in range(1000 - 5 * BLOCK)]
PROMPTS = {"PROMPT": PROMPT, "SECOND": SECOND}


def cached_tokens(prompt: List[int]) -> int:
    """What the consumer finds: every full block but one token to compute."""
    return (len(prompt) - 1) // BLOCK * BLOCK


def distinct_blocks(prompts: List[List[int]]) -> int:
    """Full blocks of these prompts, a prefix shared by two counted once (kvtierd's
    blocks are keyed by their tokens and every token before them)."""
    return len({tuple(p[:(i + 1) * BLOCK]) for p in prompts for i in range(len(p) // BLOCK)})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-pd") / "tiny-llama"


@pytest.fixture(scope="module")
def baseline(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """Greedy outputs of one engine without any connector (its prefix cache off); it
    writes the model (vllm_engine.TINY) that the servers serve afterwards."""
    log = tmp_path_factory.mktemp("baseline") / "vllm.log"
    engine = Engine(model_dir, log, enable_prefix_caching=False)
    try:
        return {name: engine.generate(p) for name, p in PROMPTS.items()}
    finally:
        engine.close()


def pd_connector(role: str, socket: str) -> Dict[str, Any]:
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": role, "kv_connector_extra_config": {"socket": socket}}


def start_proxy(prefill: str, decode: str, log_path: Path) -> Tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, str(PROXY), "--prefill", prefill, "--decode",
                                 decode, "--port", str(port)], stdout=log,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"pd_proxy.py exited ({proc.returncode}):\n{log_path.read_text()}")
        if "Running on" in log_path.read_text(errors="replace"):
            return proc, url
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"pd_proxy.py did not start in 60 s:\n{log_path.read_text()}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Servers:
    daemon: Daemon
    producer: VllmServer
    consumer: VllmServer
    url: str  # the proxy's
    proxy_log: Path
    model: str
    sent: List[List[int]] = field(default_factory=list)  # prompts sent through the proxy


@pytest.fixture(scope="module")
def pd(model_dir: Path, baseline: Dict[str, Any],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    work = tmp_path_factory.mktemp("pd")
    daemon = Daemon(work, ["--host-capacity", "64MiB", "--host-slab", "1MiB",
                           "--ssd-dir", ""]).start()
    started: List[VllmServer] = []
    proxy: Optional[subprocess.Popen] = None
    try:
        # One after the other (2 cores), each computing on a core of its own.
        for role, core in (("kv_producer", "0"), ("kv_consumer", "1")):
            server = VllmServer(model_dir, work / f"{role}.log",
                                connector=pd_connector(role, daemon.socket),
                                prefix_caching=False, cores=core, max_model_len=2048,
                                extra=["--skip-tokenizer-init", "--enforce-eager"],
                                env={"VLLM_CPU_KVCACHE_SPACE": "1"})
            started.append(server)
            server.start(timeout=900)
        producer, consumer = started
        proxy, url = start_proxy(producer.url, consumer.url, work / "proxy.log")
        yield Servers(daemon, producer, consumer, url, work / "proxy.log", str(model_dir))
    finally:
        if proxy is not None:
            stop(proxy)
        for server in reversed(started):
            server.stop()
        daemon.stop()


def post(url: str, body: Any, timeout: float = 300) -> Tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get(url: str) -> Tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def complete(pd: Servers, prompt: List[int], stream: bool = False) -> Dict[str, Any]:
    """A greedy completion through the proxy: {"tokens", "logprobs", "cached"}, like
    vllm_driver.Engine.generate's."""
    body: Dict[str, Any] = {"model": pd.model, "prompt": prompt, "max_tokens": 8,
                            "temperature": 0, "logprobs": 1, "return_token_ids": True,
                            "return_tokens_as_token_ids": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    status, raw = post(pd.url + "/v1/completions", body)
    assert status == 200, raw.decode(errors="replace")
    pd.sent.append(prompt)
    if stream:  # server-sent events, "data: [DONE]" last
        lines = [line[5:].strip() for line in raw.decode().splitlines()
                 if line.startswith("data:")]
        assert lines and lines[-1] == "[DONE]", raw[-500:]
        chunks = [json.loads(line) for line in lines[:-1]]
    else:
        chunks = [json.loads(raw)]
    out: Dict[str, Any] = {"tokens": [], "logprobs": [], "cached": None}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            out["tokens"] += choice.get("token_ids") or []
            out["logprobs"] += (choice.get("logprobs") or {}).get("token_logprobs") or []
        if chunk.get("usage"):
            out["cached"] = (chunk["usage"].get("prompt_tokens_details") or {}).get(
                "cached_tokens")
    return out


def test_the_decode_instance_loads_the_prefill_instances_blocks(pd, baseline) -> None:
    out = complete(pd, PROMPT)
    assert_same_output(out, baseline["PROMPT"])
    # The consumer found every full block in kvtierd and computed only the last 124
    # prompt tokens (its own prefix cache is off: the hit is kvtierd's).
    assert out["cached"] == cached_tokens(PROMPT) == 7 * BLOCK
    # The producer's response named its 7 blocks (the proxy logs what it passed on).
    assert '"kvtier_prompt_blocks": 7' in pd.proxy_log.read_text(), pd.proxy_log.read_text()
    # kvtierd holds the producer's blocks and no more: the consumer computed 1027
    # tokens (8 full blocks) and stored none of them.
    assert committed(pd.daemon.socket) == distinct_blocks(pd.sent)
    assert "not loaded from kvtierd" not in pd.consumer.log_tail(10**6)


def test_a_second_prompt_sharing_the_prefix_streams_through(pd, baseline) -> None:
    out = complete(pd, SECOND, stream=True)
    assert_same_output(out, baseline["SECOND"])
    assert out["cached"] == cached_tokens(SECOND) == 7 * BLOCK
    assert '"kvtier_prompt_blocks": 7' in pd.proxy_log.read_text()
    # The producer added the 2 blocks of the new tail; the consumer still stored none.
    time.sleep(1)  # a store the consumer had made when the request finished has landed
    assert committed(pd.daemon.socket) == distinct_blocks(pd.sent)
    assert "not loaded from kvtierd" not in pd.consumer.log_tail(10**6)


def test_models_health_and_errors_pass_through(pd, tmp_path) -> None:
    status, raw = get(pd.url + "/v1/models")
    assert status == 200 and json.loads(raw)["data"][0]["id"] == pd.model
    assert get(pd.url + "/health")[0] == 200
    # An instance's error comes back with its status: the prefill refuses a model it
    # does not serve.
    status, raw = post(pd.url + "/v1/completions", {"model": "no-such-model",
                                                     "prompt": [1, 2, 3], "max_tokens": 4})
    assert status == 404, raw
    assert b"no-such-model" in raw
    status, raw = post(pd.url + "/v1/completions", b"not json")
    assert status == 400, raw
    # An instance that cannot be reached is a 502, named.
    dead = f"http://127.0.0.1:{free_port()}"
    proxy, url = start_proxy(dead, pd.consumer.url, tmp_path / "proxy.log")
    try:
        status, raw = post(url + "/v1/completions", {"model": pd.model, "prompt": [1, 2, 3]})
        assert status == 502 and dead.encode() in raw, raw
    finally:
        stop(proxy)

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

Across nodes: kvtierd A has a remote tier on a Redis Cluster the module starts
(3 masters, no replicas), written through, so the producer's blocks reach the
cluster as they are committed; a second kvtierd (B, its own socket and memory,
the same cluster and deployment secret) serves a second consumer, behind a
second proxy from the same producer. B has none of the prompt's blocks but
what it reads from the cluster.

Prompts are token ids (no tokenizer: --skip-tokenizer-init). One set of
servers serves the whole module: each vLLM start costs about a minute here.
"""

from __future__ import annotations

import json
import random
import re
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
from vllm_driver import outputs_without_connector
from vllm_engine import committed

sys.path.insert(0, str(REPO))
from bench.serving.redis_cluster import RedisCluster, write_secret  # noqa: E402
from bench.serving.servers import VllmServer, free_port  # noqa: E402

PROXY = REPO / "python" / "examples" / "pd_proxy.py"

_rng = random.Random(7)
# 7 full blocks and 124 tokens more: the consumer's prefill computes those 124,
# then 8 tokens of output take it past 8 blocks, one a kv_both engine would store.
PROMPT = [_rng.randrange(1, 1000) for _ in range(7 * BLOCK + 124)]
# The same first 5 blocks, another tail: 1000 tokens, 7 full blocks, 2 of them new.
SECOND = PROMPT[:5 * BLOCK] + [_rng.randrange(1, 1000) for _ in range(1000 - 5 * BLOCK)]
# For the consumer on node B: 7 full blocks and 77 tokens, sharing no block with
# the others (its first token differs), so B can have its blocks only from the cluster.
_rng_b = random.Random(11)
ACROSS = [_rng_b.randrange(1, 1000) for _ in range(7 * BLOCK + 77)]
ACROSS[0] = 1000  # outside the other prompts' range(1, 1000)
PROMPTS = {"PROMPT": PROMPT, "SECOND": SECOND, "ACROSS": ACROSS}


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
    return outputs_without_connector(model_dir, log, PROMPTS, enable_prefix_caching=False)[0]


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
    remote: List[str]  # kvtierd's flags for the module's remote tier (A's, less write-through)
    sent: List[List[int]] = field(default_factory=list)  # prompts the producer prefilled


def kvtierd_args(remote: List[str]) -> List[str]:
    return ["--host-capacity", "64MiB", "--host-slab", "1MiB", "--ssd-dir", ""] + remote


def stats(socket: str) -> Dict[str, Any]:
    import kvtier

    with kvtier.Client("probe", kvtier.Layout(1, 1, 32, "fp16", 16), socket=socket,
                       map_arenas=False) as c:
        return dict(c.stats())


def wait_for(cond: Any, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """The nodes' shared remote tier: a real Redis Cluster, 3 masters, no replicas."""
    with RedisCluster(tmp_path_factory.mktemp("redis"), masters=3, replicas=0) as rc:
        yield rc


@pytest.fixture(scope="module")
def pd(model_dir: Path, baseline: Dict[str, Any], cluster: RedisCluster,
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    work = tmp_path_factory.mktemp("pd")
    # Node A's kvtierd: the remote tier, written through, for node B (the last test);
    # the one-node tests see it only as blocks also written to the cluster.
    remote = ["--remote-seeds", cluster.seeds, "--remote-secret-file",
              str(write_secret(work / "deployment.secret"))]
    daemon = Daemon(work, kvtierd_args(remote + ["--remote-write-through"])).start()
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
        yield Servers(daemon, producer, consumer, url, work / "proxy.log", str(model_dir),
                      remote)
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


def complete(pd: Servers, prompt: List[int], stream: bool = False,
             url: Optional[str] = None) -> Dict[str, Any]:
    """A greedy completion through the proxy (pd's, or the one at `url`): {"tokens",
    "logprobs", "cached"}, like vllm_driver.Engine.generate's."""
    body: Dict[str, Any] = {"model": pd.model, "prompt": prompt, "max_tokens": 8,
                            "temperature": 0, "logprobs": 1, "return_token_ids": True,
                            "return_tokens_as_token_ids": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    status, raw = post((url or pd.url) + "/v1/completions", body)
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


@dataclass
class Node:
    """Node B: its own kvtierd over the module's cluster, a consumer on it, and a proxy
    from the module's producer (node A) to that consumer."""
    daemon: Daemon
    consumer: VllmServer
    url: str  # its proxy's
    proxy_log: Path


@pytest.fixture(scope="module")
def node_b(pd: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    work = tmp_path_factory.mktemp("node-b")
    # The same cluster and deployment secret as A; write-back (B's consumer stores
    # nothing) and the default negative TTL (1 s).
    daemon = Daemon(work, kvtierd_args(pd.remote), name="kvtierd-b").start()
    consumer: Optional[VllmServer] = None
    proxy: Optional[subprocess.Popen] = None
    try:
        consumer = VllmServer(Path(pd.model), work / "kv_consumer.log",
                              connector=pd_connector("kv_consumer", daemon.socket),
                              prefix_caching=False, cores="1", max_model_len=2048,
                              extra=["--skip-tokenizer-init", "--enforce-eager"],
                              env={"VLLM_CPU_KVCACHE_SPACE": "1"})
        consumer.start(timeout=900)
        proxy, url = start_proxy(pd.producer.url, consumer.url, work / "proxy.log")
        yield Node(daemon, consumer, url, work / "proxy.log")
    finally:
        if proxy is not None:
            stop(proxy)
        if consumer is not None:
            consumer.stop()
        daemon.stop()


def cached_by_source(server: VllmServer) -> Dict[str, float]:
    """vLLM's vllm:prompt_tokens_cached_by_source_total, by source, from its /metrics."""
    out: Dict[str, float] = {}
    for line in get(server.url + "/metrics")[1].decode().splitlines():
        m = re.match(r'vllm:prompt_tokens_cached_by_source_total\{(.*)\} (\S+)$', line)
        if m:
            src = re.search(r'source="([^"]*)"', m.group(1))
            if src:
                out[src.group(1)] = out.get(src.group(1), 0.0) + float(m.group(2))
    return out


def test_across_nodes_the_decode_node_reads_the_blocks_from_the_remote_tier(
        pd, node_b, baseline, cluster) -> None:
    a, b = pd.daemon.socket, node_b.daemon.socket
    t = time.monotonic()
    out = complete(pd, ACROSS, url=node_b.url)
    took = time.monotonic() - t
    assert_same_output(out, baseline["ACROSS"])
    # The consumer on B found every full block the producer on A computed: B read
    # them from the cluster (B never had them otherwise).
    assert out["cached"] == cached_tokens(ACROSS) == 7 * BLOCK, took
    assert '"kvtier_prompt_blocks": 7' in node_b.proxy_log.read_text()
    # Node A: the producer's blocks and no more, each written to the cluster at once.
    assert committed(a) == distinct_blocks(pd.sent)
    assert wait_for(lambda: stats(a)["tier.remote.written_blocks"] == committed(a)), stats(a)
    masters = cluster.master_ports()
    keys = sum(int(cluster.cli(p, "DBSIZE").strip() or 0) for p in masters)
    assert keys == committed(a) + 1, keys  # and the deployment secret's verifier
    # Node B: 7 blocks read from the cluster, verified, and hit as tier remote; its
    # consumer stored nothing and B wrote nothing back.
    sb = stats(b)
    hit_remote = sum(v for k, v in sb.items()
                     if re.fullmatch(r"namespace\.\d+\.hit_tokens\.remote", k))
    print(f"through the proxy in {took:.2f} s; B: " + ", ".join(
        f"{k}={v}" for k, v in sorted(sb.items()) if k.startswith(("tier.remote.", "tier.host.b",
                                                                   "committed", "namespace."))))
    assert sb["tier.remote.hits"] == 7 and sb["tier.remote.corrupt"] == 0, sb
    assert hit_remote == 7 * BLOCK, sb
    assert sb["tier.remote.written_blocks"] == 0, sb
    assert "not loaded from kvtierd" not in node_b.consumer.log_tail(10**6)
    # vLLM's view: the 896 tokens came from kvtier's tiers, p2p (the remote tier at
    # the scheduler's lookup, or blocks the consumer waited for: a peer's), or host
    # where the consumer's hint had read them up by then; never "unspecified".
    by_source = cached_by_source(node_b.consumer)
    print("consumer B's prompt_tokens_cached_by_source:", by_source)
    assert by_source.get("p2p", 0) + by_source.get("host", 0) == 7 * BLOCK, by_source
    assert by_source.get("external_unspecified", 0) == 0, by_source

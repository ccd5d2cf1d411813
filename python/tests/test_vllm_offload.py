"""kvtier.vllm_offload: kvtierd as a tier below vLLM's own CPU offloading tier.

vLLM's OffloadingConnector runs its GPU <-> CPU copies only on a GPU, so here
its scheduler side is driven on the CPU, as vLLM drives it
(vllm_offload_driver.py): vLLM's real TieringOffloadingSpec, CPU primary tier
and TieringOffloadingManager, with KvtierTier loaded by module path from the
secondary tier's config, against a real kvtierd. The last test runs the
whole engine (vllm.LLM with the OffloadingConnector) and needs a GPU.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

import kvtier
from conftest import run_python
from kvtier.vllm_offload import KvtierTier, block_key, chunk_layout
from vllm_offload_driver import TOKENS, Offload, offload_keys, tier_config

HERE = Path(__file__).resolve().parent


def test_a_second_process_loads_what_the_first_stored(daemon) -> None:
    stored = run_python(
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from vllm_offload_driver import Offload, tier_config\n"
        "with Offload(tier_config(sys.argv[1])) as o:\n"
        "    o.store(b'system prompt', 4)\n"
        "    print('tier', o.lookups(b'system prompt', 4))\n",
        daemon.socket, str(HERE))
    assert stored.returncode == 0, stored.stderr
    assert "tier ['HIT', 'HIT', 'HIT', 'HIT']" in stored.stdout
    with Offload(tier_config(daemon.socket)) as o:
        got = o.load(b"system prompt", 4)
        # HIT_PENDING while vLLM promotes the chunks from kvtierd into its CPU
        # tier, then HIT, with the bytes the first process stored.
        assert got["lookups"] == ["HIT"] * 4
        assert got["steps"] >= 1
        assert got["match"] == [True] * 4
        # Its tail was never stored: a miss after the stored prefix.
        assert o.load(b"system prompt", 6)["lookups"] == ["HIT"] * 4 + ["MISS"]
    # One kvtierd block a chunk, chained as the request's chunks are.
    with kvtier.Client("kvtier-test/tiny/vllm-offload-4096", chunk_layout(4096, TOKENS),
                       socket=daemon.socket) as c:
        names = [block_key(k) for k in offload_keys(b"system prompt", 4)]
        assert c.lookup(kvtier.Keys(names)).hits == 4


def test_chunks_stored_twice_and_evicted_from_vllms_tier_come_back(daemon) -> None:
    with Offload(tier_config(daemon.socket), chunks=8) as o:
        o.store(b"a", 4)
        o.fill(b"b", 8)   # vLLM's CPU tier holds 8 chunks: a's are gone from it
        o.store(b"a", 4)  # cascaded again: kvtierd has them, nothing is written twice
        o.fill(b"c", 8)
        got = o.load(b"a", 4)
        assert got["lookups"] == ["HIT"] * 4
        assert got["match"] == [True] * 4


def test_keys_of_another_model_or_chunk_size_are_misses(daemon) -> None:
    with Offload(tier_config(daemon.socket, model_id="model-a")) as o:
        o.store(b"prompt", 3)
        assert o.lookups(b"prompt", 3) == ["HIT"] * 3
    with Offload(tier_config(daemon.socket, model_id="model-b")) as o:
        assert o.lookups(b"prompt", 3) == ["MISS"] * 3
        assert o.load(b"prompt", 3)["lookups"] == ["MISS"]
    with Offload(tier_config(daemon.socket, model_id="model-a"), chunk_bytes=8192) as o:
        assert o.lookups(b"prompt", 3) == ["MISS"] * 3
    with Offload(tier_config(daemon.socket, model_id="model-a", salt="tenant-2")) as o:
        assert o.lookups(b"prompt", 3) == ["MISS"] * 3


def test_a_load_of_chunks_gone_since_the_lookup_fails_once_then_misses(daemon) -> None:
    with Offload(tier_config(daemon.socket), chunks=8) as o:
        o.store(b"p", 4)
        o.fill(b"q", 8)
        # Gone from kvtierd between vLLM's lookup and its load.
        with kvtier.Client("kvtier-test/tiny/vllm-offload-4096", chunk_layout(4096, TOKENS),
                           socket=daemon.socket) as c:
            names = [block_key(k) for k in offload_keys(b"p", 4)]
            c.remove(kvtier.Keys(names[2:3]))  # (the chunk after it goes with it)
            assert c.lookup(kvtier.Keys(names)).hits == 2
            ctx, keys = o.request(b"p", 4)
            # (The tier still answers HIT for the removed ones until it learns.)
            assert [o.mgr.lookup(k, ctx).name for k in keys[:2]] == ["HIT_PENDING"] * 2
        got = o.load(b"p", 4)
        # The first two came back with their bytes; the others are misses now,
        # not promoted again and again.
        assert got["lookups"][:2] == ["HIT", "HIT"]
        assert got["lookups"][2:] == ["MISS"]
        assert got["match"] == [True, True]
        again = o.load(b"p", 4)
        assert again["lookups"] == ["HIT", "HIT", "MISS"]


def test_a_full_kvtierd_fails_the_store_and_serves_no_wrong_block(start_daemon) -> None:
    # kvtierd's smallest host tier, 1 MiB: 8 chunks of 128 KiB.
    d = start_daemon("--host-capacity", "1MiB", "--host-slab", "1MiB")
    layout = chunk_layout(128 << 10, TOKENS)
    with Offload(tier_config(d.socket), chunks=16, chunk_bytes=128 << 10) as o, \
            kvtier.Client(f"kvtier-test/tiny/vllm-offload-{128 << 10}", layout,
                          socket=d.socket) as c:
        o.store(b"pinned", 8)  # kvtierd's 8 slots
        names = [block_key(k) for k in offload_keys(b"pinned", 8)]
        with c.acquire(kvtier.Keys(names)) as lease:  # every slot pinned by a reader
            assert len(lease) == 8
            o.store(b"newer", 4)  # no room: the job fails, vLLM keeps its own copy
            assert o.lookups(b"newer", 4) == ["MISS"] * 4
    # Another engine: what it finds in kvtierd is what was stored, nothing else.
    with Offload(tier_config(d.socket), chunks=16, chunk_bytes=128 << 10) as o:
        assert o.load(b"newer", 4)["lookups"] == ["MISS"]
        got = o.load(b"pinned", 8)
        assert got["lookups"] == ["HIT"] * 8
        assert got["match"] == [True] * 8


def test_a_kvtierd_that_goes_away_is_a_miss_and_nothing_hangs(start_daemon) -> None:
    d = start_daemon()
    cfg = tier_config(d.socket, retry_interval_s=0.2, timeout_ms=2000)
    with Offload(cfg, chunks=8) as o:
        o.store(b"before", 4)
        d.stop(signal.SIGKILL)
        start = time.monotonic()
        assert o.lookups(b"before", 4) == ["MISS"] * 4
        o.store(b"during", 4)  # its cascade fails; the manager settles
        o.fill(b"filler", 8)
        assert o.load(b"during", 4)["lookups"] == ["MISS"]
        assert time.monotonic() - start < 30
        # A new kvtierd on the same socket: the tier attaches again.
        d2 = start_daemon(name="kvtierd")
        assert d2.socket == d.socket
        time.sleep(0.3)
        o.store(b"after", 4)
        o.fill(b"filler-2", 8)
        got = o.load(b"after", 4)
        assert got["lookups"] == ["HIT"] * 4
        assert got["match"] == [True] * 4


def test_bad_settings_are_refused_clearly(daemon) -> None:
    with pytest.raises(ValueError, match="unknown setting"):
        Offload(tier_config(daemon.socket, sockets="typo"))
    with pytest.raises(ValueError, match="16-bit"):
        chunk_layout(4097, 16)
    # A chunk whose bytes do not divide by its tokens: one token a block.
    assert chunk_layout(4096 + 2, 16).block_tokens == 1
    assert chunk_layout(4096, 16).block_bytes == 4096
    assert issubclass(KvtierTier, object)


# -- the whole engine: vLLM's OffloadingConnector with kvtierd below its CPU tier ------

def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="vLLM's OffloadingConnector copies GPU <-> CPU: "
                    "needs a GPU")
def test_vllm_serves_the_same_tokens_with_kvtierd_below_its_cpu_tier(start_daemon,
                                                                     tmp_path) -> None:
    import os

    from vllm_driver import Engine, outputs_without_connector

    os.environ["PYTHONHASHSEED"] = "0"  # the block hashes alike in both engines
    rng = random.Random(7)
    prompt = [rng.randrange(1, 1000) for _ in range(700)]
    d = start_daemon("--host-capacity", "1GiB")
    offload = {"kv_transfer_config": {
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 64 << 20,
            "secondary_tiers": [tier_config(d.socket, model_id=None)]}}}
    model = tmp_path / "tiny-llama"
    want = outputs_without_connector(model, tmp_path / "plain.log", {"p": prompt},
                                     enable_prefix_caching=False)[0]["p"]
    first = Engine(model, tmp_path / "first.log", **offload)
    try:
        assert first.generate(prompt)["tokens"] == want["tokens"]
    finally:
        first.close()  # its CPU tier goes with it; kvtierd keeps the chunks
    second = Engine(model, tmp_path / "second.log", **offload)
    try:
        got = second.generate(prompt)
        assert got["tokens"] == want["tokens"]
        assert got["cached"] > 0  # loaded through vLLM's CPU tier from kvtierd
    finally:
        second.close()

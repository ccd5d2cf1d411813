"""kvtier.vllm driven through vLLM itself (its CPU build), against a real kvtierd.

Each engine is a real ``vllm.LLM`` in a process of its own (vllm_engine.py,
started and driven by vllm_driver.py's Engine) over a tiny Llama with seeded
weights; prompts are token ids. The block size of vLLM's CPU backend is 128
tokens, so a 600-token prefix is 4 kvtier blocks.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from vllm_driver import Engine, connector, outputs_without_connector

BLOCK = 128  # vLLM's block size on the CPU, and the connector's default kvtier block

_rng = random.Random(1)
PREFIX = [_rng.randrange(1, 1000) for _ in range(600)]
P1 = PREFIX + [5, 6, 7]
P2 = PREFIX + [8, 9, 10, 11]
OTHER = [_rng.randrange(1, 1000) for _ in range(400)] + [3, 4]
PROMPTS = {"P1": P1, "P2": P2, "OTHER": OTHER}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm") / "tiny-llama"


@pytest.fixture(scope="module")
def baseline(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """Greedy outputs without the connector (vLLM's own prefix cache off)."""
    log = tmp_path_factory.mktemp("baseline") / "vllm.log"
    return outputs_without_connector(model_dir, log, PROMPTS, enable_prefix_caching=False)[0]


def assert_same_output(got: Dict[str, Any], want: Dict[str, Any]) -> None:
    assert got["tokens"] == want["tokens"]
    # The same model over the same K and V: a prefill of the suffix alone sums in
    # another order than a full prefill, so allow float32 rounding, no more (one
    # changed prefix token moves these log-probabilities by tenths).
    assert got["logprobs"] == pytest.approx(want["logprobs"], abs=2e-3)


def test_same_greedy_output_and_the_prefix_is_loaded(start_daemon, model_dir, baseline,
                                                     tmp_path) -> None:
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", enable_prefix_caching=False,
                    **connector(d.socket))
    try:
        first = engine.generate(P1)
        assert first["cached"] == 0  # nothing in kvtierd yet
        assert_same_output(first, baseline["P1"])
        # Stored when it finished: 603 prompt + 7 output tokens computed = 4 full blocks.
        engine.wait_committed(d.socket, 4)
        second = engine.generate(P2)
        # vLLM's own prefix cache is off: the 512 tokens came from kvtierd, and its
        # prefill computed only the other 92.
        assert second["cached"] == 4 * BLOCK
        assert_same_output(second, baseline["P2"])
        # A prompt with nothing in common: no hit, the same output.
        other = engine.generate(OTHER)
        assert other["cached"] == 0
        assert_same_output(other, baseline["OTHER"])
    finally:
        engine.close()
    assert engine.logged("attached to kvtierd"), engine.log()
    # vLLM asked for each layer before its attention: the loads went layer by layer.
    assert "without waiting for their load" not in engine.log()


def test_reuse_across_vllm_processes_and_failed_loads_recompute(start_daemon, model_dir,
                                                                baseline, tmp_path) -> None:
    d = start_daemon("--device", "off")
    first = Engine(model_dir, tmp_path / "first.log", **connector(d.socket))
    try:
        assert first.generate(P1)["cached"] == 0
        first.wait_committed(d.socket, 4)
    finally:
        first.close()
    # A new process, vLLM's prefix cache on (its default) but empty: the hit is kvtierd's.
    second = Engine(model_dir, tmp_path / "second.log", **connector(d.socket))
    try:
        out = second.generate(P2)
        assert out["cached"] == 4 * BLOCK
        assert_same_output(out, baseline["P2"])
    finally:
        second.close()
    # A third that loads from the device tier, which this kvtierd does not have: the
    # lookup finds the 4 blocks, every load fails, and vLLM recomputes them.
    third = Engine(model_dir, tmp_path / "third.log", **connector(d.socket, tier="device"))
    try:
        out = third.generate(P2)
        assert_same_output(out, baseline["P2"])
        assert third.logged("4 of 4 blocks not loaded from kvtierd; vLLM recomputes them"), \
            third.log()
    finally:
        third.close()


def test_kvtier_blocks_of_two_vllm_blocks_after_a_local_hit(start_daemon, model_dir, baseline,
                                                           tmp_path) -> None:
    """block_tokens 256: each kvtier block fills two vLLM blocks; a vLLM block that
    vLLM's own prefix cache holds already is left as it is."""
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", **connector(d.socket, block_tokens=256))
    try:
        assert engine.generate(P1)["cached"] == 0
        engine.wait_committed(d.socket, 2)  # 610 tokens computed: 2 blocks of 256
        engine.reset_prefix_cache()
        # A prompt sharing one vLLM block (128 tokens) with P1, and no kvtier block.
        q = PREFIX[:128] + OTHER[:200]
        assert engine.generate(q)["cached"] == 0
        # P2: vLLM has its first 128 tokens, kvtierd the first 512; 384 are loaded,
        # from the middle of the first kvtier block on.
        out = engine.generate(P2)
        assert out["cached"] == 4 * BLOCK
        assert_same_output(out, baseline["P2"])
    finally:
        engine.close()


def test_daemon_stopped_while_vllm_runs(start_daemon, model_dir, baseline, tmp_path) -> None:
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", enable_prefix_caching=False,
                    **connector(d.socket, retry_interval_s=0.2, timeout_ms=2000))
    try:
        assert engine.generate(P1)["cached"] == 0
        engine.wait_committed(d.socket, 4)
        d.stop()
        # kvtierd is gone: the request completes, recomputed, and the log says why.
        out = engine.generate(P2)
        assert out["cached"] == 0
        assert_same_output(out, baseline["P2"])
        assert engine.logged("requests recompute their prefixes until it is back"), engine.log()
        # It comes back (empty: no SSD here): the next request stores, hits resume.
        d.start()
        time.sleep(0.3)  # past the connector's retry interval
        assert engine.generate(P1)["cached"] == 0
        engine.wait_committed(d.socket, 4)
        out = engine.generate(P2)
        assert out["cached"] == 4 * BLOCK
        assert_same_output(out, baseline["P2"])
        assert engine.logged("prefix hits resume"), engine.log()
    finally:
        engine.close()


def test_bad_settings_are_refused_clearly(start_daemon, model_dir, tmp_path) -> None:
    from kvtier.vllm import Settings

    with pytest.raises(ValueError, match="unknown setting"):
        Settings.from_extra_config({"sokcet": "/x"})
    with pytest.raises(ValueError, match="tier must be"):
        Settings.from_extra_config({"tier": "ssd"})
    with pytest.raises(ValueError, match="retention_priority"):
        Settings.from_extra_config({"retention_priority": 101})
    s = Settings.from_extra_config({"socket": "/s", "salt": "t", "tier": "device",
                                    "retention_priority": 80, "block_tokens": 256})
    assert (s.socket, s.salt, s.retention_priority, s.block_tokens) == ("/s", "t", 80, 256)


def test_kv_caches_it_cannot_store_exactly_are_refused_at_start() -> None:
    """Mamba's state and DeepSeek-V4's sparse MLA are refused with the spec's name, as
    are groups of several block sizes, a sliding window in kvtier blocks of several
    vLLM blocks (vLLM frees a window's blocks one at a time), KV cache dtypes kvtier
    has no format for and quantize_lower over an fp8 cache, never stored in a layout
    that would serve wrong blocks. Full-attention and sliding-window groups get a
    namespace each, the window's first block needed following vLLM's rule; MLA a
    latent layout; an fp8 cache an fp8 layout and a namespace apart from 16-bit."""
    import types

    import torch
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheGroupSpec,
                                            MambaSpec, MLAAttentionSpec, SlidingWindowSpec)

    from kvtier.vllm import Settings, _namespace

    settings = Settings.from_extra_config({"socket": "/s"})
    mla = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.float16)
    mamba = MambaSpec(block_size=16, shapes=((4, 8),), dtypes=(torch.float16,))
    window = SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float16,
                               sliding_window=128)
    full = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float16)
    full32 = FullAttentionSpec(block_size=32, num_kv_heads=2, head_size=64, dtype=torch.float16)
    vllm_config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(model="m"),
        cache_config=types.SimpleNamespace(cache_dtype="auto"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1))

    def config(*specs: Any) -> Any:
        return types.SimpleNamespace(
            kv_cache_groups=[KVCacheGroupSpec([f"l{i}"], s) for i, s in enumerate(specs)])

    sparse = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576,
                              dtype=torch.float16, model_version="deepseek_v4")
    for specs, message in (([sparse], "not MLAAttentionSpec of deepseek_v4 sparse MLA"),
                           ([full, mamba], "not MambaSpec"),
                           ([full, full32], "different block sizes")):
        with pytest.raises(ValueError, match=message):
            _namespace(vllm_config, config(*specs), settings, 0, 0)
    (latent,), _ = _namespace(vllm_config, config(mla), settings, 0, 0)
    assert (latent.layout.kind, latent.layout.planes, latent.layout.head_dim) == ("latent", 1, 576)
    assert latent.model_id == "m|vllm-mla"
    # fp8: vLLM's one-byte cache (uint8) in the fp8 format kv_cache_dtype names.
    byte = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.uint8)
    for cache_dtype, fmt in (("fp8", "fp8_e4m3"), ("fp8_e4m3", "fp8_e4m3"),
                             ("fp8_e5m2", "fp8_e5m2")):
        vllm_config.cache_config.cache_dtype = cache_dtype
        (g,), _ = _namespace(vllm_config, config(byte), settings, 0, 0)
        assert g.layout.dtype == fmt and g.model_id.endswith("|" + fmt)
        assert g.layout.scale_bytes == 4 * 1 * 2 * 2  # fp32 per layer, K and V, head
        with pytest.raises(ValueError, match="quantize_lower with an fp8 KV cache"):
            _namespace(vllm_config, config(byte),
                       Settings.from_extra_config({"quantize_lower": "fp8_e4m3"}), 0, 0)
    vllm_config.cache_config.cache_dtype = "fp8_inc"
    with pytest.raises(ValueError, match="not a torch.uint8 cache with kv_cache_dtype 'fp8_inc'"):
        _namespace(vllm_config, config(byte), settings, 0, 0)
    vllm_config.cache_config.cache_dtype = "auto"
    with pytest.raises(ValueError, match="sliding-window model takes vLLM's block size"):
        _namespace(vllm_config, config(full, window),
                   Settings.from_extra_config({"socket": "/s", "block_tokens": 32}), 0, 0)
    groups, block = _namespace(vllm_config, config(full, window), settings, 0, 0)
    assert block == 16 and [g.window for g in groups] == [0, 128]
    assert groups[0].model_id != groups[1].model_id
    assert all(g.model_id.startswith("m|vllm-") for g in groups)
    # After 160 tokens the next one attends to tokens 33..160: blocks 2 on (of 16).
    assert [g.first_block(160, 16) for g in groups] == [0, 2]
    # One group: the namespace as before hybrid models (the caches already stored hit).
    (only,), _ = _namespace(vllm_config, config(full), settings, 0, 0)
    assert "|group" not in only.model_id


def test_fp8_blocks_carry_the_workers_scales_and_others_are_not_loaded() -> None:
    """An fp8 block holds vLLM's values as they are and, in its scale table, the scales
    vLLM wrote them with ([layer][K|V][kv_head], one per layer's tensor); read back by a
    worker whose scales differ, a block's values would mean other numbers, so the
    staged blocks stop before the first such block (vLLM recomputes it and the rest)."""
    import types

    import torch

    import kvtier
    from kvtier.vllm import KvtierConnector, _GroupSpec

    names = [f"model.layers.{i}.self_attn.attn" for i in (1, 0)]  # as vLLM may list them
    layers = {names[0]: types.SimpleNamespace(_k_scale_float=0.5, _v_scale_float=0.25),
              names[1]: types.SimpleNamespace(_k_scale_float=2.0, _v_scale_float=4.0)}
    conn = KvtierConnector.__new__(KvtierConnector)  # the worker's fp8 logic alone
    conn._vllm_config = types.SimpleNamespace(compilation_config=types.SimpleNamespace(
        static_forward_context=layers))
    layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=32, dtype="fp8_e4m3", block_tokens=16)
    g = _GroupSpec(0, 0, "m", layout, names)
    table = conn._scales(g)
    assert table is not None and table.shape == (2, 2, 2)
    assert table[0].tolist() == [[2.0, 2.0], [4.0, 4.0]]  # layer 0 first, K then V, per head
    assert table[1].tolist() == [[0.5, 0.5], [0.25, 0.25]]
    values = layout.block_bytes - layout.scale_bytes
    assert layout.scale_bytes == table.numel() * 4

    def block(scales: torch.Tensor, seed: int) -> torch.Tensor:
        g_ = torch.Generator().manual_seed(seed)
        v = torch.randint(0, 256, (values,), dtype=torch.uint8, generator=g_)
        return torch.cat([v, scales.reshape(-1).view(torch.uint8)])

    other = table.clone()
    other[1, 0, 1] = 0.75  # one head's K scale of one layer
    src = torch.stack([block(table, 1), block(table, 2), block(other, 3), block(table, 4)])
    out = conn._checked_scales(g, src, "r")
    assert out is not None and out.shape == (2, values)
    assert torch.equal(out, src[:2, :values])  # the values, byte for byte
    assert conn._checked_scales(g, src[2:], "r") is None
    wide = _GroupSpec(0, 0, "m", kvtier.Layout(2, 2, 32, "fp16", 16), names)
    assert conn._scales(wide) is None and conn._checked_scales(wide, src, "r") is src

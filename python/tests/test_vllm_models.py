"""kvtier.vllm on the models people serve, each through a real vLLM engine (its CPU
build) over a tiny model of that architecture with seeded weights, against a real
kvtierd. Prompts are token ids; vLLM's CPU block is 128 tokens.

Sliding window and full attention (Gemma 3): vLLM's hybrid KV cache manager gives
the model two KV cache groups. The full-attention layers need every block of a
prefix, the sliding-window layers (window 256 tokens) only the blocks of their
window before the first token to compute, and that is all kvtier stores of them.

MLA (DeepSeek-V2): one latent vector of 576 values per token and layer, kvtier's
latent layout; vLLM's CPU build runs it on its AMX MLA backend, in bf16.

fp8 KV cache (kv_cache_dtype fp8): vLLM's one-byte values as they are, with vLLM's
scales in the fp8 block's scale table; a 16-bit worker of the same model keeps
namespaces of its own.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict

import pytest

from test_vllm import assert_same_output
from vllm_driver import Engine, connector, outputs_without_connector
from vllm_engine import TINY, TINY_DEEPSEEK_V2, TINY_GEMMA3, committed

BLOCK = 128
WINDOW = TINY_GEMMA3["sliding_window"]

_rng = random.Random(7)
LONG = [_rng.randrange(1, 1000) for _ in range(900)]  # 7 full blocks, 3.5 windows
H1 = LONG + [5, 6, 7]
H2 = LONG + [8, 9, 10, 11]
HYBRID_PROMPTS = {"H1": H1, "H2": H2}


def writes_settle(socket: str, still_s: float = 1.5, timeout_s: float = 60) -> None:
    """Waits until kvtierd has seen no ALLOCATE, PUT or COMMIT for `still_s` seconds."""
    import time

    import kvtier

    def writes() -> int:
        with kvtier.Client("probe", kvtier.Layout(1, 1, 32, "fp16", 16), socket=socket,
                           map_arenas=False) as c:
            st = c.stats()
            return sum(int(st[f"op.{op}.requests"]) for op in ("allocate", "put", "commit"))

    deadline = time.monotonic() + timeout_s
    last, since = writes(), time.monotonic()
    while time.monotonic() - since < still_s:
        assert time.monotonic() < deadline, "the workers' writes never settled"
        time.sleep(0.25)
        now = writes()
        if now != last:
            last, since = now, time.monotonic()


def baseline_run(model_dir: Path, log: Path,
                 **engine_args: Any) -> tuple[Dict[str, Any], Engine]:
    """HYBRID_PROMPTS' outputs without the connector, and the engine (closed)."""
    return outputs_without_connector(model_dir, log, HYBRID_PROMPTS, **engine_args)


def hit_then_same(engine_args: Dict[str, Any], model_dir: Path, baseline: Dict[str, Any],
                  socket: str, log: Path, stored: int, before: int = 0) -> Engine:
    """An engine with the connector: H1 computes everything and matches `baseline`, its
    `stored` blocks land in kvtierd (on top of `before`), then H2 finds 7 blocks there
    and matches `baseline` too. Returns the engine, closed."""
    engine = Engine(model_dir, log, **engine_args, **connector(socket))
    try:
        first = engine.generate(H1)
        assert first["cached"] == 0
        assert_same_output(first, baseline["H1"])
        engine.wait_committed(socket, before + stored)
        second = engine.generate(H2)
        assert second["cached"] == 7 * BLOCK
        assert_same_output(second, baseline["H2"])
    finally:
        engine.close()
    return engine


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-gemma3") / "tiny-gemma3"


@pytest.fixture(scope="module")
def gemma3_baseline(gemma3_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    log = tmp_path_factory.mktemp("gemma3-baseline") / "vllm.log"
    return baseline_run(gemma3_dir, log, enable_prefix_caching=False,
                        model_config=TINY_GEMMA3)[0]


def test_sliding_window_and_full_layers(start_daemon, gemma3_dir, gemma3_baseline,
                                        tmp_path) -> None:
    d = start_daemon()
    engine = Engine(gemma3_dir, tmp_path / "vllm.log", enable_prefix_caching=False,
                    model_config=TINY_GEMMA3, **connector(d.socket))
    try:
        first = engine.generate(H1)
        assert first["cached"] == 0
        assert_same_output(first, gemma3_baseline["H1"])
        # 903 prompt + 7 output tokens computed: 7 full blocks. The full-attention
        # group stores all 7; the window group only those its window needs to go on
        # after 896 tokens: tokens from 896 - 256 + 1 = 641 on, blocks 5 and 6.
        window_blocks = 7 - (7 * BLOCK - WINDOW + 1) // BLOCK
        assert window_blocks == 2
        engine.wait_committed(d.socket, 7 + window_blocks)
        second = engine.generate(H2)
        # 896 tokens from kvtierd (vLLM's own prefix cache is off): the tokens past
        # the window read the window layers' blocks loaded from kvtierd.
        assert second["cached"] == 7 * BLOCK
        assert_same_output(second, gemma3_baseline["H2"])
    finally:
        engine.close()
    log = engine.log()
    # vLLM kept its hybrid KV cache manager (the connector supports it) ...
    assert "Turning off hybrid kv cache manager" not in log, log
    # ... and two groups attached, each a namespace of its own.
    assert engine.logged("group0-"), log
    assert engine.logged("group1-"), log
    # Nothing more than those 9 blocks: the second request's were there already.
    assert committed(d.socket) == 7 + window_blocks


def _cpu_has(feature: str) -> bool:
    import torch

    return bool(getattr(torch.cpu, f"_is_{feature}_supported")())


# Hardware, not packages: vLLM's CPU build runs MLA with prefix caching on AMX
# only (its reference MLA backend turns prefix caching off), and fp8 KV caches
# on AVX-512 or AMX.
needs_amx = pytest.mark.skipif(not _cpu_has("amx_tile"), reason="no AMX on this CPU")
needs_avx512 = pytest.mark.skipif(not (_cpu_has("avx512") or _cpu_has("amx_tile")),
                                  reason="no AVX-512 on this CPU")


@needs_amx
def test_mla_latent_blocks(start_daemon, tmp_path_factory, tmp_path) -> None:
    model_dir = tmp_path_factory.mktemp("vllm-mla") / "tiny-deepseek-v2"
    """In bf16 a prefill of H2's last tokens alone rounds otherwise than H2's whole prefill
    (enough to turn a tiny random model's next tokens): the baseline is vLLM's own prefix
    cache, whose hit on H2 computes the same last tokens over the same latent bytes."""
    args: Dict[str, Any] = dict(enable_prefix_caching=False, model_config=TINY_DEEPSEEK_V2,
                                dtype="bfloat16")
    baseline, base = baseline_run(model_dir, tmp_path / "baseline.log",
                                  **{**args, "enable_prefix_caching": True})
    assert base.logged("AMX_MLA") or base.logged("CPU_MLA"), base.log()
    assert baseline["H2"]["cached"] == 7 * BLOCK  # vLLM's own hit
    d = start_daemon()
    engine = hit_then_same(args, model_dir, baseline, d.socket, tmp_path / "vllm.log", 7)
    # One namespace, latent: 2 layers x 128 tokens x 576 bf16 values a block.
    assert engine.logged("kind='latent'"), engine.log()
    assert committed(d.socket) == 7


@needs_avx512
@pytest.mark.parametrize("kv_cache_dtype,fmt", [("fp8", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2")])
def test_fp8_kv_cache(start_daemon, tmp_path_factory, tmp_path, kv_cache_dtype, fmt) -> None:
    """Against vLLM's own fp8 run: the blocks kvtier gives back are the bytes vLLM wrote
    (a dequantize and requantize would move the log-probabilities). For e4m3 (vLLM's
    "fp8"), a 16-bit worker of the same model stores the same prompt first."""
    model_dir = tmp_path_factory.mktemp("vllm-fp8") / "tiny-llama"
    fp8: Dict[str, Any] = dict(enable_prefix_caching=False, model_config=TINY,
                               kv_cache_dtype=kv_cache_dtype)
    baseline, _ = baseline_run(model_dir, tmp_path / "baseline.log", **fp8)
    d = start_daemon()
    before = 0
    if kv_cache_dtype == "fp8":
        # A 16-bit worker of the same model stores H1 first ...
        wide = Engine(model_dir, tmp_path / "wide.log", enable_prefix_caching=False,
                      model_config=TINY, **connector(d.socket))
        try:
            assert wide.generate(H1)["cached"] == 0
            wide.wait_committed(d.socket, 7)
        finally:
            wide.close()
        before = 7
    # ... and the fp8 worker finds none of it (its own namespace), stores its own.
    engine = hit_then_same(fp8, model_dir, baseline, d.socket, tmp_path / "vllm.log", 7,
                           before=before)
    assert engine.logged(f"dtype='{fmt}'"), engine.log()
    assert engine.logged(f"|{fmt}'"), engine.log()
    assert committed(d.socket) == before + 7


def test_tensor_parallel_2(start_daemon, tmp_path_factory, tmp_path, monkeypatch) -> None:
    """Each rank stores and loads its own shard (its KV heads) in a namespace of its own;
    the scheduler offers a hit only as long as every rank has its shard."""
    import re

    import kvtier

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # a core for each rank
    model_dir = tmp_path_factory.mktemp("vllm-tp") / "tiny-llama"
    tp: Dict[str, Any] = dict(enable_prefix_caching=False, model_config=TINY,
                              tensor_parallel_size=2, distributed_executor_backend="mp")
    baseline, _ = baseline_run(model_dir, tmp_path / "baseline.log", **tp)
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", **tp, **connector(d.socket))
    try:
        first = engine.generate(H1)
        assert first["cached"] == 0
        assert_same_output(first, baseline["H1"])
        engine.wait_committed(d.socket, 2 * 7)  # 7 blocks a rank
        # The finished request's final store (kvtier.vllm queues one behind the prompt's
        # store, to say when vLLM may free the blocks) commits nothing new, so the count
        # above cannot wait for it; run after the removal below it would write the 4
        # blocks again (seen under load: a hit of 7). Wait until no worker writes.
        writes_settle(d.socket)
        # Rank 1 loses the last 4 blocks of the prefix: a hit is the 3 both ranks have.
        assert engine.logged("|tp1of2"), engine.log()
        (rank1,) = set(re.findall(r"as '([^']*\|tp1of2)'", engine.log()))
        heads = TINY["num_key_value_heads"] // 2
        head_dim = TINY["hidden_size"] // TINY["num_attention_heads"]
        with kvtier.Client(rank1, kvtier.Layout(2, heads, head_dim, "fp32", BLOCK),
                           socket=d.socket, map_arenas=False) as c:
            keys = c.block_keys(H1)
            c.remove(keys[3:7])
            assert c.lookup(keys).hits == 3
        second = engine.generate(H2)
        assert second["cached"] == 3 * BLOCK
        assert_same_output(second, baseline["H2"])
    finally:
        engine.close()
    assert "blocks not loaded" not in engine.log()  # no rank had to recompute a block

"""kvtier.vllm on the models people serve, each through a real vLLM engine (its CPU
build) over a tiny model of that architecture with seeded weights, against a real
kvtierd. Prompts are token ids; vLLM's CPU block is 128 tokens.

Sliding window and full attention (Gemma 3): vLLM's hybrid KV cache manager gives
the model two KV cache groups. The full-attention layers need every block of a
prefix, the sliding-window layers (window 256 tokens) only the blocks of their
window before the first token to compute, and that is all kvtier stores of them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict

import pytest

from test_vllm import assert_same_output
from vllm_driver import Engine, connector
from vllm_engine import TINY_GEMMA3

BLOCK = 128
WINDOW = TINY_GEMMA3["sliding_window"]

_rng = random.Random(7)
LONG = [_rng.randrange(1, 1000) for _ in range(900)]  # 7 full blocks, 3.5 windows
H1 = LONG + [5, 6, 7]
H2 = LONG + [8, 9, 10, 11]
HYBRID_PROMPTS = {"H1": H1, "H2": H2}


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-gemma3") / "tiny-gemma3"


@pytest.fixture(scope="module")
def gemma3_baseline(gemma3_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    log = tmp_path_factory.mktemp("gemma3-baseline") / "vllm.log"
    engine = Engine(gemma3_dir, log, enable_prefix_caching=False, model_config=TINY_GEMMA3)
    try:
        return {name: engine.generate(p) for name, p in HYBRID_PROMPTS.items()}
    finally:
        engine.close()


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
    import kvtier

    with kvtier.Client("probe", kvtier.Layout(1, 1, 32, "fp16", 16), socket=d.socket,
                       map_arenas=False) as c:
        stats = c.stats()
    # Nothing more than those 9 blocks: the second request's were there already.
    assert int(stats["committed_blocks"]) == 7 + window_blocks, stats

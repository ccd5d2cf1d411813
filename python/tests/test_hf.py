"""kvtier.hf against the real kvtierd and a real transformers model.

The model is hf_model.py's tiny Llama (GQA: 4 query heads, 2 KV heads) built
from a config with seeded random weights: no download (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

from typing import List

import pytest
import torch

import kvtier
import kvtier.hf

from conftest import run_python
from hf_model import MODEL_CODE, prompt, tiny_llama

MODEL_ID = "kvtier-tests/tiny-llama"

# Last-position logits of a cached run against a full prefill. The cached
# run computes the same attention in two passes (prefix, then the rest)
# instead of one, so the sums round differently: ~1e-6 in fp32; bf16 keeps
# 8 bits of mantissa, so its logits (|x| ~ 0.1-1) move by a few ulps.
LOGIT_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2}


class ForwardCounter:
    """Counts the token positions the model runs over (the embedding's input)."""

    def __init__(self, model) -> None:
        self.positions: List[int] = []
        model.model.embed_tokens.register_forward_hook(
            lambda _m, args, _out: self.positions.append(args[0].shape[1]))

    def prefill(self) -> int:
        """Positions of the first forward pass since the last reset (the prefill)."""
        return self.positions[0]

    def reset(self) -> None:
        self.positions.clear()


def greedy(model, ids: torch.Tensor, **kw) -> List[int]:
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=12, do_sample=False, **kw)[0].tolist()


def assert_reuses(cache, counter: ForwardCounter, ids: torch.Tensor, uncached: int) -> None:
    """cache.generate gives the model's own greedy tokens, running it over `uncached` only."""
    want = greedy(cache.model, ids)
    counter.reset()
    with torch.no_grad():
        assert cache.generate(ids, max_new_tokens=12, do_sample=False)[0].tolist() == want
    assert counter.prefill() == uncached


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_generation_with_kvtier_gives_the_same_tokens(daemon, dtype):
    model = tiny_llama(dtype)
    counter = ForwardCounter(model)
    first = prompt(1, 16 * 6 + 5)  # 6 full blocks and a partial one
    cases = {
        "nothing shared": prompt(2, 16 * 4 + 3),
        "one block shared": torch.cat([first[:, :16], prompt(3, 40)], 1),
        "many blocks shared": torch.cat([first[:, :16 * 5 + 7], prompt(4, 20)], 1),
        "the whole prompt again": first.clone(),
        "the prompt extended": torch.cat([first, prompt(5, 30)], 1),
    }
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=daemon.socket) as cache:
        want = greedy(model, first)
        got = cache.generate(first, max_new_tokens=12, do_sample=False)[0].tolist()
        assert got == want
        for name, ids in cases.items():
            expected = greedy(model, ids)
            cached = cache.cached_tokens(ids)
            counter.reset()
            with torch.no_grad():
                out = cache.generate(ids, max_new_tokens=12, do_sample=False)[0].tolist()
            assert out == expected, name
            # Only the tokens kvtier did not hold went through the model.
            assert counter.prefill() == ids.shape[1] - cached, name

        # The same by hand: load, forward over the rest, compare logits.
        ids = cases["the prompt extended"]
        with torch.no_grad():
            full = model(ids).logits[0, -1].float()
            past, cached = cache.load(ids)
            assert cached == (ids.shape[1] - 1) // 16 * 16
            rest = model(ids[:, cached:], use_cache=True, **{cache.cache_kwarg: past}).logits[0, -1]
        assert torch.allclose(rest.float(), full, atol=LOGIT_TOLERANCE[dtype], rtol=0)


def test_second_request_runs_only_the_uncached_tokens(daemon):
    model = tiny_llama()
    counter = ForwardCounter(model)
    system = prompt(10, 16 * 8)  # a 128-token "system prompt"
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=daemon.socket) as cache:
        with torch.no_grad():
            cache.generate(torch.cat([system, prompt(11, 9)], 1), max_new_tokens=2)
            assert counter.prefill() == 128 + 9
            counter.reset()
            cache.generate(torch.cat([system, prompt(12, 13)], 1), max_new_tokens=2)
            assert counter.prefill() == 13  # the 8 blocks of the system prompt came from kvtier
            # A manual loop: the prompt's blocks were stored by the first call.
            past, cached = cache.load(torch.cat([system, prompt(13, 5)], 1))
            assert cached == 128 and past.get_seq_length() == 128


def test_reuse_across_processes(daemon):
    ids = prompt(20, 16 * 10 + 1)
    writer = MODEL_CODE + """
import sys, torch, kvtier.hf
model = tiny_llama()
ids = torch.tensor([[int(t) for t in sys.argv[2].split(",")]])
with kvtier.hf.PrefixCache(model, model_id=sys.argv[3], socket=sys.argv[1]) as cache:
    with torch.no_grad():
        cache.generate(ids, max_new_tokens=1)
    print("stored", cache.cached_tokens(ids))
"""
    r = run_python(writer, daemon.socket, ",".join(map(str, ids[0].tolist())), MODEL_ID)
    assert r.returncode == 0 and "stored 160" in r.stdout, r.stderr
    model = tiny_llama()
    counter = ForwardCounter(model)
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=daemon.socket) as cache:
        assert cache.cached_tokens(ids) == 160
        assert_reuses(cache, counter, ids, uncached=1)


def ssd_tier(tmp_path, *more: str) -> List[str]:
    """kvtierd flags for a 16 MiB SSD tier in tmp_path, its file written before serving."""
    return ["--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "16MiB", "--ssd-prepare",
            "foreground", *more]


def test_reuse_after_demotion_to_the_ssd(start_daemon, tmp_path):
    # 1 MiB of host holds 42 blocks of 24 KiB: the later prompts push the
    # first one's blocks down to the SSD.
    d = start_daemon("--host-capacity", "1MiB", "--host-slab", "256KiB", *ssd_tier(tmp_path))
    model = tiny_llama()
    counter = ForwardCounter(model)
    first = prompt(30, 16 * 6 + 2)
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=d.socket) as cache:
        with torch.no_grad():
            cache.generate(first, max_new_tokens=1)
            for seed in range(31, 45):
                cache.generate(prompt(seed, 16 * 6 + 2), max_new_tokens=1)
        keys = cache.client.block_keys(first[0].tolist())
        tiers = cache.client.lookup(keys).tiers
        assert len(tiers) == 6 and kvtier.Tier.SSD in tiers, tiers
        assert_reuses(cache, counter, first, uncached=2)  # 96 of 98 tokens from the SSD


def test_reuse_after_a_daemon_restart(start_daemon, tmp_path):
    ssd = ssd_tier(tmp_path, "--ssd-write-through")
    d = start_daemon(*ssd, name="before")
    model = tiny_llama()
    counter = ForwardCounter(model)
    ids = prompt(50, 16 * 5 + 4)
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=d.socket) as cache:
        with torch.no_grad():
            cache.generate(ids, max_new_tokens=1)
    assert d.stop() == 0
    d = start_daemon(*ssd, name="after")  # the same SSD directory: a warm restart
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=d.socket) as cache:
        assert cache.cached_tokens(ids) == 80
        assert_reuses(cache, counter, ids, uncached=4)


def test_another_model_dtype_or_layout_never_hits(daemon):
    model = tiny_llama()
    ids = prompt(60, 16 * 4 + 1)
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=daemon.socket) as cache:
        with torch.no_grad():
            cache.generate(ids, max_new_tokens=1)
        assert cache.cached_tokens(ids) == 64
    others = [
        kvtier.hf.PrefixCache(tiny_llama(seed=1), model_id="another/model", socket=daemon.socket),
        kvtier.hf.PrefixCache(tiny_llama(torch.bfloat16), model_id=MODEL_ID,
                              socket=daemon.socket),
        kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=daemon.socket, block_tokens=8),
    ]
    for other in others:
        with other:
            assert other.cached_tokens(ids) == 0, other.layout
            past, cached = other.load(ids)
            assert cached == 0 and past.get_seq_length() == 0


def test_a_model_without_a_name_needs_a_model_id(daemon):
    with pytest.raises(ValueError, match="model_id"):
        kvtier.hf.PrefixCache(tiny_llama(), socket=daemon.socket)


def test_layout_follows_the_model_config():
    layout = kvtier.hf.model_layout(tiny_llama(torch.bfloat16), block_tokens=32)
    assert (layout.layers, layout.kv_heads, layout.head_dim) == (3, 2, 32)
    assert layout.dtype == "bf16" and layout.block_tokens == 32


def test_the_torch_copy_path_of_device_slots(start_daemon):
    # An emulated device tier: slots that are not the host arena take the
    # path a GPU model uses (a torch copy per block through DLPack).
    d = start_daemon("--device", "emulated", "--device-capacity", "16MiB")
    model = tiny_llama()
    counter = ForwardCounter(model)
    ids = prompt(70, 16 * 5 + 3)
    with kvtier.hf.PrefixCache(model, model_id=MODEL_ID, socket=d.socket,
                               tier=kvtier.Tier.DEVICE) as cache:
        assert_reuses(cache, counter, ids, uncached=ids.shape[1])
        tiers = cache.client.lookup(cache.client.block_keys(ids[0].tolist())).tiers
        assert tiers == [kvtier.Tier.DEVICE] * 5
        assert_reuses(cache, counter, ids, uncached=3)


def tiny_deepseek_v2(dtype=torch.float32, seed=0):
    """DeepSeek-V2's MLA in transformers: each layer caches its compressed K/V (512) and
    its rotary key (64), one latent vector per token; 2 dense layers."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    torch.manual_seed(seed)
    config = DeepseekV2Config(vocab_size=1000, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                              kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
                              qk_nope_head_dim=32, v_head_dim=512, first_k_dense_replace=2,
                              n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=64,
                              num_experts_per_tok=2, max_position_embeddings=2048,
                              initializer_range=0.1)
    return DeepseekV2ForCausalLM(config).to(dtype).eval()


def test_an_mla_model_reuses_its_latent_blocks(daemon):
    model = tiny_deepseek_v2()
    with kvtier.hf.PrefixCache(model, model_id="kvtier-tests/tiny-deepseek-v2",
                               socket=daemon.socket) as cache:
        lo = cache.layout
        assert (lo.kind, lo.kv_heads, lo.head_dim, lo.planes) == ("latent", 1, 576, 1)
        counter = ForwardCounter(model)
        ids = prompt(3, 70)  # 4 blocks of 16 and 6 tokens
        assert_reuses(cache, counter, ids, 70)  # nothing cached yet; stores 4 blocks
        more = torch.cat([ids[:, :64], prompt(4, 9)], dim=1)
        assert cache.cached_tokens(more) == 64
        assert_reuses(cache, counter, more, 9)
        # The latent came back as transformers keeps it: compressed K/V, rotary key.
        past, n = cache.load(more)
        assert n == 64 and tuple(past.layers[0].keys.shape) == (1, 1, 64, 512)
        assert tuple(past.layers[0].values.shape) == (1, 1, 64, 64)


def test_sliding_window_layers_are_refused_at_start(daemon):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    model = Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=64,
        layer_types=["sliding_attention", "full_attention"])).eval()
    with pytest.raises(ValueError, match=r"layers \[0\] of this model keep a sliding window"):
        kvtier.hf.PrefixCache(model, model_id="kvtier-tests/tiny-gemma3", socket=daemon.socket)

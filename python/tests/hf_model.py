"""The tiny Llama of the transformers tests (test_hf.py, test_fp8.py) and their
prompts.

A Llama (3 layers, GQA: 4 query heads, 2 KV heads of head_dim 32) built from
a config with seeded random weights: no download (HF_HUB_OFFLINE=1).
MODEL_CODE is its source, run here and prepended to the code of the tests
that build it in another process.
"""

from __future__ import annotations

import torch

VOCAB = 1000

MODEL_CODE = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM

def tiny_llama(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048)
    return LlamaForCausalLM(config).to(dtype).eval()
"""
exec(MODEL_CODE)  # defines tiny_llama, shared with the subprocess tests


def prompt(seed: int, n: int) -> torch.Tensor:
    """n seeded random token ids, shape [1, n]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, n), generator=g)

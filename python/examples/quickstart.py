"""The README's Python quick start, end to end, against a running kvtierd.

    .venv/bin/python python/examples/quickstart.py [--socket PATH]

1. attaches to a namespace, writes one block in place and reads it back;
2. builds a small Llama-style model from a config (seeded weights, nothing
   downloaded) and answers two prompts that share a long prefix: the second
   skips the prefill of everything kvtierd holds, with the same tokens out.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import kvtier
import kvtier.hf


def blocks(socket: str | None) -> None:
    layout = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, dtype="fp16", block_tokens=16)
    with kvtier.Client("quickstart/blocks", layout, socket=socket) as client:
        keys = client.block_keys(list(range(1000, 1032)))  # 32 tokens: 2 blocks
        with client.allocate(keys) as w:
            for i in w.allocated:
                np.asarray(w[i]).view(np.float16)[:] = i + 0.5  # written in place
            w.commit()
        print(f"lookup: {client.lookup(keys).hits}/{len(keys)} blocks cached, "
              f"in {[t.name for t in client.lookup(keys).tiers]}")
        with client.acquire(keys) as lease:  # pinned; zero-copy views
            block = torch.from_dlpack(lease[1]).view(torch.float16).view(layout.block_shape)
            print(f"block 1 reads {block.flatten()[0].item()} ({block.shape}), "
                  f"{client.block_bytes} bytes, not one of them through the socket")
            del block


def transformers_reuse(socket: str | None) -> None:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=768,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=4096)
    model = LlamaForCausalLM(config).eval()
    system = torch.randint(0, 32000, (1, 2000))  # a long shared prefix
    first = torch.cat([system, torch.randint(0, 32000, (1, 20))], 1)
    second = torch.cat([system, torch.randint(0, 32000, (1, 20))], 1)
    with kvtier.hf.PrefixCache(model, model_id="quickstart/llama-4l", socket=socket) as cache:
        for name, ids in (("first", first), ("second", second)):
            cached = cache.cached_tokens(ids)
            t = time.perf_counter()
            with torch.no_grad():
                out = cache.generate(ids, max_new_tokens=8, do_sample=False)
            took = time.perf_counter() - t
            with torch.no_grad():
                plain = model.generate(ids, max_new_tokens=8, do_sample=False)
            same = torch.equal(out, plain)
            print(f"{name} request: {ids.shape[1]} tokens, {cached} from kvtierd, "
                  f"{took * 1e3:.0f} ms, same tokens as without kvtier: {same}")
            assert same


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--socket", help="kvtierd's socket [$KVTIER_SOCKET or /run/kvtier/kvtierd.sock]")
    a = p.parse_args()
    blocks(a.socket)
    transformers_reuse(a.socket)


if __name__ == "__main__":
    main()

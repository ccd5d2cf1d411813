"""The served models: a Llama made from a config, seeded random weights and a
word-level tokenizer, written to a directory that ``vllm serve`` takes as its
model (nothing is downloaded).

    python -m bench.serving.model small /tmp/models/small   # or: tiny

``small`` is the benchmark's: 4 layers, hidden size 512, 8 query and 2 KV
heads of 64, fp32. On one core of this machine (vLLM's CPU build computes on
one, the other is its scheduler's) its prefill of 4,096 tokens takes about a
second, so reusing a prefix is worth measuring, and a run of a few hundred
requests fits in minutes. ``tiny`` is the tests': 2 layers, hidden 128.

Token ``i`` of the vocabulary is the word ``t<i>``: the trace's token ids go
to vLLM as ids, and the tokenizer is there for what the OpenAI API asks of one
(log-probabilities name their tokens).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict

# initializer_range 0.1: weights large enough that every logit depends on the
# K and V of the whole prompt, so that a wrong block changes the output.
MODELS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                 initializer_range=0.1),
    "small": dict(vocab_size=8192, hidden_size=512, intermediate_size=1536,
                  num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                  max_position_embeddings=8192, initializer_range=0.1),
}


def write_tokenizer(path: Path, vocab_size: int) -> None:
    """A word-level tokenizer over the words t0 .. t<vocab_size-1>."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1",
                                   eos_token="t2", pad_token="t0")
    fast.save_pretrained(str(path))


def write_model(name: str, path: Path, seed: int = 0) -> Path:
    """Writes model `name` of MODELS to `path` (once: an existing one is kept)."""
    path = Path(path)
    config = MODELS[name]
    done = path / "kvtier-model.json"
    if done.exists() and json.loads(done.read_text()) == {"name": name, "seed": seed,
                                                          "config": config}:
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = LlamaConfig(**config, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      torch_dtype="float32")
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    write_tokenizer(path, config["vocab_size"])
    done.write_text(json.dumps({"name": name, "seed": seed, "config": config}))
    return path


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS:
        sys.exit(f"usage: python -m bench.serving.model {{{','.join(MODELS)}}} DIR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(write_model(sys.argv[1], Path(sys.argv[2])))

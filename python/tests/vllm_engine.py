"""A real vLLM engine (CPU build) driven line by line: the engine process's side,
which vllm_driver.py's Engine starts (for test_vllm.py and bench_vllm.py).

    python vllm_engine.py MODEL_DIR CONFIG_JSON REPLY_FD

Writes a tiny Llama (a config and seeded random weights, no tokenizer) to MODEL_DIR,
starts vllm.LLM with CONFIG_JSON's engine arguments, writes ``ready`` to REPLY_FD,
then reads one JSON command per line on stdin and answers one JSON line on
REPLY_FD. The replies have a pipe of their own: vLLM logs to stdout from several
threads and processes, and a log line written while a reply was being printed
once landed in the middle of it.

    {"prompt": [ids], "max_tokens": 8}   -> {"tokens": [...], "logprobs": [...],
                                             "cached": n, "elapsed_s": t}
    {"wait_committed": n, "socket": s}   -> {"committed": m}   (kvtierd's committed
                                             blocks reach n: the asynchronous stores landed)
    {"reset_prefix_cache": true}         -> {"reset": ok}  (empties vLLM's own prefix cache,
                                             once the last request's blocks are freed)

vLLM's engine core runs in processes of its own, hence a script with a main
guard rather than code in the test process.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache
# vLLM's CPU build leaves one core to its scheduler process, and one more when a
# KV connector is configured (for NIXL's transfers); on 2 cores the second cannot
# be had, and it then computes on both. One reserved core for every engine, with
# the connector or without, so that they compute alike.
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

# initializer_range 0.1: weights large enough that every logit depends on the
# K and V of the whole prompt (vLLM's dummy weights are too small for that).
TINY = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            initializer_range=0.1)


# Gemma 3's text model: sliding-window layers (a window of 256 tokens, two vLLM
# blocks on the CPU) between full-attention ones, vLLM's hybrid KV cache: two groups.
TINY_GEMMA3 = dict(architecture="gemma3", vocab_size=1000, hidden_size=128,
                   intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                   sliding_window=256, initializer_range=0.1,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                "full_attention"])


# DeepSeek-V2's MLA: one latent vector per token and layer, kv_lora_rank 512 + 64
# rope dimensions = 576, the head size vLLM's CPU MLA backends take (bf16 on AMX).
# Two layers, both dense (first_k_dense_replace): the experts are not what is tested.
TINY_DEEPSEEK_V2 = dict(architecture="deepseek_v2", vocab_size=1000, hidden_size=64,
                        intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=2, kv_lora_rank=512, q_lora_rank=None,
                        qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=512,
                        first_k_dense_replace=2, n_routed_experts=4, n_shared_experts=1,
                        moe_intermediate_size=64, num_experts_per_tok=2,
                        max_position_embeddings=2048, initializer_range=0.1)


def write_model(path: str, config: dict, seed: int = 0) -> None:
    """A model made from `config` with seeded random weights, saved as safetensors: a
    Llama, or the architecture `config["architecture"]` names ("gemma3", "deepseek_v2")."""
    import torch

    if os.path.exists(os.path.join(path, "model.safetensors")):
        return
    torch.manual_seed(seed)
    config = dict(config)
    arch = config.pop("architecture", "llama")
    if arch == "gemma3":
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig

        Gemma3ForCausalLM(Gemma3TextConfig(**config)).save_pretrained(path)
        return
    if arch == "deepseek_v2":
        from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

        DeepseekV2ForCausalLM(DeepseekV2Config(**config)).save_pretrained(path)
        return
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(**config)).save_pretrained(path)


def committed(socket: str) -> int:
    import kvtier

    with kvtier.Client("probe", kvtier.Layout(1, 1, 32, "fp16", 16), socket=socket,
                       map_arenas=False) as c:
        return int(c.stats()["committed_blocks"])


def main() -> None:
    model_dir, engine = sys.argv[1], json.loads(sys.argv[2])
    reply_fd = int(sys.argv[3])
    os.set_inheritable(reply_fd, False)  # vLLM's own processes write only logs
    replies = os.fdopen(reply_fd, "w")

    def reply(answer: object) -> None:
        replies.write((answer if isinstance(answer, str) else json.dumps(answer)) + "\n")
        replies.flush()

    config = engine.pop("model_config", TINY)
    if engine.get("load_format") == "dummy":  # benchmarks: random weights made by vLLM
        from transformers import LlamaConfig

        LlamaConfig(**config).save_pretrained(model_dir)
    else:
        write_model(model_dir, config)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    args = dict(model=model_dir, skip_tokenizer_init=True, dtype="float32",
                max_model_len=2048, enforce_eager=True, seed=0, gpu_memory_utilization=0.3)
    args.update(engine)
    llm = LLM(**args)
    reply("ready")
    for line in sys.stdin:
        cmd = json.loads(line)
        if "reset_prefix_cache" in cmd:
            # vLLM refuses while a finished request's blocks are still held (its
            # store into kvtierd not yet reported done); they are freed soon after.
            deadline = time.monotonic() + 30
            reset = llm.reset_prefix_cache()
            while not reset and time.monotonic() < deadline:
                time.sleep(0.05)
                reset = llm.reset_prefix_cache()
            reply({"reset": reset})
            continue
        if "wait_committed" in cmd:
            deadline = time.monotonic() + 60
            n = committed(cmd["socket"])
            while n < cmd["wait_committed"] and time.monotonic() < deadline:
                time.sleep(0.05)
                n = committed(cmd["socket"])
            reply({"committed": n})
            continue
        params = SamplingParams(temperature=0, max_tokens=cmd.get("max_tokens", 8), logprobs=1,
                                detokenize=False)
        start = time.perf_counter()
        out = llm.generate([TokensPrompt(prompt_token_ids=cmd["prompt"])], params,
                           use_tqdm=False)[0]
        elapsed = time.perf_counter() - start
        gen = out.outputs[0]
        logprobs = [lp[t].logprob for t, lp in zip(gen.token_ids, gen.logprobs or [])]
        reply({"tokens": list(gen.token_ids), "logprobs": logprobs,
               "cached": out.num_cached_tokens, "elapsed_s": elapsed})


if __name__ == "__main__":
    main()

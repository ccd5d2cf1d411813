"""Prefix reuse for Hugging Face transformers models through kvtierd.

A decoder-only model with the standard cache (``DynamicCache``) skips the
prefill of every prompt prefix that kvtierd holds, in any tier, across
processes and daemon restarts::

    from transformers import AutoModelForCausalLM
    import kvtier.hf

    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16)
    cache = kvtier.hf.PrefixCache(model)             # attaches to kvtierd
    out = cache.generate(input_ids, max_new_tokens=64)

``generate`` looks up the longest cached prefix of the prompt (whole blocks),
loads its K and V for every layer into a fresh ``DynamicCache``, lets
``model.generate`` run the model over the rest only, and stores the prompt's
new full blocks. The same steps by hand, for a forward loop of your own::

    past, cached = cache.load(input_ids)             # cached < len(prompt)
    out = model(input_ids[:, cached:], use_cache=True, **{cache.cache_kwarg: past})
    cache.store(input_ids, past)

The namespace is the model id, dtype and layout (layers, KV heads, head
dim, block tokens, K/V or latent), so a different model, dtype or block size
never hits. An MLA model (DeepSeek-V2/V3: ``kv_lora_rank`` in its config)
caches one latent vector per token and layer, its compressed K/V and its
rotary key (transformers keeps them as a layer's "keys" and "values"): kvtier
stores the two side by side, ``kind="latent"``. Sliding-window layers are
refused when the PrefixCache is made.
The model id names the weights: give two differently trained models the same
id and they would share blocks, so pass ``model_id=`` when the model has no
``name_or_path`` of its own.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional, Sequence, Tuple, cast

import torch
from transformers import DynamicCache, PreTrainedModel

from . import Client, Keys, Layout, ResourceExhaustedError, Tier, _auto, host_buffer

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def _text_config(model: PreTrainedModel) -> Any:
    """The config of a model's language part (a multimodal model's text config)."""
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _latent_split(config: Any) -> Optional[Tuple[int, int]]:
    """An MLA model's (compressed K/V, rotary key) widths, or None for K/V attention."""
    rank = getattr(config, "kv_lora_rank", None)
    if not rank:
        return None
    return int(rank), int(config.qk_rope_head_dim)


def model_layout(model: PreTrainedModel, block_tokens: int = 16) -> Layout:
    """The kvtier block layout of a decoder-only model's KV cache."""
    config = _text_config(model)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if model.dtype not in _DTYPES:
        raise ValueError(f"kvtier.hf stores fp16, bf16 or fp32 caches, not {model.dtype}")
    latent = _latent_split(config)
    if latent is not None:
        return Layout(layers=config.num_hidden_layers, kv_heads=1, head_dim=sum(latent),
                      dtype=_DTYPES[model.dtype], block_tokens=block_tokens, kind="latent")
    return Layout(
        layers=config.num_hidden_layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=_DTYPES[model.dtype],
        block_tokens=block_tokens,
    )


def _token_list(input_ids: Any) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError("kvtier.hf handles one sequence at a time (batch size 1)")
            input_ids = input_ids[0]
        return input_ids.tolist()
    return list(input_ids)


class PrefixCache:
    """The bridge between one model and kvtierd: load cached prefixes, store new ones.

    model: a decoder-only transformers model whose cache is a ``DynamicCache``
        of full-attention layers (Llama, Mistral without sliding window, Qwen2, ...).
    model_id: names the weights in the namespace; default ``model.name_or_path``.
    socket: kvtierd's socket, or "auto" (as for :class:`kvtier.Client`): the
        default, unless $KVTIER_SOCKET names one or kvtierd listens at
        /run/kvtier/kvtierd.sock; then that one.
    salt, timeout_ms: as for :class:`kvtier.Client`.
    block_tokens: tokens per block (16 by default, vLLM's block size).
    tier: where blocks are read from and written to: HOST (any model), or
        DEVICE for a model on the daemon's GPU.
    client: an attached :class:`kvtier.Client` to use instead (its layout must
        be this model's).
    quantize_lower: "fp8_e4m3" or "fp8_e5m2" to have kvtierd keep these
        blocks in its ssd and remote tiers in fp8 (lossy; "off" by default).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        model_id: Optional[str] = None,
        socket: Optional[str] = None,
        salt: str = "",
        block_tokens: int = 16,
        tier: Tier = Tier.HOST,
        timeout_ms: int = 0,
        client: Optional[Client] = None,
        quantize_lower: str = "off",
    ) -> None:
        self.model: Any = model
        self.layout = model_layout(model, block_tokens)
        self._latent = _latent_split(_text_config(model))
        sliding = [i for i, layer in enumerate(DynamicCache(config=model.config).layers)
                   if getattr(layer, "is_sliding", False)]
        if sliding:
            raise ValueError(f"kvtier.hf stores full-attention layers only; layers {sliding} of "
                             "this model keep a sliding window (serve it with kvtier.vllm)")
        self.tier = tier
        name = model_id or getattr(model, "name_or_path", "") or model.config._name_or_path
        if not name:
            raise ValueError("the model has no name_or_path: pass model_id= to name its weights")
        self.model_id = name
        if client is None:
            lo = self.layout
            namespace = (
                f"{name}|{lo.dtype}|{lo.layers}x{lo.kv_heads}x{lo.head_dim}|{lo.block_tokens}"
                + ("|latent" if lo.kind == "latent" else "")
            )
            client = Client(namespace, lo, socket=socket or _auto.default_or_auto(),
                            salt=salt, timeout_ms=timeout_ms,
                            client_name="kvtier.hf", quantize_lower=quantize_lower)
        elif client.layout != self.layout:
            raise ValueError(f"the client's layout {client.layout} is not the model's {self.layout}")
        self.client = client
        self._dtype = model.dtype
        # The keyword that hands a cache to this model's forward() and
        # generate(): "cache" in newer transformers (5.24 has it), "past_key_values"
        # in older ones (5.19, the newest vLLM 0.32 accepts, has not).
        self.cache_kwarg = (
            "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "PrefixCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading ----------------------------------------------------------

    def cached_tokens(self, input_ids: Any) -> int:
        """Tokens of the prompt that load() would take from kvtierd (no pin, no move)."""
        tokens = _token_list(input_ids)
        hits = self.client.lookup(self.client.block_keys(tokens)).hits
        return min(hits * self.layout.block_tokens, max(len(tokens) - 1, 0))

    def load(self, input_ids: Any) -> Tuple[DynamicCache, int]:
        """A DynamicCache holding the K and V of the longest cached prefix, and its length.

        At most len(prompt) - 1 tokens are loaded: the model must still run
        over the last one to produce the next token's logits. The blocks are
        pinned in kvtierd only while they are copied.
        """
        tokens = _token_list(input_ids)
        cache = DynamicCache(config=self.model.config)
        usable = max(len(tokens) - 1, 0)
        keys = self.client.block_keys(tokens)
        if not keys or usable == 0:
            return cache, 0
        lo = self.layout
        device = self.model.device
        if self._latent is not None:
            return self._load_latent(cache, keys, usable)
        with self.client.acquire(keys, self.tier) as lease:
            blocks = len(lease)
            if blocks == 0:
                return cache, 0
            # [layer, k|v, kv_head, token, head_dim]: per layer, K and V are
            # then [kv_head, tokens, head_dim] views, as DynamicCache keeps them.
            shape = (lo.layers, 2, lo.kv_heads, blocks * lo.block_tokens, lo.head_dim)
            host_copy = device.type == "cpu" and self.tier == Tier.HOST
            if host_copy:
                # Reused memory, already paged in (kvtier.host_buffer).
                seq = (torch.from_dlpack(host_buffer(blocks * lo.block_bytes))
                       .view(self._dtype).view(shape))
            else:
                seq = torch.empty(shape, dtype=self._dtype, device=device)
            if host_copy:
                # One pass over each block, in C++, without the GIL.
                lease.copy_into([seq[i, 0] for i in range(lo.layers)],
                                [seq[i, 1] for i in range(lo.layers)])
            else:
                # A GPU model or GPU slots: one torch copy per block (DLPack views).
                by_block = seq.view(lo.layers, 2, lo.kv_heads, blocks, lo.block_tokens, lo.head_dim)
                for i in range(blocks):
                    src = torch.from_dlpack(lease[i]).view(self._dtype).view(lo.block_shape)
                    by_block[:, :, :, i].copy_(src.permute(0, 1, 3, 2, 4))
                    del src
        n = min(blocks * lo.block_tokens, usable)
        for layer in range(lo.layers):
            k = seq[layer, 0, :, :n].unsqueeze(0)
            v = seq[layer, 1, :, :n].unsqueeze(0)
            # update() with nothing initializes the layer; then it takes the
            # tensors as they are (update() would copy them once more).
            cache.update(k[:, :, :0], v[:, :, :0], layer)
            target = cast(Any, cache.layers[layer])
            target.keys, target.values = k, v
        return cache, n

    def _load_latent(self, cache: DynamicCache, keys: Keys,
                     usable: int) -> Tuple[DynamicCache, int]:
        """load() for an MLA model: each block [layer][token][latent], the latent its
        compressed K/V then its rotary key, back into the layers' "keys" and "values"."""
        lo = self.layout
        rank, _ = cast(Tuple[int, int], self._latent)
        with self.client.acquire(keys, self.tier) as lease:
            blocks = len(lease)
            if blocks == 0:
                return cache, 0
            # [layer, token, latent], one copy per block out of the arena.
            seq = torch.empty((lo.layers, blocks * lo.block_tokens, lo.head_dim),
                              dtype=self._dtype, device=self.model.device)
            by_block = seq.view(lo.layers, blocks, lo.block_tokens, lo.head_dim)
            for i in range(blocks):
                src = torch.from_dlpack(lease[i]).view(self._dtype)
                by_block[:, i].copy_(src.view(lo.layers, lo.block_tokens, lo.head_dim))
                del src
        n = min(blocks * lo.block_tokens, usable)
        for layer in range(lo.layers):
            latent = seq[layer, :n].view(1, 1, n, lo.head_dim)  # [batch, 1 head, token, latent]
            k, v = latent[..., :rank], latent[..., rank:]
            cache.update(k[:, :, :0], v[:, :, :0], layer)
            target = cast(Any, cache.layers[layer])
            target.keys, target.values = k, v
        return cache, n

    # ---- writing ----------------------------------------------------------

    def store(self, input_ids: Any, cache: DynamicCache) -> int:
        """Writes the full blocks of input_ids whose K and V the cache holds and kvtierd lacks.

        Returns the blocks written (0 when all were cached, or when the tier
        had no room: storing is best effort and never stops inference).
        """
        tokens = _token_list(input_ids)
        lo = self.layout
        layers: list[Any] = list(cache.layers)
        if len(layers) != lo.layers:
            raise ValueError(f"the cache has {len(layers)} layers, the model {lo.layers}")
        held = cache.get_seq_length()
        full = min(len(tokens), held) // lo.block_tokens
        if full == 0:
            return 0
        keys = self.client.block_keys(tokens[: full * lo.block_tokens])
        start = self.client.lookup(keys).hits
        if start == full:
            return 0
        parent = keys[start - 1] if start > 0 else None
        try:
            write = self.client.allocate(keys[start:], self.tier, parent=parent)
        except ResourceExhaustedError:
            return 0
        with write:
            ks, vs = [], []
            for layer in layers:
                if not hasattr(layer, "keys") or getattr(layer, "is_sliding", False):
                    raise ValueError("kvtier.hf stores full-attention DynamicCache layers only")
                ks.append(layer.keys[0])
                vs.append(layer.values[0])
            written = len(write.allocated)
            if self._latent is not None:
                # MLA: per block, each layer's [token, compressed K/V | rotary key].
                T = lo.block_tokens
                for i in write.allocated:
                    span = slice((start + i) * T, (start + i + 1) * T)
                    slot = torch.from_dlpack(write[i]).view(self._dtype).view(
                        lo.layers, T, lo.head_dim)
                    for layer, (k, v) in enumerate(zip(ks, vs)):
                        slot[layer].copy_(torch.cat([k[0, span], v[0, span]], dim=-1))
                    del slot
            elif ks[0].device.type == "cpu" and self.tier == Tier.HOST:
                # One pass over each block, in C++, without the GIL.
                write.copy_from(ks, vs, first_block=start)
            else:
                # Per block, the 2 x layers [token, head, dim] slices, stacked
                # straight into the slot: one copy per block.
                parts = [t for kv in zip(ks, vs) for t in kv]
                shape = (2 * lo.layers, lo.block_tokens, lo.kv_heads, lo.head_dim)
                for i in write.allocated:
                    span = slice((start + i) * lo.block_tokens, (start + i + 1) * lo.block_tokens)
                    slot = torch.from_dlpack(write[i]).view(self._dtype).view(shape)
                    block = [p[:, span].transpose(0, 1) for p in parts]
                    if slot.device == parts[0].device:
                        torch.stack(block, out=slot)
                    else:  # a GPU model into host slots: stacked on the GPU, then one copy
                        slot.copy_(torch.stack(block))
                    del slot
            write.commit()
        return written

    # ---- both ---------------------------------------------------------------

    def generate(self, input_ids: torch.Tensor, *, store_output: bool = False, **kwargs: Any) -> Any:
        """model.generate() over the prompt, reusing and then storing its cached prefix.

        Takes generate()'s own keyword arguments. With store_output, the
        full blocks of the generated tokens are stored as well (for a
        conversation whose next turn resends them).
        """
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError("kvtier.hf handles one sequence at a time (input_ids of shape [1, n])")
        past, _ = self.load(input_ids)
        kwargs[self.cache_kwarg] = past
        out = self.model.generate(input_ids, **kwargs)
        sequence = out.sequences if hasattr(out, "sequences") else out
        stored = sequence[0] if store_output else input_ids[0]
        self.store(stored, past)
        return out


__all__: Sequence[str] = ["PrefixCache", "model_layout"]

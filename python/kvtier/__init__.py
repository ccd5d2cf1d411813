"""kvtier: attach Python inference workers to kvtierd.

kvtierd keeps the attention KV cache of LLM inference across GPU, host RAM
and SSD, so that workers stop recomputing prompt prefixes seen before. This
package binds kvtier's C++ client library::

    import kvtier

    layout = kvtier.Layout(layers=32, kv_heads=8, head_dim=128, dtype="bf16", block_tokens=16)
    with kvtier.Client(model="meta-llama/Llama-3.1-8B", layout=layout) as client:
        keys = client.block_keys(prompt_token_ids)       # full blocks only
        hit = client.lookup(keys).hits                    # cached prefix, in blocks
        with client.allocate(keys[hit:], parent=keys[hit - 1] if hit else None) as w:
            for i in w.allocated:
                numpy.asarray(w[i])[:] = ...              # write in place
            w.commit()
        with client.acquire(keys) as lease:               # pinned, zero-copy
            block = torch.from_dlpack(lease[0])

:mod:`kvtier.hf` reuses prefixes for Hugging Face transformers models;
:mod:`kvtier.vllm` is a KV connector that makes kvtierd vLLM's prefix cache.
"""

from __future__ import annotations

from ._kvtier import (
    DEFAULT_SOCKET,
    Client,
    Layout,
    Lease,
    LookupResult,
    Retention,
    Tier,
    WriteHandle,
    WriteState,
    deployment_keys,
    dequantize_block,
    event_hash,
    host_buffer,
    host_buffer_cache,
    quantize_block,
    set_host_buffer_cache,
)
from .errors import (
    CorruptionError,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    IoError,
    LayoutError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOCKET",
    "Client",
    "CorruptionError",
    "Error",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "Layout",
    "LayoutError",
    "Lease",
    "LookupResult",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "Retention",
    "Tier",
    "UnavailableError",
    "WriteHandle",
    "WriteState",
    "deployment_keys",
    "dequantize_block",
    "event_hash",
    "host_buffer",
    "host_buffer_cache",
    "quantize_block",
    "set_host_buffer_cache",
]

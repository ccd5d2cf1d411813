"""kvtier: attach Python inference workers to kvtierd.

kvtierd keeps the attention KV cache of LLM inference across GPU, host RAM
and SSD, so that workers stop recomputing prompt prefixes seen before. This
package binds kvtier's C++ client library::

    import kvtier

    layout = kvtier.Layout(layers=32, kv_heads=8, head_dim=128, dtype="bf16", block_tokens=16)
    with kvtier.Client(model="meta-llama/Llama-3.1-8B", layout=layout) as client:
        keys = client.block_keys(prompt_token_ids)       # kvtier.Keys: full blocks only
        hit = client.lookup(keys).hits                    # cached prefix, in blocks
        with client.allocate(keys[hit:], parent=keys[hit - 1] if hit else None) as w:
            for i in w.allocated:
                numpy.asarray(w[i])[:] = ...              # write in place
            w.commit()
        with client.acquire(keys) as lease:               # pinned, zero-copy
            block = torch.from_dlpack(lease[0])

An MLA model (DeepSeek-V2/V3) caches one latent vector per token and layer:
``kvtier.Layout(layers=61, kv_heads=1, head_dim=576, dtype="bf16", kind="latent")``.

:mod:`kvtier.hf` reuses prefixes for Hugging Face transformers models;
:mod:`kvtier.vllm` is a KV connector that makes kvtierd vLLM's prefix cache.
"""

from __future__ import annotations

import collections.abc
import time
from typing import Optional

from . import _auto
from ._auto import ensure_daemon
from ._kvtier import Client as _NativeClient
from ._kvtier import (
    DEFAULT_SOCKET,
    Keys,
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

# Keys is an immutable sequence of bytes (len, index, slices, iteration, in).
collections.abc.Sequence.register(Keys)


class Client(_NativeClient):
    __doc__ = _NativeClient.__doc__

    def __init__(self, model: str, layout: Layout, *, socket: Optional[str] = None,
                 salt: str = "", client_name: str = "python", timeout_ms: int = 0,
                 map_arenas: bool = True, busy_poll_us: int = 50,
                 quantize_lower: str = "off") -> None:
        """Connects to kvtierd and attaches to the namespace (model, salt, layout).

        socket: kvtierd's Unix socket; default $KVTIER_SOCKET, else
          /run/kvtier/kvtierd.sock. "auto": that daemon if it answers, else the
          one this user's workers share, started now if none runs
          (kvtier.ensure_daemon; its settings from $KVTIER_AUTO_*).
        The other arguments: see the class's documentation.
        """
        def attach(path: Optional[str]) -> None:
            super(Client, self).__init__(
                model, layout, socket=path, salt=salt, client_name=client_name,
                timeout_ms=timeout_ms, map_arenas=map_arenas, busy_poll_us=busy_poll_us,
                quantize_lower=quantize_lower)

        if socket != _auto.AUTO:
            attach(socket)
            return
        # A daemon found idle may exit between the check and the attach: then
        # find (or start) one again.
        for attempt in range(3):
            try:
                attach(_auto.resolve(_auto.AUTO))
                return
            except UnavailableError:
                if attempt == 2:
                    raise
                time.sleep(0.2)


__all__ = [
    "DEFAULT_SOCKET",
    "Client",
    "CorruptionError",
    "Error",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "Keys",
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
    "ensure_daemon",
    "dequantize_block",
    "event_hash",
    "host_buffer",
    "host_buffer_cache",
    "quantize_block",
    "set_host_buffer_cache",
]

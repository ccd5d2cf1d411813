"""Namespaces for an engine's chunks of bytes (kvtier.vllm_offload, kvtier.lmcache).

kvtierd keeps a namespace's blocks at one size, its layout's; an engine that hands
over chunks of bytes it lays out itself gets a layout of exactly their size, which
kvtierd stores and moves without reading.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._kvtier import Client, Layout
from .errors import Error


def chunk_layout(chunk_bytes: int, chunk_tokens: int = 1) -> Layout:
    """A layout of exactly `chunk_bytes` bytes a block: one latent fp16 plane over the
    chunk's tokens (or over one token, when the bytes do not divide by them)."""
    if chunk_bytes <= 0 or chunk_bytes % 2:
        raise ValueError(f"kvtier: a chunk of {chunk_bytes} bytes is not a whole number of "
                         "16-bit values")
    tokens = chunk_tokens if chunk_tokens > 0 and chunk_bytes % (2 * chunk_tokens) == 0 else 1
    return Layout(layers=1, kv_heads=1, head_dim=chunk_bytes // (2 * tokens), dtype="fp16",
                  block_tokens=tokens, kind="latent")


def close_all(clients: Iterable[Client]) -> None:
    """Closes each client, ignoring a kvtierd that is gone already."""
    for c in clients:
        try:
            c.close()
        except Error:
            pass

"""What the engines' plugs share (kvtier.vllm_offload, kvtier.lmcache, kvtier.sglang):
namespaces for an engine's chunks of bytes, and their connections to kvtierd.

kvtierd keeps a namespace's blocks at one size, its layout's; an engine that hands
over chunks of bytes it lays out itself gets a layout of exactly their size, which
kvtierd stores and moves without reading.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Optional

from . import _auto
from . import Client
from ._kvtier import Layout
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


class Connections:
    """An engine plug's clients of kvtierd, one per thread and namespace.

    A client serves one call at a time, so each thread that calls kvtierd (an
    engine's prefetch, load and store threads) gets its own. After kvtierd went
    away (UnavailableError, IoError) ``client`` answers None for
    ``retry_interval_s``, so the engine sees misses at once instead of a timeout
    each call; every cause of failure is logged once.
    """

    def __init__(self, plug: str, socket: Optional[str], salt: str, timeout_ms: int,
                 retry_interval_s: float) -> None:
        self._plug = plug
        self._log = logging.getLogger(f"kvtier.{plug}")
        self._socket = socket
        self._salt = salt
        self._timeout_ms = int(timeout_ms)
        self._retry_interval_s = float(retry_interval_s)
        self._local = threading.local()
        self._mu = threading.Lock()
        self._all: list[Client] = []
        self._down_until = 0.0
        self._warned: set[str] = set()

    def client(self, model: str, layout: Layout) -> Optional[Client]:
        """This thread's client of the namespace (model, layout); None while
        kvtierd is down (a failure to connect counts as down)."""
        mine: dict[str, Client] = self._local.__dict__.setdefault("clients", {})
        c = mine.get(model)
        if c is not None and not c.closed:
            return c
        if time.monotonic() < self._down_until:
            return None
        try:
            c = Client(model, layout, socket=_auto.resolve(self._socket, default_auto=True),
                       salt=self._salt, client_name=self._plug, timeout_ms=self._timeout_ms)
        except Error as e:
            self.lost(e)
            return None
        mine[model] = c
        with self._mu:
            self._all.append(c)
        return c

    def lost(self, e: BaseException) -> None:
        """A call failed: logged once per cause; if kvtierd is gone, this
        thread's clients are dropped and the others wait retry_interval_s."""
        cause = f"{type(e).__name__}: {e}"
        with self._mu:
            first = cause not in self._warned
            self._warned.add(cause)
        if first:
            self._log.warning("kvtier.%s: a call to kvtierd failed (%s); what it asked for counts "
                           "as a miss", self._plug, cause)
        if type(e).__name__ in ("UnavailableError", "IoError"):
            self._down_until = time.monotonic() + self._retry_interval_s
            self._local.__dict__.pop("clients", None)

    def close(self) -> None:
        with self._mu:
            clients, self._all = self._all, []
        close_all(clients)

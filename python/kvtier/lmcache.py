"""kvtierd as LMCache's L2 store (``lmcache server``'s ``native_plugin`` adapter).

LMCache's server keeps chunks in its own memory (L1) and hands them to L2
adapters below it; its ``native_plugin`` adapter loads a client class by module
path. This module is that client, backed by kvtierd::

    lmcache server --l1-size-gb 20 --eviction-policy LRU --l2-adapter \\
      '{"type": "native_plugin", "module_path": "kvtier.lmcache",
        "class_name": "KvtierL2Client",
        "adapter_params": {"socket": "/run/kvtier/kvtierd.sock"}}'

``adapter_params``: ``socket`` (as kvtier.vllm's, "auto" included), ``salt``,
``threads`` (copy threads, default 2), ``timeout_ms`` (5000),
``retry_interval_s`` (1.0).

The protocol (LMCache's NativeConnectorL2Adapter calls it): each
``submit_batch_*`` returns a future id at once and runs on a copy thread;
``event_fd`` becomes readable when results wait, and ``drain_completions``
returns them as ``(future_id, ok, error, per-key bools or None)``.

How chunks map onto kvtierd:

- A chunk is a chain of pages (kvtierd blocks of ``page_bytes``, default 2 MiB,
  in the namespace ``lmcache/pages-<page_bytes>``), page i named by a 16-byte
  digest (BLAKE2b) of LMCache's key string (model, KV rank, object group,
  chunk hash, cache salt) and i, the last page by the key, "last" and the
  page count. Page 0 begins with a 16-byte header (a magic and the chunk's
  length). One namespace for every chunk size, and the pages chained: kvtierd
  evicts a chunk from its tail, and a chunk missing a page is missing.
- An existence check (keys alone) is two LOOKUPs: the run of ordinary pages
  present, then the whole chain ending in the last page of that count.
- A set allocates the chain in kvtierd's shared host arena, copies the chunk
  in from LMCache's buffer and commits; a get pins the chain, checks the
  header's length against the buffer's, copies out and releases (one copy
  each way; the socket carries only keys).
- Chunks kvtierd holds already are not written again; a chunk a get does not
  find whole, or finds at another length, is a per-key False (LMCache
  recomputes it); a full kvtierd fails the set; a kvtierd that goes away fails
  every call, logged once, until it answers again.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import numpy as np

from . import Client, Keys, Tier, WriteState
from ._chunks import Connections, chunk_layout

_MAGIC = b"KVLM"
_HEADER = 16  # magic (4), reserved (4), the chunk's length (8, little-endian)


def namespace_model(page_bytes: int) -> str:
    """The model name of the namespace of `page_bytes` pages (the key strings
    name LMCache's model)."""
    return f"lmcache/pages-{page_bytes}"


def page_keys(key: str, pages: int) -> list[bytes]:
    """kvtierd's names for the `pages` pages of LMCache's chunk `key`: a 16-byte
    digest of the key and the page's number, the last one's of the key, "last"
    and the count."""
    def digest(text: str) -> bytes:
        return hashlib.blake2b(text.encode(), digest_size=16, person=b"kvtier-lmcache").digest()
    return [digest(f"{key}\x00{i}") for i in range(pages - 1)] + [digest(f"{key}\x00last\x00{pages}")]


def chunk_key(key: str) -> bytes:
    """The name of a chunk's first page when the chunk has more than one."""
    return page_keys(key, 2)[0]


class KvtierL2Client:
    """LMCache's native L2 connector protocol over kvtierd."""

    def __init__(self, socket: Optional[str] = None, salt: str = "", threads: int = 2,
                 timeout_ms: int = 5000, retry_interval_s: float = 1.0,
                 page_bytes: int = 2 << 20, max_chunk_bytes: int = 256 << 20,
                 **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"kvtier.lmcache: unknown adapter_params {sorted(unknown)}; known: "
                             "['max_chunk_bytes', 'page_bytes', 'retry_interval_s', 'salt', "
                             "'socket', 'threads', 'timeout_ms']")
        if page_bytes < 4096 or page_bytes % 2:
            raise ValueError(f"kvtier.lmcache: page_bytes must be even and at least 4096, not "
                             f"{page_bytes}")
        self.page_bytes = int(page_bytes)
        # The longest chain an existence check looks for.
        self._max_pages = max(1, -(-(int(max_chunk_bytes) + _HEADER) // self.page_bytes))
        self._retry_interval_s = float(retry_interval_s)
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._threads = max(1, int(threads))
        self._pool = ThreadPoolExecutor(max_workers=self._threads,
                                        thread_name_prefix="kvtier-lmcache")
        self._mu = threading.Lock()
        self._done: list[tuple[int, bool, str, Optional[list[bool]]]] = []
        self._next_id = 0
        self._conns = Connections("lmcache", socket, salt, timeout_ms, retry_interval_s)
        self._closed = False

    # -- the protocol --------------------------------------------------------------

    def event_fd(self) -> int:
        return self._efd

    def submit_batch_set(self, keys: list[str], bufs: list[memoryview]) -> int:
        return self._submit(self._set, keys, bufs)

    def submit_batch_get(self, keys: list[str], bufs: list[memoryview]) -> int:
        return self._submit(self._get, keys, bufs)

    def submit_batch_exists(self, keys: list[str]) -> int:
        return self._submit(self._exists, keys, None)

    def submit_batch_delete(self, keys: list[str]) -> int:
        return self._submit(self._delete, keys, None)

    def drain_completions(self) -> list[tuple[int, bool, str, Optional[list[bool]]]]:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        with self._mu:
            done, self._done = self._done, []
        return done

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        self._conns.close()
        os.close(self._efd)

    # -- the copy threads ------------------------------------------------------------

    def _submit(self, work: Callable[[list[str], Any], Optional[list[bool]]], keys: list[str],
                bufs: Any) -> int:
        with self._mu:
            fid = self._next_id
            self._next_id += 1
        if len(keys) != (len(bufs) if bufs is not None else len(keys)):
            raise ValueError(f"kvtier.lmcache: {len(keys)} keys but {len(bufs)} buffers")

        # A batch is split over the copy threads (its keys' order kept); the
        # future completes when every part has, failed if any part failed.
        parts = max(1, min(self._threads, len(keys)))
        bounds = [len(keys) * p // parts for p in range(parts + 1)]
        results: list[Any] = [None] * parts
        errors: list[str] = []
        left = [parts]

        def run(p: int) -> None:
            lo, hi = bounds[p], bounds[p + 1]
            try:
                results[p] = work(keys[lo:hi], bufs[lo:hi] if bufs is not None else None)
            except Exception as e:  # every future completes, whatever happened
                self._conns.lost(e)
                errors.append(f"{type(e).__name__}: {e}")
            with self._mu:
                left[0] -= 1
                if left[0] > 0:
                    return
                if errors:
                    item: tuple[int, bool, str, Optional[list[bool]]] = (fid, False, errors[0], None)
                elif any(r is None for r in results):
                    item = (fid, True, "", None)
                else:
                    item = (fid, True, "", [b for r in results for b in r])
                self._done.append(item)
            os.eventfd_write(self._efd, 1)

        for p in range(parts):
            self._pool.submit(run, p)
        return fid

    def _pages(self, length: int) -> int:
        return -(-(length + _HEADER) // self.page_bytes)

    def _header(self, length: int) -> np.ndarray:
        header = np.zeros(_HEADER, np.uint8)
        header[:4] = np.frombuffer(_MAGIC, np.uint8)
        header[8:] = np.frombuffer(struct.pack("<Q", length), np.uint8)
        return header

    def _set(self, keys: list[str], bufs: list[memoryview]) -> None:
        client = self._client()
        for key, buf in zip(keys, bufs):
            src = _bytes_of(buf)
            n = self._pages(src.nbytes)
            # Allocate, header and bytes laid over the pages, commit: one call
            # without the GIL. (Pages kvtierd holds already, EXISTS, are these
            # same bytes.)
            states = client.put_concat(Keys(page_keys(key, n)), self._header(src.nbytes), src,
                                       tier=Tier.HOST)
            if WriteState.SKIPPED in states:
                raise ResourceWarning("kvtierd had no room for the whole chunk")
        return None

    def _get(self, keys: list[str], bufs: list[memoryview]) -> list[bool]:
        client = self._client()
        out = []
        for key, buf in zip(keys, bufs):
            dst = _bytes_of(buf)
            n = self._pages(dst.nbytes)
            # Copied only if the chain is whole and its header names this
            # length (another chunk under these keys: -1, nothing copied).
            got = client.get_concat(Keys(page_keys(key, n)), self._header(dst.nbytes), dst,
                                    tier=Tier.HOST)
            ok = got == n
            out.append(ok)
        return out

    def _chain(self, client: Client, key: str) -> tuple[list[bytes], bool]:
        """The chain of pages `key` has in kvtierd (up to its first gap), and
        whether it is whole: two LOOKUPs, the run of ordinary pages, then that
        run ending in the last page of that count."""
        run = client.lookup(Keys(page_keys(key, self._max_pages + 1)[:-1])).hits
        chain = page_keys(key, run + 1)
        return chain, client.lookup(Keys(chain)).hits == run + 1

    def _exists(self, keys: list[str], _: Any) -> list[bool]:
        client = self._client()
        return [self._chain(client, key)[1] for key in keys]

    def _delete(self, keys: list[str], _: Any) -> list[bool]:
        client = self._client()
        out = []
        for key in keys:
            chain, whole = self._chain(client, key)
            client.remove(Keys(chain[:1]))  # (the first page takes the rest with it)
            out.append(whole)
        return out

    # -- connections -----------------------------------------------------------------

    def _client(self) -> Client:
        c = self._conns.client(namespace_model(self.page_bytes), chunk_layout(self.page_bytes))
        if c is None:
            raise ConnectionError("kvtierd is unreachable (retrying after "
                                  f"{self._retry_interval_s} s)")
        return c


def _bytes_of(buf: Any) -> np.ndarray:
    """A buffer's bytes as a flat uint8 array (no copy)."""
    return np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) \
        else buf.reshape(-1).view(np.uint8)

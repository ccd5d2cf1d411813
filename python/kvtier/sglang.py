"""kvtierd as SGLang HiCache's storage backend (its L3, below SGLang's host memory).

SGLang's hierarchical cache keeps KV pages on the GPU and in a host memory pool
of its own; a storage backend below them keeps pages that left both and hands
them back when a new request's prefix needs them. This module is that backend,
loaded by module path::

    python -m sglang.launch_server --model-path MODEL --enable-hierarchical-cache \\
      --hicache-mem-layout page_first --hicache-storage-backend dynamic \\
      --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.sglang", "class_name": "KvtierStorage",
        "interface_v1": 1, "socket": "/run/kvtier/kvtierd.sock"}'

Settings (in that extra config beside SGLang's own keys):

``socket``
    kvtierd's socket; "auto" finds or starts one (as kvtier.vllm's). Default:
    ``$KVTIER_SOCKET``, else the default socket, else "auto".
``model_id``
    The model's name in the namespaces; default SGLang's model name. Two
    engines share pages only under the same model_id, salt, page layout and
    sharding.
``salt``
    Extra namespace salt (default "").
``timeout_ms``
    A request to kvtierd that takes longer fails (default 5000): its pages
    count as misses or unsaved, SGLang recomputes; never a hung engine.
``retry_interval_s``
    After kvtierd went away, how long calls answer at once (misses, unsaved)
    before the backend tries to reconnect (default 1.0).
``interface_v1``
    SGLang's own switch: 1 has its cache controller call the zero-copy
    methods (``batch_get_v1``/``batch_set_v1``: kvtier copies between SGLang's
    host pool and kvtierd's shared arena, one copy a page); without it SGLang
    hands pages over as tensors it copied (``get``/``set``). Use 1.

How it maps SGLang's interface onto kvtierd:

- A page is one kvtierd block named by a 16-byte digest (BLAKE2b) of SGLang's
  page key (its chained SHA-256 of the prefix's tokens), in a namespace per
  model, host pool (``kv``, and a hybrid model's other pools: mamba, swa,
  indexer ...), page layout (the pool's class, layout, dtype, dimensions,
  page size and bytes) and shard. The block holds the page's pieces in the
  host pool (``get_page_buffer_meta``: its K and V halves, or one piece per
  layer) end to end; kvtierd stores and moves its bytes, never interprets
  them. A page of another model, layout or shard is another namespace: a
  miss, never a wrong page.
- Sharding as SGLang's own backends: with MHA each tensor-parallel rank keeps
  its heads in a namespace of its own (``tp<rank>of<size>``); an MLA model's
  latent pages are the same on every rank, so they share one namespace and
  only the writer rank (``is_storage_writer``) stores them (the others report
  success: the writer's copy is theirs). Mamba state stays per rank. Pipeline
  stages, attention context parallelism and decode context parallelism are
  namespaces of their own too.
- ``batch_exists`` is one LOOKUP (the leading pages cached). ``batch_set_v1``
  allocates the pages' blocks in kvtierd's shared host arena, copies each
  page's pieces into its slot and commits, in one call without the GIL; the
  pages are chained (the page before the batch, from ``prefix_keys``, is the
  first one's parent), so kvtierd's prefix-aware eviction sees the request.
  Pages kvtierd holds already are not written again. ``batch_get_v1``
  acquires the leading cached pages (pinned while copied) and copies them
  into the host pool's pages.
- Every address SGLang hands over is checked against the host pool's own
  tensors before kvtier copies to or from it.
- A full kvtierd stores what fits (the rest report failure, SGLang keeps them
  in its host pool); a kvtierd that went away makes every call a miss or a
  failed store until it is back; pages evicted between the existence check
  and the load report failure from there on. SGLang's ``clear`` leaves
  kvtierd's pages alone (other engines may share them; kvtierd evicts by
  its policy).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)

from . import Client, Keys, Layout, Tier, WriteState
from ._chunks import Connections, chunk_layout
from .errors import Error

logger = logging.getLogger(__name__)

_KEY_BYTES = 16
_SETTINGS = ("model_id", "retry_interval_s", "salt", "socket", "timeout_ms")
# SGLang's own keys of the extra config (read by SGLang, not by this backend).
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")


def page_key(key: str) -> bytes:
    """kvtierd's name for a page: a 16-byte digest of SGLang's page key."""
    return hashlib.blake2b(key.encode(), digest_size=_KEY_BYTES, person=b"kvtier-sglang").digest()


@dataclass
class _Pool:
    """One of SGLang's host pools, as kvtierd keeps its pages."""

    host: Any  # SGLang's HostKVCache
    namespace: str  # kvtierd's model name for its pages
    layout: Layout
    page_bytes: int
    writes: bool  # this rank stores its pages (False: an MLA replica)
    starts: np.ndarray  # the pool's tensors' address ranges, sorted
    ends: np.ndarray

    def spans(self, host_indices: torch.Tensor, pages: int) -> tuple[list[int], list[int]]:
        """The pieces of `pages` pages at host_indices, checked to lie in the pool."""
        addrs, sizes = self.host.get_page_buffer_meta(host_indices)
        if len(addrs) != len(sizes) or pages == 0 or len(addrs) % pages:
            raise ValueError(f"kvtier.sglang: {len(addrs)} pieces of host memory for {pages} "
                             "pages")
        a = np.asarray(addrs, dtype=np.uint64)
        s = np.asarray(sizes, dtype=np.uint64)
        i = np.searchsorted(self.starts, a, side="right") - 1
        if (i < 0).any() or (a + s > self.ends[np.maximum(i, 0)]).any():
            raise ValueError("kvtier.sglang: SGLang's host pool gave an address outside its "
                             "tensors")
        return [int(x) for x in addrs], [int(x) for x in sizes]


class KvtierStorage(HiCacheStorage):
    """SGLang HiCache's L3 storage backend over kvtierd."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None
                 ) -> None:
        extra = dict(storage_config.extra_config or {})
        unknown = sorted(k for k in extra if k not in _SETTINGS and k not in _SGLANG_KEYS)
        if unknown:
            raise ValueError(f"kvtier.sglang: unknown setting(s) {unknown} in "
                             f"--hicache-storage-backend-extra-config; known: {list(_SETTINGS)}")
        if storage_config.should_split_heads:
            raise ValueError("kvtier.sglang: pages split by heads across tensor-parallel sizes "
                             "(prefill and decode at different TP sizes) are not supported; run "
                             "both at the same TP size")
        model = extra.get("model_id") or storage_config.model_name
        if not model:
            raise ValueError("kvtier.sglang: no model to name the namespaces by; set model_id")
        self.model_id = str(model)
        self.config = storage_config
        self.zero_copy = bool(extra.get("interface_v1", 0))
        self._conns = Connections("sglang", extra.get("socket"), str(extra.get("salt", "")),
                                  int(extra.get("timeout_ms", 5000)),
                                  float(extra.get("retry_interval_s", 1.0)))
        self._pools: dict[str, _Pool] = {}

    # -- the host pools ----------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self._pools[str(PoolName.KV)] = self._pool(str(PoolName.KV), mem_pool_host)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        name = str(host_pool_name)
        if name != str(PoolName.KV) or name not in self._pools:
            self._pools[name] = self._pool(name, host_pool)

    def _pool(self, name: str, host: Any) -> _Pool:
        page_size = int(host.page_size)
        if self.zero_copy:
            try:
                _, sizes = host.get_page_buffer_meta(torch.arange(page_size, dtype=torch.int64))
            except (ValueError, NotImplementedError, AssertionError) as e:
                raise ValueError(f"kvtier.sglang: SGLang's {type(host).__name__} "
                                 f"({getattr(host, 'layout', '?')} layout) gives no page "
                                 f"addresses ({e}); use --hicache-mem-layout page_first") from e
            page_bytes, form = int(sum(sizes)), f"pages{len(sizes)}"
        else:
            page_bytes, form = int(host.get_dummy_flat_data_page().nbytes), "flat"
        c = self.config
        # MLA pages (all but mamba state) are the same on every TP rank.
        replicated = c.is_mla_model and name != str(PoolName.MAMBA)
        shard = "mla" if replicated else f"tp{c.tp_rank}of{c.tp_size}"
        if c.pp_size > 1:
            shard += f"-pp{c.pp_rank}of{c.pp_size}"
        if c.attn_cp_size > 1:
            shard += f"-cp{c.attn_cp_rank}of{c.attn_cp_size}"
        if c.dcp_size > 1:
            shard += f"-tp{c.tp_size}-dcp{c.dcp_rank}of{c.dcp_size}-page{c.logical_page_size}"
        dims = "-".join(f"{a}{getattr(host, a)}" for a in
                        ("layer_num", "head_num", "head_dim", "kv_lora_rank", "qk_rope_head_dim")
                        if getattr(host, a, None) is not None)
        form = (f"{type(host).__name__}-{getattr(host, 'layout', '')}-{host.dtype}-{dims}"
                f"-page{page_size}-{form}-{page_bytes}B").replace("torch.", "")
        ranges = _union(sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                               for t in _tensors(host)))
        return _Pool(host=host, namespace=f"{self.model_id}/sglang/{name}/{form}/{shard}",
                     layout=chunk_layout(page_bytes, page_size), page_bytes=page_bytes,
                     writes=not replicated or c.is_storage_writer,
                     starts=np.array([r[0] for r in ranges], dtype=np.uint64),
                     ends=np.array([r[1] for r in ranges], dtype=np.uint64))

    def _client(self, pool: _Pool) -> Optional[Client]:
        return self._conns.client(pool.namespace, pool.layout)

    # -- the zero-copy interface (interface_v1) ----------------------------------

    def batch_exists(self, keys: list[str],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        return self._leading(self._pools[str(PoolName.KV)], keys)

    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> list[bool]:
        return self._get(self._pools[str(PoolName.KV)], keys, host_indices)

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> list[bool]:
        return self._set(self._pools[str(PoolName.KV)], keys, host_indices, extra_info)

    # -- hybrid models' pools (the v2 interface) ---------------------------------

    def batch_exists_v2(self, keys: list[str],
                        pool_transfers: Optional[list[PoolTransfer]] = None,
                        extra_info: Optional[HiCacheStorageExtraInfo] = None
                        ) -> PoolTransferResult:
        kv_pages = self.batch_exists(keys, extra_info)
        hits: dict[str, int] = {str(PoolName.KV): kv_pages} if kv_pages else {}
        restorable = set(range(1, kv_pages + 1))
        for t in pool_transfers or []:
            if not restorable:
                break
            pool = self._pools[str(t.name)]
            if t.hit_policy == PoolHitPolicy.ALL_PAGES:
                boundary = self._leading(pool, keys[:kv_pages])
                ok = set(range(1, boundary + 1))
            elif t.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                # Only the last `window` pages of a prefix need this pool's page.
                window = max(1, len(t.keys) if t.keys else 1)
                present = self._each(pool, keys[:kv_pages])
                ok = {p for p in range(1, kv_pages + 1)
                      if all(present[max(0, p - window):p])}
                boundary = max(ok, default=0)
            else:
                raise ValueError(f"kvtier.sglang: hit policy {t.hit_policy} is not supported")
            if boundary:
                hits[str(t.name)] = boundary
            restorable &= ok
        ordered = sorted(restorable)
        return PoolTransferResult(ordered[-1] if ordered else 0, hits, ordered)

    def batch_get_v2(self, transfers: list[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> dict[str, list[bool]]:
        return {str(t.name): self._get(self._pools[str(t.name)], list(t.keys or []),
                                       t.host_indices) for t in transfers}

    def batch_set_v2(self, transfers: list[PoolTransfer],
                     extra_info: Optional[HiCacheStorageExtraInfo] = None
                     ) -> dict[str, list[bool]]:
        return {str(t.name): self._set(self._pools[str(t.name)], list(t.keys or []),
                                       t.host_indices, extra_info) for t in transfers}

    # -- pages as tensors (without interface_v1) ---------------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> Optional[torch.Tensor]:
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> list[Optional[torch.Tensor]]:
        pool = self._pools[str(PoolName.KV)]
        targets = list(target_locations or [])
        if len(targets) != len(keys):
            raise ValueError(f"kvtier.sglang: {len(targets)} pages to read {len(keys)} keys into")
        got = self._copy(pool, keys, _tensor_spans(pool, targets), None, store=False)
        return [t if ok else None for t, ok in zip(targets, got)]

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        pool = self._pools[str(PoolName.KV)]
        if not pool.writes:
            return True
        pages = list(values or [])
        if len(pages) != len(keys):
            raise ValueError(f"kvtier.sglang: {len(pages)} pages for {len(keys)} keys")
        return all(self._copy(pool, keys, _tensor_spans(pool, pages), None, store=True))

    def clear(self) -> None:
        logger.info("kvtier.sglang: clear leaves kvtierd's pages alone (other engines may "
                    "share them); kvtierd evicts by its policy")

    def close(self) -> None:
        self._conns.close()

    # -- the calls to kvtierd ------------------------------------------------------

    def _leading(self, pool: _Pool, keys: list[str]) -> int:
        """How many leading pages kvtierd holds."""
        if not keys:
            return 0
        client = self._client(pool)
        if client is None:
            return 0
        try:
            return int(client.lookup(Keys([page_key(k) for k in keys])).hits)
        except Error as e:
            self._conns.lost(e)
            return 0

    def _each(self, pool: _Pool, keys: list[str]) -> list[bool]:
        """Whether kvtierd holds each page (one LOOKUP a page)."""
        return [self._leading(pool, [k]) == 1 for k in keys]

    def _get(self, pool: _Pool, keys: list[str], host_indices: torch.Tensor) -> list[bool]:
        if not keys:
            return []
        return self._copy(pool, keys, pool.spans(host_indices, len(keys)), None, store=False)

    def _set(self, pool: _Pool, keys: list[str], host_indices: torch.Tensor,
             extra_info: Optional[HiCacheStorageExtraInfo]) -> list[bool]:
        if not keys:
            return []
        if not pool.writes:
            return [True] * len(keys)
        prefix = extra_info.prefix_keys if extra_info is not None else None
        parent = page_key(prefix[-1]) if prefix else None
        return self._copy(pool, keys, pool.spans(host_indices, len(keys)), parent, store=True)

    def _copy(self, pool: _Pool, keys: list[str], spans: tuple[list[int], list[int]],
              parent: Optional[bytes], store: bool) -> list[bool]:
        """Stores (or loads) the pages' pieces: whether each page made it."""
        client = self._client(pool)
        if client is None:
            return [False] * len(keys)
        names = Keys([page_key(k) for k in keys])
        addrs, sizes = spans
        try:
            if not store:
                got = int(client.get_spans(names, addrs, sizes, tier=Tier.HOST))
                return [i < got for i in range(len(keys))]
            try:
                states = client.put_spans(names, addrs, sizes, parent=parent, tier=Tier.HOST)
            except Error:
                if parent is None:
                    raise
                # (The page before the batch left kvtierd since: the batch stands alone.)
                states = client.put_spans(names, addrs, sizes, parent=None, tier=Tier.HOST)
            return [st != WriteState.SKIPPED for st in states]
        except Error as e:
            self._conns.lost(e)
            return [False] * len(keys)


def _tensors(host: Any) -> list[torch.Tensor]:
    """The CPU tensors a host pool holds (its pages live in them)."""
    out: list[torch.Tensor] = []
    for v in vars(host).values():
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel():
                out.append(t)
    return out


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted address ranges merged where they overlap (a pool's views of one buffer)."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _tensor_spans(pool: _Pool, pages: list[Any]) -> tuple[list[int], list[int]]:
    """Pages SGLang hands over as tensors: one piece each, a whole page."""
    addrs, sizes = [], []
    for t in pages:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or not t.is_contiguous() \
                or t.numel() * t.element_size() != pool.page_bytes:
            raise ValueError(f"kvtier.sglang: a page must be a contiguous CPU tensor of "
                             f"{pool.page_bytes} bytes")
        addrs.append(t.data_ptr())
        sizes.append(t.numel() * t.element_size())
    return addrs, sizes

"""kvtierd as a tier of vLLM's own KV offloading (``OffloadingConnector``).

vLLM's tiered offloading keeps a CPU tier of its own (the primary, which alone
talks to the GPU) and lets other tiers sit below it; this module is such a
tier, backed by kvtierd. vLLM moves chunks GPU -> its CPU tier -> kvtierd when
it stores, and kvtierd -> its CPU tier -> GPU when a lookup finds a chunk here.
Configure it by module path in ``TieringOffloadingSpec``'s ``secondary_tiers``::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8589934592,
        "secondary_tiers": [{"type": "KvtierTier", "module_path": "kvtier.vllm_offload",
                             "socket": "/run/kvtier/kvtierd.sock"}]}}'

Settings (the tier's entry beside ``type`` and ``module_path``):

``socket``
    kvtierd's socket; "auto" finds or starts one (as kvtier.vllm's). Default:
    ``$KVTIER_SOCKET``, else the default socket, else "auto".
``model_id``
    The namespace's model name; default vLLM's model. Two engines share chunks
    only under the same model_id, salt and chunk size, and with the same block
    hashes: vLLM seeds its hashes at random per process unless
    ``PYTHONHASHSEED`` is set, so set it alike in every engine that shares.
``salt``
    Extra namespace salt (default "").
``timeout_ms``
    A request to kvtierd that takes longer fails (default 5000): the job
    reports failure, vLLM recomputes; never a hung scheduler.
``retry_interval_s``
    After kvtierd went away, how long lookups answer MISS before the tier
    tries to reconnect (default 1.0).
``threads``
    Copy threads (default 2): stores and loads run on them, off the scheduler.

How it maps vLLM's interface onto kvtierd:

- A chunk is one kvtierd block of the chunk's bytes, named by a 16-byte digest
  (BLAKE2b) of vLLM's offload key (its chained block hash and KV cache
  group), in the namespace ``<model_id>/vllm-offload-<chunk bytes>``. Its
  layout is the chunk's bytes as one latent plane of fp16 over the chunk's
  tokens: kvtierd keeps and moves the bytes, never interprets them, and a
  chunk of another size is another namespace (a miss, never a wrong block).
- ``lookup`` asks kvtierd (one LOOKUP; a chunk this tier is still storing is
  RETRY). ``submit_store`` and ``submit_load`` queue the copy on a thread:
  a store allocates the blocks in kvtierd's shared host arena, copies each from
  vLLM's CPU tier buffer into its slot and commits (one copy, no socket
  traffic for the bytes); a load acquires them (pinned) and copies each into
  vLLM's CPU tier chunk. The chunks of a store job that follow each other in
  their request are written as one chain (each the parent of the next), so
  kvtierd's prefix-aware eviction sees the request's structure.
- Chunks kvtierd already holds are not written again; a full kvtierd, or one
  that went away, fails the job (vLLM keeps the chunk in its CPU tier or
  recomputes it); a load of chunks evicted since the lookup reports which
  arrived (``successful_keys``).
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import numpy as np
from vllm.v1.kv_offload.base import (
    LookupResult,
    Medium,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from . import Client, Keys, Tier, WriteState
from ._chunks import Connections, chunk_layout
from .errors import Error

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector

_KEY_BYTES = 16


def block_key(key: OffloadKey) -> bytes:
    """kvtierd's name for a chunk: a 16-byte digest of vLLM's offload key."""
    return hashlib.blake2b(bytes(key), digest_size=_KEY_BYTES, person=b"kvtier-vllm-off").digest()


class KvtierTier(SecondaryTierManager):
    """A secondary tier of vLLM's tiered offloading backed by kvtierd."""

    medium: ClassVar[Medium] = Medium.CPU

    def __init__(self, offloading_spec: "OffloadingSpec", primary_kv_view: memoryview,
                 tier_type: str, backpressure_detector: "BackpressureDetector | None" = None,
                 socket: Optional[str] = None, model_id: Optional[str] = None, salt: str = "",
                 timeout_ms: int = 5000, retry_interval_s: float = 1.0, threads: int = 2,
                 **unknown: Any) -> None:
        if unknown:
            raise ValueError(f"kvtier.vllm_offload: unknown setting(s) {sorted(unknown)}; known: "
                             "['model_id', 'retry_interval_s', 'salt', 'socket', 'threads', "
                             "'timeout_ms']")
        super().__init__(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                         tier_type=tier_type, backpressure_detector=backpressure_detector)
        rows = np.asarray(primary_kv_view)
        if rows.ndim != 2:
            raise ValueError("kvtier.vllm_offload: vLLM's CPU tier view should be "
                             f"(chunks, bytes), not of shape {rows.shape}")
        self._rows: Any = rows.view(np.uint8)
        self._chunk_bytes = int(self._rows.shape[1])
        self._chunk_tokens = int(_spec_attr(offloading_spec, "tokens_per_hash", 0) or 0) * int(
            _spec_attr(offloading_spec, "blocks_per_chunk", 1) or 1)
        self.layout = chunk_layout(self._chunk_bytes, self._chunk_tokens)
        self.model_id = model_id or _spec_model(offloading_spec)
        # kvtierd's namespace: a name with one layout, so the chunk size is in it.
        self.namespace_model = f"{self.model_id}/vllm-offload-{self._chunk_bytes}"
        # The scheduler's client (lookups) and the copy threads' (one each: a
        # client serves one call at a time, and a lookup must not wait for a copy).
        self._conns = Connections("vllm_offload", socket, salt, timeout_ms, retry_interval_s)
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(threads)),
                                        thread_name_prefix="kvtier-offload")
        self._finished: "queue.SimpleQueue[JobResult]" = queue.SimpleQueue()
        self._in_flight: dict[int, Future] = {}
        self._storing: dict[bytes, int] = {}  # block keys being stored -> jobs storing them
        self._unloadable: set[bytes] = set()  # block keys whose load failed
        self._mu = threading.Lock()  # _storing, _in_flight
        self._client()

    # -- the scheduler's calls (light, non-blocking) -----------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        k = block_key(key)
        with self._mu:
            if k in self._storing:
                return LookupResult.RETRY
            if k in self._unloadable:
                # A load of it failed: a HIT now would have vLLM promote it
                # again every step. It is a miss until stored again.
                return LookupResult.MISS
        client = self._client()
        if client is None:
            return LookupResult.MISS
        try:
            hit = client.lookup(Keys([k])).hits
        except Error as e:
            self._conns.lost(e)
            return LookupResult.MISS
        return LookupResult.HIT if hit == 1 else LookupResult.MISS

    def submit_store(self, job_metadata: TransferJob) -> None:
        keys, chunk_ids = _job_chunks(job_metadata, "store")
        ordered = self._chain_order(keys, chunk_ids, job_metadata.req_context)
        names = [block_key(k) for k in keys]
        with self._mu:
            for n in names:
                self._storing[n] = self._storing.get(n, 0) + 1
                self._unloadable.discard(n)
        self._submit(job_metadata.job_id, self._store, ordered, names)

    def submit_load(self, job_metadata: TransferJob) -> None:
        keys, chunk_ids = _job_chunks(job_metadata, "load")
        self._submit(job_metadata.job_id, self._load, list(zip(keys, chunk_ids)), None,
                     loading=[block_key(k) for k in keys])

    def get_finished_jobs(self) -> Iterable[JobResult]:
        out = []
        while True:
            try:
                out.append(self._finished.get_nowait())
            except queue.Empty:
                return out

    def has_pending_work(self) -> bool:
        with self._mu:
            return bool(self._in_flight)

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        with self._mu:
            pending = list(self._in_flight.values())
        for f in pending:
            f.result()

    def shutdown(self) -> None:
        self.drain_jobs()
        self._pool.shutdown(wait=True)
        self._rows = None  # (vLLM closes the buffer next: no view of it may stay)
        self._conns.close()

    # -- the copy threads --------------------------------------------------------

    def _submit(self, job_id: int, work: Any, items: Any, names: Optional[list[bytes]],
                loading: Optional[list[bytes]] = None) -> None:
        """Runs work(job_id, items) on a copy thread; its JobResult (a failure
        if it raised) goes to get_finished_jobs. `names`: the block keys a
        store writes (RETRY until it ends); `loading`: those a load reads."""
        def run() -> None:
            start = time.monotonic()
            try:
                result = work(job_id, items)
            except Exception as e:  # a job must report, whatever happened
                self._conns.lost(e)
                result = JobResult(job_id=job_id, success=False)
                if loading is not None:
                    with self._mu:
                        self._unloadable.update(loading)
            finally:
                if names is not None:
                    with self._mu:
                        for n in names:
                            left = self._storing.get(n, 0) - 1
                            if left > 0:
                                self._storing[n] = left
                            else:
                                self._storing.pop(n, None)
            result.transfer_time = time.monotonic() - start
            with self._mu:
                self._in_flight.pop(job_id, None)
            self._finished.put(result)

        with self._mu:
            self._in_flight[job_id] = self._pool.submit(run)

    def _store(self, job_id: int, chains: list[tuple[Optional[bytes], list[tuple[bytes, int]]]]
               ) -> JobResult:
        client = self._copy_client()
        moved = 0
        for parent, run in chains:
            keys = Keys([k for k, _ in run])
            rows = [c for _, c in run]
            # allocate, copy and commit in one call without the GIL (the
            # scheduler's thread holds it most of the time).
            try:
                states = client.put_rows(keys, self._rows, rows, parent=parent, tier=Tier.HOST)
            except Error:
                if parent is None:
                    raise
                # (The parent left kvtierd since: the run stands alone.)
                states = client.put_rows(keys, self._rows, rows, parent=None, tier=Tier.HOST)
            moved += self._chunk_bytes * sum(1 for st in states if st == WriteState.ALLOCATED)
            # Chunks after one kvtierd had no room for come back SKIPPED: the job
            # fails for them (vLLM keeps them in its own tier or recomputes them).
            if WriteState.SKIPPED in states:
                return JobResult(job_id=job_id, success=False, transfer_bytes=moved)
        return JobResult(job_id=job_id, success=True, transfer_bytes=moved)

    def _load(self, job_id: int, items: list[tuple[OffloadKey, int]]) -> JobResult:
        client = self._copy_client()
        keys = [block_key(k) for k, _ in items]
        done: list[OffloadKey] = []
        moved = 0
        # One call (ACQUIRE, the copies, RELEASE; without the GIL) for the
        # leading run of cached chunks; past a chunk kvtierd no longer has, the
        # next run.
        i = 0
        while i < len(items):
            got = client.get_rows(Keys(keys[i:]), self._rows, [c for _, c in items[i:]],
                                  tier=Tier.HOST)
            done.extend(k for k, _ in items[i:i + got])
            moved += got * self._chunk_bytes
            i += got + 1  # (skipping the chunk that is gone)
        if len(done) == len(items):
            return JobResult(job_id=job_id, success=True, transfer_bytes=moved)
        with self._mu:
            loaded = {block_key(k) for k in done}
            self._unloadable.update(k for k in keys if k not in loaded)
        return JobResult(job_id=job_id, success=False, successful_keys=done,
                         transfer_bytes=moved)

    # -- connections ---------------------------------------------------------------

    def _client(self) -> Optional[Client]:
        """This thread's client; None while kvtierd is down."""
        return self._conns.client(self.namespace_model, self.layout)

    def _copy_client(self) -> Client:
        client = self._client()
        if client is None:
            raise ConnectionError("kvtierd is unreachable")
        return client

    # -- chains ------------------------------------------------------------------

    def _chain_order(self, keys: list[OffloadKey], chunk_ids: list[int],
                     req_context: ReqContext) -> list[tuple[Optional[bytes], list[tuple[bytes, int]]]]:
        """The job's chunks as runs of consecutive chunks of their request, each
        with the block key of the chunk before it (its parent) when known."""
        known = [req_context.get_offload_key_position(k) for k in keys]
        if any(p is None for p in known) or self._chunk_tokens <= 0:
            return [(None, [(block_key(k), c)]) for k, c in zip(keys, chunk_ids)]
        positions = [int(p or 0) for p in known]
        order = sorted(range(len(keys)), key=lambda i: positions[i])
        runs: list[tuple[Optional[bytes], list[tuple[bytes, int]]]] = []
        prev_pos: Optional[int] = None
        for i in order:
            name = block_key(keys[i])
            if prev_pos is not None and positions[i] == prev_pos + self._chunk_tokens:
                runs[-1][1].append((name, chunk_ids[i]))
            else:
                runs.append((None, [(name, chunk_ids[i])]))
            prev_pos = positions[i]
        return runs


def _job_chunks(job: TransferJob, what: str) -> tuple[list[OffloadKey], list[int]]:
    """A job's keys and the CPU tier chunks they go with, in the order vLLM made
    them (its keys may be a set: chunk_ids came from iterating it)."""
    keys = list(job.keys)
    chunk_ids = np.asarray(job.chunk_ids).tolist()
    if len(keys) != len(chunk_ids):
        raise ValueError(f"kvtier.vllm_offload: {len(keys)} keys but {len(chunk_ids)} chunks "
                         f"in a {what} job")
    return keys, chunk_ids


def _spec_attr(spec: Any, name: str, default: Any) -> Any:
    return getattr(spec, name, default) if spec is not None else default


def _spec_model(spec: Any) -> str:
    config = _spec_attr(spec, "config", None)
    model = getattr(getattr(config, "model", None), "name", None)
    if not model:
        raise ValueError("kvtier.vllm_offload: no model to name the namespace by; set model_id")
    return str(model)

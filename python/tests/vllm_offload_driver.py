"""vLLM's own tiered-offloading controller, driven on the CPU as vLLM drives it.

vLLM's OffloadingConnector needs a GPU for its worker side (the GPU <-> CPU
copies); its scheduler side is plain Python over a CPU buffer. This module
plays both for test_vllm_offload.py: it builds the real TieringOffloadingSpec
(through OffloadingSpecFactory, as the connector does), its CPU primary tier
over a SharedOffloadRegion and the secondary tiers SecondaryTierFactory makes
from their config (kvtier.vllm_offload.KvtierTier by module path), then makes
the scheduler's calls (on_new_request, lookup, prepare_store / complete_store,
prepare_load / complete_load, on_schedule_end each step) and the worker's
copies (known bytes into the primary chunks a store is given, out of those a
load is given) in the order vLLM 0.32's scheduler makes them
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py).

    with Offload({"type": "KvtierTier", "module_path": "kvtier.vllm_offload",
                  "socket": path, "model_id": "m"}) as o:
        o.store(b"prompt", 4)                 # 4 chunks in, cascaded to the tier
        o.fill(b"other", 8)                   # evicts them from vLLM's CPU tier
        o.load(b"prompt", 4)                  # -> {"lookups": [...], "match": [...]}
"""

from __future__ import annotations

import hashlib
import time
import itertools
import os
from typing import Any, Dict, List, Optional

from vllm.v1.kv_offload.base import (
    LookupResult,
    OffloadKey,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory
from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager

TOKENS = 16  # tokens per chunk
_engines = itertools.count()


def offload_keys(seed: bytes, n: int) -> List[OffloadKey]:
    """n chained 32-byte block hashes (as vLLM's request block hashes), as offload keys."""
    out, prev = [], b""
    for i in range(n):
        prev = hashlib.sha256(prev + seed + i.to_bytes(4, "little")).digest()
        out.append(make_offload_key(prev, 0))
    return out


def payload(key: OffloadKey, size: int) -> bytes:
    """The chunk's bytes: `size` bytes derived from its key."""
    d = hashlib.sha256(b"kv:" + bytes(key)).digest()
    return (d * (size // len(d) + 1))[:size]


class Offload:
    """A TieringOffloadingManager with vLLM's CPU primary tier of `chunks` chunks of
    `chunk_bytes`, over the secondary tier `tier_config`."""

    def __init__(self, tier_config: Dict[str, Any], chunks: int = 8,
                 chunk_bytes: int = 4096) -> None:
        engine_id = f"kvtier_test_{os.getpid()}_{next(_engines)}"
        config = OffloadingConfig(
            groups=(OffloadingGroupConfig(tokens_per_block=TOKENS,
                                          layer_names=("model.layers.0.self_attn.attn",),
                                          group_id=0),),
            worker_kv_bytes_per_block=chunk_bytes,
            enable_kv_cache_events=True,
            extra_config={"spec_name": "TieringOffloadingSpec",
                          "cpu_bytes_to_use": chunks * chunk_bytes,
                          "secondary_tiers": [dict(tier_config)]},
            engine_id=engine_id,
            model=OffloadingModelConfig(name="kvtier-test/tiny", dtype="float16"),
            cache=OffloadingCacheConfig(tokens_per_hash=TOKENS, blocks_per_chunk=1),
            parallel=OffloadingParallelConfig(
                rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
                data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                is_parallelism_agnostic=True))
        self.spec = OffloadingSpecFactory.create_spec(config)
        self.mgr: TieringOffloadingManager = self.spec.get_manager()
        self.tier = self.mgr.secondary_tiers[0]
        self.view = self.mgr.primary_tier.get_kv_memoryview()
        self.chunk_bytes = chunk_bytes
        self._new: List[str] = []
        self._requests = itertools.count()

    def __enter__(self) -> "Offload":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mgr.shutdown()

    # -- the worker's side: the primary tier's chunk bytes -----------------------

    def chunk(self, cid: int) -> memoryview:
        stride = self.view.strides[0]
        return self.view.cast("B")[cid * stride:cid * stride + self.chunk_bytes]

    # -- the scheduler's side ------------------------------------------------------

    def request(self, seed: bytes, n: int) -> "tuple[ReqContext, List[OffloadKey]]":
        ctx = ReqContext(req_id=f"req-{next(self._requests)}")
        self.mgr.on_new_request(ctx)
        self._new.append(ctx.req_id)
        keys = offload_keys(seed, n)
        for i, k in enumerate(keys):
            ctx.set_offload_key_position(k, (i + 1) * TOKENS)
        return ctx, keys

    def step(self) -> None:
        self.mgr.on_schedule_end(ScheduleEndContext(new_req_ids=self._new, preempted_req_ids=()))
        self._new = []
        list(self.mgr.take_events())

    def settle(self, max_steps: int = 500) -> int:
        """Steps while the manager has work in flight; the steps taken."""
        for n in range(max_steps):
            if not self.mgr.has_pending_work():
                return n
            self.step()
            time.sleep(0.002)
        raise AssertionError(f"the manager still had work after {max_steps} steps")

    def store(self, seed: bytes, n: int) -> List[OffloadKey]:
        """A request's n chunks stored: written into vLLM's CPU tier, then
        cascaded to the secondary tier; returns when the cascade ended."""
        ctx, keys = self.request(seed, n)
        out = self.mgr.prepare_store(keys, ctx)
        assert out is not None, "vLLM's CPU tier had no room"
        if not out.keys_to_store:  # (all in vLLM's CPU tier already: nothing to do)
            self.mgr.on_request_finished(ctx)
            return keys
        for key, cid in zip(out.keys_to_store, out.store_spec.chunk_ids):
            self.chunk(int(cid))[:] = payload(key, self.chunk_bytes)
        self.step()
        self.mgr.complete_store(set(out.keys_to_store), ctx)
        self.mgr.on_request_finished(ctx)
        self.settle()
        return keys

    fill = store  # (storing other chunks evicts the older ones from vLLM's CPU tier)

    def load(self, seed: bytes, n: int, max_steps: int = 200) -> Dict[str, Any]:
        """The scheduler's lookups of a request's n chunks, step after step,
        until each is a HIT or the run ends at a MISS; then the loaded chunks'
        bytes against what was stored. Returns the last step's lookups, the
        steps taken, and for each hit chunk whether its bytes match."""
        ctx, keys = self.request(seed, n)
        results: List[LookupResult] = []
        for steps in range(max_steps):
            results = []
            for k in keys:
                r = self.mgr.lookup(k, ctx)
                results.append(r)
                if r is LookupResult.MISS:
                    break
            if all(r is LookupResult.HIT for r in results) or LookupResult.MISS in results \
                    and all(r is LookupResult.HIT for r in results[:-1]):
                break
            self.step()
            time.sleep(0.002)
        else:
            raise AssertionError(f"lookups still pending after {max_steps} steps: {results}")
        hits = [k for k, r in zip(keys, results) if r is LookupResult.HIT]
        match: List[bool] = []
        if hits:
            spec = self.mgr.prepare_load(hits, ctx)
            for k, cid in zip(hits, spec.chunk_ids):
                match.append(bytes(self.chunk(int(cid))) == payload(k, self.chunk_bytes))
            self.step()
            self.mgr.complete_load(hits, ctx)
        self.mgr.on_request_finished(ctx)
        self.settle()
        return {"lookups": [r.name for r in results], "steps": steps, "match": match}

    def lookups(self, seed: bytes, n: int) -> List[str]:
        """The tier's own lookup of each of a request's chunks (no promotion)."""
        ctx, keys = self.request(seed, n)
        out = [self.tier.lookup(k, ctx).name for k in keys]
        self.mgr.on_request_finished(ctx)
        return out


def tier_config(socket: str, model_id: Optional[str] = "kvtier-test/tiny",
                **extra: Any) -> Dict[str, Any]:
    cfg: Dict[str, Any] = {"type": "KvtierTier", "module_path": "kvtier.vllm_offload",
                           "socket": socket, **extra}
    if model_id is not None:
        cfg["model_id"] = model_id
    return cfg

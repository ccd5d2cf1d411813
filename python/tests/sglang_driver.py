"""SGLang's own HiCache L3 path (sglang 0.5.23) on the CPU, driven as its
scheduler drives it, against a storage backend: SGLang's ``file`` backend, or
kvtier's (kvtier.sglang.KvtierStorage, loaded by SGLang's ``dynamic`` factory).

Runs for real: the device KV pool (MHATokenToKVPool / MLATokenToKVPool, on the
CPU), the host pool (MHATokenToKVPoolHost / MLATokenToKVPoolHost, any layout)
in an anchor-only HostPoolGroup and the HybridCacheController serving builds
for a flat MHA/MLA model (hybrid_pool_assembler.build_kv_only_stack): its
backup, prefetch, prefetch-IO and prefetch-sync threads and queues, its
extra-config parser, StorageBackendFactory, the storage config it derives from
the parallel state and its page hashes (get_storage_hash_str of a RadixKey).
The driver makes the radix cache's calls: write_storage of a prefix as
``--nodes`` radix nodes (each chained on the last hash of the one before),
then the acks of ack_backup_queue; prefetch, the hit from prefetch_hit_queue,
allocate_storage_hit, prefetch_buffer.put, the acks of ack_prefetch_queue up
to completed_req. Every wait has a timeout.

Set up by hand: the published config is SGLang's test config
(override_server_args, model "dummy"); the ranks come from
get_parallel().override_permanently, with no process group (the controller's
rank collectives then reduce nothing, so ``--tp-size 2 --tp-rank 1`` is one
rank of two, keyed and writing as that rank); the host pool gets the arguments
build_kv_host_pool gives it plus pin_memory=False (else cudaHostRegister); host
pages are filled with bytes seeded by their page key instead of copied from a
GPU, so a second process checks what a first stored. Bytes are compared in the
host pool's own page view (pages of another layout with the same bytes pass).

    .venv-sglang/bin/python python/tests/sglang_driver.py --backend file --dir /tmp/hc
    .venv-sglang/bin/python python/tests/sglang_driver.py --backend kvtier --socket S \\
        --scenario bench --tokens 4096 --page-size 64 --layers 16 --heads 8 --head-dim 128

Prints one JSON object (exit 0 when every page stored and loaded back equal);
SGLang logs on stderr. SGLang's fault injector applies
(SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE=p).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import logging
import os
import statistics
import sys
import threading
import time
import traceback
from array import array
from queue import Empty
from typing import Any, Callable, Dict, List, Optional

import torch


def define_torchvision_ops() -> None:
    """Lets torchvision import on the CPU build of torch.

    SGLang imports torchvision at import time (sglang.srt.configs), and PyPI's
    torchvision wheels are CUDA builds: their op library (torchvision/_C.so)
    links libc10_cuda.so, which torch's CPU build lacks, so it does not load.
    torchvision copes with that for every op but two: its _meta_registrations.py
    registers fake kernels for torchvision::nms and torchvision::qnms
    unconditionally, which raises "operator torchvision::nms does not exist"
    when the op was never defined. Defining the two schemas (as _C.so would)
    lets the import through; nothing on SGLang's storage path runs a vision op.
    """
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so"))
    try:
        torch.ops.load_library(libs[0])
        return
    except (IndexError, OSError, RuntimeError):
        pass
    for op in ("nms", "qnms"):
        torch.library.define(f"torchvision::{op}",
                             "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


define_torchvision_ops()

from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import CacheRequestHandle  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
)
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (  # noqa: E402
    HybridCacheController,
)
from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import (  # noqa: E402
    _mha_host_inputs,
    build_pool_entry,
)
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host import HostPoolGroup  # noqa: E402
from sglang.srt.mem_cache.pool_host.common import get_allocator_type  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.utils import get_storage_hash_str  # noqa: E402
from sglang.srt.runtime_context import get_context, get_memory, get_parallel  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "fp8_e4m3": torch.float8_e4m3fn}
# The backend calls the controller makes (v1: zero copy; plain: SGLang copies), recorded.
CALLS = ("batch_exists", "batch_exists_v2", "batch_get_v1", "batch_set_v1",
         "batch_get", "batch_set", "batch_get_v2", "batch_set_v2")


def extra_config(a: argparse.Namespace) -> str:
    """--hicache-storage-backend-extra-config, as a user would pass it."""
    extra: Dict[str, Any] = {"prefetch_threshold": a.page_size}
    if a.backend == "kvtier":
        extra.update(backend_name="kvtier", module_path="kvtier.sglang",
                     class_name="KvtierStorage", interface_v1=1, socket=a.socket)
    elif a.backend == "file":
        extra["file_storage_path"] = a.dir
    if a.pass_prefix_keys:
        extra["hicache_storage_pass_prefix_keys"] = True
    return json.dumps({**extra, **json.loads(a.extra_config or "{}")})


def build(a: argparse.Namespace, tokens: int):
    """Publishes the config and ranks, then builds the device pool (`tokens`),
    the host pool (twice that, and a page) and the controller, as
    build_kv_only_stack does but for pin_memory."""
    storage = "file" if a.backend == "file" else "dynamic"
    get_context().override_server_args(
        page_size=a.page_size, tp_size=a.tp_size, enable_hierarchical_cache=True,
        hicache_mem_layout=a.layout, hicache_io_backend=a.io_backend, hicache_ratio=2.0,
        hicache_write_policy="write_through", hicache_storage_backend=storage).install()
    get_parallel().override_permanently(tp_rank=a.tp_rank, tp_size=a.tp_size, pp_rank=0,
                                        pp_size=1, attn_dcp_size=1, attn_dcp_rank=0)
    dtype, mem = DTYPES[a.dtype], get_memory()
    layers = dict(layer_num=a.layers, device="cpu", enable_memory_saver=False,
                  start_layer=0, end_layer=a.layers)
    if a.mla:
        dev = MLATokenToKVPool(tokens, a.page_size, dtype, kv_lora_rank=a.kv_lora_rank,
                               qk_rope_head_dim=a.rope_dim, **layers)
        host_cls, info = MLATokenToKVPoolHost, dev.get_device_pool_infos()[0].buffer_info
        kwargs = dict(override_kv_cache_dim=dev.kv_cache_dim, device_capacity_tokens=dev.size,
                      start_layer=0, end_layer=a.layers, target_layer_num=a.layers)
    else:
        dev = MHATokenToKVPool(tokens, a.page_size, dtype, head_num=a.heads,
                               head_dim=a.head_dim, **layers)
        host_cls, info, kwargs = _mha_host_inputs(dev)
    host = host_cls(info, mem.hicache_ratio, mem.hicache_size, a.page_size,
                    mem.hicache_mem_layout, allocator_type=get_allocator_type(),
                    pool_label="kv", pin_memory=False, **kwargs)
    group = HostPoolGroup([build_pool_entry(
        name=PoolName.KV, host_pool=host, device_pool=dev, is_anchor=True,
        layer_mapping={i: i for i in range(a.layers)}, transfer_layer_id_max=a.layers)])
    extra, threshold, _, _, pass_prefix_keys = \
        HybridCacheController.parse_storage_backend_extra_config(extra_config(a))
    cc = HybridCacheController(
        TokenToKVPoolAllocator(tokens, dtype, "cpu", dev, need_sort=False), group, a.page_size,
        None, load_cache_event=threading.Event(), write_policy=mem.hicache_write_policy,
        io_backend=mem.hicache_io_backend, storage_backend=storage, prefetch_threshold=threshold,
        model_name=a.model_name, storage_backend_extra_config=extra,
        transfer_layer_id_max=a.layers, host_memory_mode=mem.hicache_host_memory_mode)
    return host, cc, pass_prefix_keys


class Recorder:
    """Wraps the backend's batch calls: which the controller made, in which
    order, with how many keys, host_indices (count, first), prefix_keys (count),
    what came back and how long it took; and which never returned."""

    def __init__(self, backend: Any) -> None:
        self.log: List[Dict[str, Any]] = []
        self.in_flight: Dict[int, str] = {}
        self.lock = threading.Lock()
        for name in CALLS:
            if callable(getattr(backend, name, None)):
                setattr(backend, name, self.wrap(name, getattr(backend, name)))

    def wrap(self, name: str, fn: Callable) -> Callable:
        def call(keys, *args, **kwargs):
            rec: Dict[str, Any] = {"call": name, "keys": len(keys)}
            if args and isinstance(args[0], torch.Tensor):
                rec["host_indices"] = [args[0].numel(), int(args[0][0]) if len(args[0]) else None]
            pk = getattr(kwargs.get("extra_info", args[-1] if args else None), "prefix_keys", None)
            rec["prefix_keys"] = None if pk is None else len(pk)
            t = time.perf_counter()
            with self.lock:
                self.in_flight[id(rec)] = name
            try:
                out = fn(keys, *args, **kwargs)
                rec["result"] = (sum(1 for x in out if x is not None and x is not False)
                                 if isinstance(out, (list, tuple)) else out)
                return out
            except BaseException as e:
                rec["raised"] = repr(e)[:200]
                raise
            finally:
                rec["s"] = time.perf_counter() - t
                with self.lock:
                    self.log.append(rec)
                    del self.in_flight[id(rec)]
        return call

    def take(self) -> List[Dict[str, Any]]:
        with self.lock:
            out, self.log = self.log, []
        return out


class Warnings(logging.Handler):
    """What SGLang logged at WARNING and above (how its controller saw a failure)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: List[str] = []
        logging.getLogger("sglang").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        msg = f"{record.levelname} {record.name}: {record.getMessage()}"[:300]
        if msg not in self.seen and len(self.seen) < 10:
            self.seen.append(msg)


def page_hashes(a: argparse.Namespace, tokens: List[int], prior: Optional[str] = None) -> List[str]:
    """The keys SGLang's radix tree and its hit query name pages by."""
    return get_storage_hash_str(RadixKey(array("q", tokens), cache_salt=a.cache_salt),
                                prior, page_size=a.page_size)


def page_bytes(a: argparse.Namespace, host: Any, key: str) -> torch.Tensor:
    """A page's bytes, from its key: the same in every process; each MHA rank
    holds heads of its own, MLA pages are the same on every rank."""
    seed = int(key[:15], 16) ^ (0 if a.mla else a.tp_rank + 1)
    n = host.get_data_page(0).numel() * host.dtype.itemsize
    return torch.randint(0, 256, (n,), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))


def page_view(host: Any, idx: torch.Tensor, k: int) -> torch.Tensor:
    """Page k of host indices `idx`, as the host pool's page view (any layout)."""
    return host.get_data_page(int(idx[k * host.page_size]), flat=False)


def store(a, host, cc, tokens: List[int], pass_prefix_keys: bool) -> Dict[str, Any]:
    """write_storage of the prefix as radix nodes; waits for every backup ack."""
    ps, pages = a.page_size, len(tokens) // a.page_size
    idx = host.alloc(len(tokens))
    if idx is None:
        return {"pages": pages, "error": "host pool full"}
    n = max(1, min(a.nodes, pages))
    cuts = [pages * i // n for i in range(n + 1)]
    nodes: List[List[str]] = []
    for lo, hi in zip(cuts, cuts[1:]):
        nodes.append(page_hashes(a, tokens[lo * ps:hi * ps], nodes[-1][-1] if nodes else None))
        for k, key in enumerate(nodes[-1], lo):
            view = page_view(host, idx, k)
            view.copy_(page_bytes(a, host, key).view(host.dtype).view(view.shape))
    start, deadline = time.perf_counter(), time.monotonic() + a.timeout
    for i, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
        prefix = [key for node in nodes[:i] for key in node] if pass_prefix_keys else None
        cc.write_storage(idx[lo * ps:hi * ps], array("q", tokens[lo * ps:hi * ps]), nodes[i],
                         prefix)
    acks, stored = 0, 0
    while acks < n:
        try:
            op = cc.ack_backup_queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except Empty:
            break
        acks, stored = acks + 1, stored + op.completed_tokens // ps
    out = {"pages": pages, "stored_pages": stored, "acks": acks,
           "s": round(time.perf_counter() - start, 6), "backup_skip": bool(cc.backup_skip)}
    host.free(idx)
    if acks < n:
        out["error"] = f"timeout: {n - acks} of {n} backup acks missing"
    return out


def load(a, host, cc, tokens: List[int], pass_prefix_keys: bool, rid: str) -> Dict[str, Any]:
    """The radix cache's prefetch of the prefix, from the root; compares bytes."""
    ps, pages = a.page_size, len(tokens) // a.page_size
    out: Dict[str, Any] = {"pages": pages, "loaded_pages": 0, "bytes_equal": False}
    deadline, t = time.monotonic() + a.timeout, time.perf_counter()
    cc.prefetch(CacheRequestHandle(rid=rid, attempt_id=0),
                RadixKey(array("q", tokens), cache_salt=a.cache_salt), None,
                [] if pass_prefix_keys else None)
    try:
        op = cc.prefetch_hit_queue.get(timeout=a.timeout)
    except Empty:
        return {**out, "error": "timeout waiting for the storage hit query"}
    out.update(hit_pages=op.storage_hit_count // ps, query_s=round(time.perf_counter() - t, 6))
    if op.storage_hit_count < cc.prefetch_threshold:
        op.mark_terminate()  # (the radix cache revokes a hit below the threshold)
        return out
    idx, n = cc.allocate_storage_hit(op, op.storage_hit_count, allow_partial=True,
                                     min_tokens=cc.prefetch_threshold, evict_host=lambda n: 0)
    if idx is None:
        return {**out, "error": "host pool full"}
    op.storage_hit_count, op.host_indices, op.hash_value = n, idx, op.hash_value[:n // ps]
    t = time.perf_counter()
    cc.prefetch_buffer.put(op)
    completed, finished = 0, False
    while not finished:
        try:
            ack = cc.ack_prefetch_queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except Empty:
            out["error"] = "timeout waiting for the prefetch acks"
            break
        completed = completed if ack.completed_tokens is None else ack.completed_tokens
        finished = bool(ack.completed_req)
    out.update(transfer_s=round(time.perf_counter() - t, 6), loaded_pages=completed // ps)
    # Every page loaded (all of the prefix, or a leading part of it) holds the
    # bytes stored under its key.
    loaded = op.hash_value[:completed // ps]
    out["bytes_equal"] = bool(loaded) and all(
        torch.equal(page_view(host, idx, k).contiguous().view(torch.uint8).flatten(),
                    page_bytes(a, host, key)) for k, key in enumerate(loaded))
    if finished:
        host.free(idx)
    return out


def pools_v2(a, host, cc, tokens: List[int]) -> Dict[str, Any]:
    """The v2 calls a hybrid model's controller makes for its pools, made here
    on the anchor pool by hand (this flat model's controller makes none):
    batch_set_v2, batch_exists_v2 with both hit policies (and a key never
    stored after the prefix), batch_get_v2 into other pages; compares bytes."""
    ps, pages = a.page_size, len(tokens) // a.page_size
    keys, backend = page_hashes(a, tokens), cc.storage_backend
    idx, dst = host.alloc(len(tokens)), host.alloc(len(tokens))
    for k, key in enumerate(keys):
        view = page_view(host, idx, k)
        view.copy_(page_bytes(a, host, key).view(host.dtype).view(view.shape))
    stored = backend.batch_set_v2([PoolTransfer(name=PoolName.KV, host_indices=idx, keys=keys)])
    probe = [PoolTransfer(name=PoolName.KV, keys=keys[-2:], hit_policy=PoolHitPolicy.TRAILING_PAGES),
             PoolTransfer(name=PoolName.KV, keys=keys, hit_policy=PoolHitPolicy.ALL_PAGES)]
    hit = backend.batch_exists_v2(keys + ["0" * 64], probe)
    got = backend.batch_get_v2([PoolTransfer(name=PoolName.KV, host_indices=dst, keys=keys)])
    loaded = got[PoolName.KV]
    equal = all(torch.equal(page_view(host, dst, k).contiguous().view(torch.uint8).flatten(),
                            page_bytes(a, host, key)) for k, key in enumerate(keys) if loaded[k])
    host.free(idx)
    host.free(dst)
    return {"pages": pages, "stored": sum(stored[PoolName.KV]), "kv_hit_pages": hit.kv_hit_pages,
            "pool_hit_pages": {str(k): v for k, v in hit.extra_pool_hit_pages.items()},
            "loaded_pages": sum(loaded), "bytes_equal": equal}


def rates(r: Dict[str, Any], page: int, key: str) -> None:
    """Bytes/s and ms a page, around the controller's op (`key`) and summed
    over the backend's own set (store) or get (load) calls in it."""
    n, verb = r.get("stored_pages" if key == "s" else "loaded_pages", 0), key[0]
    backend = sum(t["s"] for c, t in r["calls"].items() if ("set" if verb == "s" else "get") in c)
    for name, tag, s in ((key, "", r.get(key) or 0), ("backend_s", "backend_", backend)):
        if n and s > 0:
            r[name], r[tag + "MBps"] = round(s, 6), round(n * page / s / 1e6, 1)
            r[tag + "ms_per_page"] = round(s / n * 1e3, 3)


def run(a: argparse.Namespace) -> Dict[str, Any]:
    warnings = Warnings()
    pages = a.pages if a.scenario == "roundtrip" else a.tokens // a.page_size
    host, cc, pass_prefix_keys = build(a, pages * a.page_size)
    page, cfg = host.get_data_page(0).numel() * host.dtype.itemsize, cc.storage_config
    out: Dict[str, Any] = {"scenario": a.scenario, "backend": a.backend, "phase": a.phase}
    out["config"] = {"pool": type(host).__name__, "layout": host.layout, "dtype": a.dtype,
                     "page_size": a.page_size, "page_bytes": page, "pages": pages,
                     "storage_backend": type(cc.storage_backend).__name__,
                     "page_get": cc.page_get_func.__name__, "page_set": cc.page_set_func.__name__,
                     "tp": [cfg.tp_rank, cfg.tp_size], "is_mla_model": cfg.is_mla_model,
                     "is_page_first_layout": cfg.is_page_first_layout,
                     "model_name": cfg.model_name, "extra_config": cfg.extra_config}
    host.kv_buffer.zero_()  # (touched once, as a serving engine's pool is after warm-up)
    rec = Recorder(cc.storage_backend)
    results: Dict[str, List[Dict[str, Any]]] = {
        p: [] for p in ("store", "load") if a.phase in (p, "both")}
    if a.scenario == "v2":
        try:
            tokens = torch.randint(0, 32000, (pages * a.page_size,),
                                   generator=torch.Generator().manual_seed(a.token_seed)).tolist()
            out["v2"] = r = pools_v2(a, host, cc, tokens)
            out["ok"] = r["stored"] == r["loaded_pages"] == r["kv_hit_pages"] == pages and \
                r["bytes_equal"]
        finally:
            cc.detach_storage_backend()
        return out
    try:
        for i in range(a.iters if a.scenario == "bench" else 1):
            g = torch.Generator().manual_seed(a.token_seed + i)
            tokens = torch.randint(0, 32000, (pages * a.page_size,), generator=g).tolist()
            for phase, rs in results.items():
                r = (store(a, host, cc, tokens, pass_prefix_keys) if phase == "store" else
                     load(a, host, cc, tokens, pass_prefix_keys, f"req-{i}"))
                log = rec.take()
                r["calls"] = {}
                for c in log:
                    t = r["calls"].setdefault(c["call"], {"calls": 0, "keys": 0, "s": 0.0})
                    t.update(calls=t["calls"] + 1, keys=t["keys"] + c["keys"], s=t["s"] + c["s"])
                rates(r, page, "s" if phase == "store" else "transfer_s")
                rs.append(r)
                out.setdefault(phase + "_call_log", log[:8])
    finally:
        if not any("timeout" in r.get("error", "") for rs in results.values() for r in rs):
            cc.detach_storage_backend()  # (joins the threads: not while a call hangs)
        out["backend_calls_in_flight"] = sorted(rec.in_flight.values())
        out["sglang_warnings"] = warnings.seen
    for phase, rs in results.items():
        out[phase] = rs[0] if len(rs) == 1 else {"iters": rs}
        for key in ("s", "transfer_s", "query_s", "MBps", "ms_per_page", "backend_s",
                    "backend_MBps", "backend_ms_per_page"):
            if len(rs) > 1 and all(key in r for r in rs):
                out[phase]["median_" + key] = round(statistics.median(r[key] for r in rs), 6)
    out["ok"] = not any(r.get("error") for rs in results.values() for r in rs) and all(
        r.get("stored_pages") == r["pages"] or r.get("backup_skip")
        for r in results.get("store", [])) and all(
        r["loaded_pages"] == r["pages"] and r["bytes_equal"] for r in results.get("load", []))
    return out


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["file", "kvtier", "dynamic"], default="file")
    p.add_argument("--socket", help="kvtierd's socket (--backend kvtier)")
    p.add_argument("--dir", default="/tmp/kvtier-sglang-hicache", help="the file backend's folder")
    p.add_argument("--extra-config", help="JSON over the backend's extra config (--backend "
                   "dynamic: backend_name, module_path, class_name, interface_v1, ...)")
    p.add_argument("--scenario", choices=["roundtrip", "bench", "v2"], default="roundtrip")
    p.add_argument("--phase", choices=["store", "load", "both"], default="both")
    p.add_argument("--layout", default="page_first",
                   help="host pool layout: page_first, layer_first, page_first_direct")
    p.add_argument("--io-backend", help="hicache_io_backend (no device copies run here); default "
                   "as SGLang resolves it: direct for page_first_direct, else kernel")
    p.add_argument("--mla", action="store_true", help="MLA pools (one latent row per token)")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--pages", type=int, default=40, help="prefix pages (roundtrip)")
    p.add_argument("--tokens", type=int, default=4096, help="prefix tokens (bench)")
    p.add_argument("--iters", type=int, default=3, help="store + load rounds (bench)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=2, help="KV heads (MHA)")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--kv-lora-rank", type=int, default=512, help="MLA latent width")
    p.add_argument("--rope-dim", type=int, default=64, help="MLA rope width")
    p.add_argument("--model-name", default="kvtier-test/tiny")
    p.add_argument("--cache-salt", help="a request namespace (seeds the page hash chain)")
    p.add_argument("--nodes", type=int, default=2, help="radix nodes the prefix is written as")
    p.add_argument("--pass-prefix-keys", action="store_true",
                   help="hicache_storage_pass_prefix_keys: writes and prefetches carry prefix_keys")
    p.add_argument("--token-seed", type=int, default=0)
    p.add_argument("--tp-rank", type=int, default=0)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60, help="seconds for each wait")
    a = p.parse_args(argv)
    a.io_backend = a.io_backend or ("direct" if a.layout == "page_first_direct" else "kernel")
    if a.backend == "kvtier" and not a.socket:
        p.error("--backend kvtier needs --socket")
    if a.scenario == "bench" and a.tokens % a.page_size:
        p.error("--tokens must be a multiple of --page-size")
    return a


def main(argv: Optional[List[str]] = None) -> int:
    a = parse(argv)
    try:
        out = run(a)
    except Exception as e:
        out = {"scenario": a.scenario, "backend": a.backend, "ok": False, "error": repr(e)[:500],
               "traceback": traceback.format_exc().splitlines()[-8:]}
    print(json.dumps(out, indent=1, default=str), flush=True)
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())

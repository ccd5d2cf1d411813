"""kvtierd as vLLM's prefix cache beyond one process: a KV connector for vLLM (V1).

vLLM keeps its prefix cache per process. With this connector, every vLLM
worker of a node shares kvtierd's cache, which outlives the processes and
spans GPU, host and SSD under one eviction policy::

    vllm serve MODEL --kv-transfer-config '{"kv_connector":"KvtierConnector",
        "kv_connector_module_path":"kvtier.vllm","kv_role":"kv_both"}'

Scheduler side: a new request's prompt is cut into kvtier blocks (a whole
number of vLLM blocks each) and hinted to kvtierd the moment vLLM accepts it
(``on_new_request``), so that blocks on the SSD or in the remote tier come up
to host memory while the request waits in vLLM's queue. When it is scheduled
the prompt is looked up; the hits beyond vLLM's own prefix hit are loaded
into the request's blocks, so the prefill skips them. Blocks in host memory
are loaded before the request's first forward; blocks that must still come
from the SSD or the remote tier are loaded asynchronously (vLLM's
WAITING_FOR_REMOTE_KVS: the request waits for them while the other requests
keep running, and the step's batch never waits for a disk). The prompt's full
blocks are stored at the end of its prefill, so a second turn that arrives
while the first is still generating, or after that vLLM crashed, finds them;
when the request finishes, its new full blocks (the output's) are stored too.
Stores are asynchronous: vLLM frees a finished request's blocks once the
worker reports its stores done, and a preempted request's blocks are not
handed on while one of its stores still reads them.

Worker side: the leased blocks are staged out of kvtierd's shared host arena
(or its GPU arena, ``"tier": "device"``) before the forward and copied into
vLLM's paged KV tensors layer by layer, as each attention layer asks for its
own; a finished request's blocks are copied into slots allocated in kvtierd
and committed, on a thread of their own. Copies are batched torch indexing,
one per layer.
A block that could not be loaded is reported to vLLM, which recomputes it:
the connector never serves a wrong block, and a missing kvtierd only means
misses (with one log line), never a failed request.

Settings, in ``kv_connector_extra_config`` (all optional):

``socket``
    kvtierd's Unix socket, or ``"auto"``: the kvtierd at ``$KVTIER_SOCKET``
    (else ``/run/kvtier/kvtierd.sock``) when one answers there, else the one
    the workers of this user on the node share, started by the first of them
    that finds none (docs/python.md, "socket='auto'"). The default: ``"auto"``,
    unless ``$KVTIER_SOCKET`` is set (then that socket). An explicit path is
    never "auto": when its daemon does not answer, requests recompute.
``daemon_host_memory``, ``daemon_ssd_dir``, ``daemon_ssd_capacity``, ``daemon_idle_exit_s``
    For a kvtierd that ``"auto"`` starts: its host tier (a size such as
    ``"8GiB"``, or a share of the available memory, default 0.25), its SSD
    tier (none unless a directory is given), and how long it stays without
    workers (default 600 s).
``salt``
    Keeps tenants apart: blocks stored under one salt never match another.
``model_id``
    Names the weights in the namespace (default: vLLM's model, as given).
``tier``
    ``"host"`` (default) or ``"device"``: the tier blocks are loaded from
    and stored into (``device`` needs a kvtierd with a GPU tier).
``retention_priority``, ``retention_duration_ms``
    Priority (0-100, TensorRT-LLM's semantics, 35 the daemon's default) given
    to the blocks this worker stores, and how long it holds (0 = for good).
``block_tokens``
    Tokens per kvtier block: a multiple of vLLM's block size (default: the
    same size).
``timeout_ms``
    The longest wait for kvtierd per call (default 5000).
``retry_interval_s``
    How often to try kvtierd again while it is unreachable (default 1).
``load_async``
    ``"auto"`` (default: asynchronously when a hit is on the SSD or in the
    remote tier, before the forward when it is in memory), ``"always"`` or
    ``"never"``.
``hints``
    Hint each request's prompt to kvtierd when vLLM accepts it (default true).
``store_prompt``
    Store the prompt's blocks at the end of its prefill, not only when the
    request finishes (default true).
``producer_wait_s``
    A ``kv_consumer``'s longest wait for the blocks its ``kv_producer`` said it
    stored (default 10); past it the missing blocks are recomputed.
``quantize_lower``
    ``"off"`` (default), ``"fp8_e4m3"`` or ``"fp8_e5m2"``: kvtierd keeps this
    model's blocks in its SSD and remote tiers in that fp8 format (half the
    bytes; lossy, restored to the KV dtype when loaded back; fp16/bf16 KV
    caches only). Every worker of a model must use the same.

The namespace is the model id, the KV dtype and layout (layers, KV heads,
head size, block tokens, the attention backend's block format, K/V or MLA's
latent), the KV cache group with several (vLLM's hybrid KV cache: full and
sliding-window groups) and, with tensor parallelism, the worker's rank:
groups and shards never mix blocks, and a hit needs every rank's shard. An fp8
KV cache (``kv_cache_dtype`` fp8) is stored as vLLM holds it, its scales in
kvtier's fp8 block format, in namespaces apart from 16-bit workers.

``kv_role``: ``kv_both`` loads and stores; for prefill/decode disaggregation a
``kv_producer`` stores each prompt at the end of its prefill and never loads,
a ``kv_consumer`` loads and never stores (python/examples/pd_proxy.py routes
between them; docs/vllm-pd.md).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

from . import Client, Error, Keys, LayoutError, Retention, Tier, UnavailableError, _auto

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

# Under "vllm." so that its lines go where vLLM logs its own.
logger = logging.getLogger("vllm.kvtier")

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


@dataclass
class Settings:
    """The connector's settings (``kv_connector_extra_config``)."""

    socket: Optional[str] = None
    salt: str = ""
    model_id: Optional[str] = None
    tier: Tier = Tier.HOST
    retention_priority: Optional[int] = None
    retention_duration_ms: int = 0
    block_tokens: int = 0
    timeout_ms: int = 5000
    retry_interval_s: float = 1.0
    quantize_lower: str = "off"
    load_async: str = "auto"
    hints: bool = True
    store_prompt: bool = True
    producer_wait_s: float = 10.0
    daemon: dict[str, Any] = field(default_factory=dict)  # ensure_daemon()'s settings

    def resolve_socket(self) -> str:
        """The socket to attach to now (socket="auto" finds or starts kvtierd)."""
        return _auto.resolve(self.socket, default_auto=True, logger=logger, **self.daemon)

    @staticmethod
    def from_extra_config(extra: dict[str, Any]) -> "Settings":
        known = {"socket", "salt", "model_id", "tier", "retention_priority",
                 "retention_duration_ms", "block_tokens", "timeout_ms", "retry_interval_s",
                 "quantize_lower", "load_async", "hints", "store_prompt", "producer_wait_s",
                 "daemon_host_memory", "daemon_ssd_dir", "daemon_ssd_capacity",
                 "daemon_idle_exit_s"}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ValueError(f"kvtier.vllm: unknown setting(s) {unknown} in "
                             f"kv_connector_extra_config; known: {sorted(known)}")
        s = Settings()
        s.socket = extra.get("socket") or None
        s.salt = str(extra.get("salt", ""))
        s.model_id = extra.get("model_id") or None
        tier = str(extra.get("tier", "host")).lower()
        if tier not in ("host", "device"):
            raise ValueError(f"kvtier.vllm: tier must be 'host' or 'device', not {tier!r}")
        s.tier = Tier.HOST if tier == "host" else Tier.DEVICE
        if extra.get("retention_priority") is not None:
            s.retention_priority = int(extra["retention_priority"])
            if not 0 <= s.retention_priority <= 100:
                raise ValueError("kvtier.vllm: retention_priority must be within 0..100")
        s.retention_duration_ms = int(extra.get("retention_duration_ms", 0))
        s.block_tokens = int(extra.get("block_tokens", 0))
        s.timeout_ms = int(extra.get("timeout_ms", 5000))
        s.retry_interval_s = float(extra.get("retry_interval_s", 1.0))
        s.quantize_lower = str(extra.get("quantize_lower", "off"))
        if s.quantize_lower not in ("off", "fp8_e4m3", "fp8_e5m2"):
            raise ValueError("kvtier.vllm: quantize_lower must be 'off', 'fp8_e4m3' or "
                             f"'fp8_e5m2', not {s.quantize_lower!r}")
        s.load_async = str(extra.get("load_async", "auto")).lower()
        if s.load_async not in ("auto", "always", "never"):
            raise ValueError("kvtier.vllm: load_async must be 'auto', 'always' or 'never', not "
                             f"{s.load_async!r}")
        s.hints = _flag(extra, "hints", True)
        s.store_prompt = _flag(extra, "store_prompt", True)
        s.producer_wait_s = float(extra.get("producer_wait_s", 10.0))
        for key in ("host_memory", "ssd_dir", "ssd_capacity", "idle_exit_s"):
            if extra.get("daemon_" + key) is not None:
                s.daemon[key] = extra["daemon_" + key]
        if "idle_exit_s" in s.daemon:
            s.daemon["idle_exit_s"] = int(s.daemon["idle_exit_s"])
        return s


def _flag(extra: dict[str, Any], key: str, default: bool) -> bool:
    v = extra.get(key, default)
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("true", "1", "yes", "on"):
        return True
    if str(v).lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"kvtier.vllm: {key} must be true or false, not {v!r}")


@dataclass
class _Load:
    """Blocks of one request to fill from kvtierd before its forward."""

    req_id: str
    token_ids: list[int]  # the prompt's tokens up to the last block to load
    first_token: int  # tokens before this one are computed already (vLLM's own hit)
    block_ids: list[list[int]]  # per KV cache group: the request's vLLM blocks, from its first
    asynchronous: bool = False  # off the forward; done when get_finished says so
    wait_s: float = 0.0  # kv_consumer: how long to wait for a producer's blocks to land


@dataclass
class _Save:
    """Full blocks of a request to store into kvtierd."""

    req_id: str
    token_ids: list[int]  # a whole number of kvtier blocks
    block_ids: list[list[int]]  # per KV cache group: the request's vLLM blocks, from its first
    final: bool = True  # the request finished: get_finished reports it once stored


@dataclass
class _Staged:
    """A load of this step: its blocks' bytes, out of the arena, waiting for their layers."""

    group: int  # the KV cache group whose layers these are
    src: torch.Tensor  # [blocks, layers, 2, r, vLLM block tokens, kv_heads, head_dim]
    skip: int  # leading vLLM blocks of the first kvtier block that vLLM had already
    block_ids: list[int]  # the vLLM blocks written
    ids: torch.Tensor  # the same, on the KV cache's device


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    """What the scheduler hands the workers each step."""

    loads: list[_Load] = field(default_factory=list)
    saves: list[_Save] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)


@dataclass
class _GroupSpec:
    """One of vLLM's KV cache groups as kvtier stores it: a namespace of its own."""

    index: int
    window: int  # tokens of a sliding window; 0: full attention (every block of the prefix)
    model_id: str
    layout: Any
    layer_names: list[str]

    def first_block(self, tokens: int, block_tokens: int) -> int:
        """The first kvtier block this group needs to go on after `tokens` tokens.

        Full attention needs the whole prefix. A sliding window needs the
        tokens the next one attends to, vLLM's rule (SlidingWindowManager's
        get_num_skipped_tokens): those before ``tokens - window + 1`` are
        skipped, and their blocks are neither stored nor loaded.
        """
        if not self.window:
            return 0
        return max(0, tokens - self.window + 1) // block_tokens


def _kv_dtype(spec: Any, cache_dtype: str, index: int) -> str:
    """kvtier's dtype for a KV cache group: its 16-bit (or fp32) dtype, or, for a group
    vLLM keeps in fp8 (``kv_cache_dtype`` fp8, one byte a value), that fp8 format."""
    if spec.dtype in _DTYPES:
        return _DTYPES[spec.dtype]
    one_byte = spec.dtype in (torch.uint8, torch.float8_e4m3fn, torch.float8_e5m2)
    if one_byte and cache_dtype in ("fp8", "fp8_e4m3"):
        return "fp8_e4m3"  # vLLM's "fp8" is e4m3 (float8_e4m3fn)
    if one_byte and cache_dtype == "fp8_e5m2":
        return "fp8_e5m2"
    raise ValueError(f"kvtier.vllm stores 16-bit, fp32 and fp8 (fp8, fp8_e4m3, fp8_e5m2) KV "
                     f"caches, not a {spec.dtype} cache with kv_cache_dtype {cache_dtype!r} "
                     f"(KV cache group {index})")


def _namespace(vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig",
               settings: Settings, tp_rank: int, pp_rank: int) -> tuple[list[_GroupSpec], int]:
    """The namespaces of this worker, one per KV cache group, and vLLM's block size.

    Raises ValueError, naming the feature, for what the connector cannot
    store exactly (Mamba state, DeepSeek-V4's sparse MLA, a KV dtype kvtier has
    no layout for, groups of different block sizes).
    """
    from vllm.platforms import current_platform
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec

    from . import Layout

    groups = kv_cache_config.kv_cache_groups
    if not groups:
        raise ValueError("kvtier.vllm: the model has no KV cache groups")
    block_size = groups[0].kv_cache_spec.block_size
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    out: list[_GroupSpec] = []
    for index, group in enumerate(groups):
        spec = group.kv_cache_spec
        # Full attention or a sliding window, with a K and a V per head, or MLA's
        # one latent vector per token (DeepSeek-V2/V3); other specs (Mamba's state,
        # chunked local attention, DeepSeek-V4's sparse and indexer caches) keep
        # blocks that are not a prompt prefix's K and V.
        kind = "kv"
        if type(spec) is FullAttentionSpec:
            window = 0
        elif type(spec) is SlidingWindowSpec:
            window = int(spec.sliding_window)
        elif type(spec) is MLAAttentionSpec and not spec.model_version and not spec.alignment:
            window, kind = 0, "latent"
        else:
            what = type(spec).__name__
            if type(spec) is MLAAttentionSpec:
                what = f"MLAAttentionSpec of {spec.model_version or 'an aligned'} sparse MLA"
            raise ValueError("kvtier.vllm handles full-attention (FullAttentionSpec), "
                             "sliding-window (SlidingWindowSpec) and MLA (MLAAttentionSpec) KV "
                             f"caches, not {what} (KV cache group {index})")
        dtype = _kv_dtype(spec, cache_dtype, index)
        if dtype.startswith("fp8") and settings.quantize_lower != "off":
            raise ValueError("kvtier.vllm: quantize_lower with an fp8 KV cache: its blocks are "
                             "fp8 already (leave quantize_lower 'off')")
        if spec.block_size != block_size:
            raise ValueError("kvtier.vllm: KV cache groups of different block sizes "
                             f"({block_size} and {spec.block_size} tokens)")
        block_tokens = settings.block_tokens or spec.block_size
        if block_tokens % spec.block_size:
            raise ValueError(f"kvtier.vllm: block_tokens {block_tokens} is not a multiple of "
                             f"vLLM's block size {spec.block_size}")
        if window and block_tokens != spec.block_size:
            # vLLM frees a window's blocks one vLLM block at a time: a kvtier block
            # of several would be half freed when it is stored.
            raise ValueError(f"kvtier.vllm: block_tokens {block_tokens} with a sliding window: "
                             f"a sliding-window model takes vLLM's block size ({spec.block_size})")
        layout = Layout(layers=len(group.layer_names), kv_heads=spec.num_kv_heads,
                        head_dim=spec.head_size, dtype=dtype, block_tokens=block_tokens,
                        kind=kind)
        # The bytes of a block are copied as vLLM's backend lays them out inside
        # a block; on the CPU that layout depends on the attention ISA (AMX packs).
        if kind == "latent":
            fmt = "mla"  # [block][token][latent] on every backend
        elif current_platform.is_cpu():
            try:
                from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

                fmt = "cpu-" + _get_attn_isa(spec.dtype, spec.block_size, spec.head_size,
                                             cache_dtype)
            except Exception:  # an older or newer vLLM: keep the blocks apart
                fmt = "cpu"
        else:
            fmt = "kv"  # GPU caches are read as [block][k|v][token][head][dim]
        model = settings.model_id or vllm_config.model_config.model
        parallel = vllm_config.parallel_config
        model_id = f"{model}|vllm-{fmt}"
        if dtype.startswith("fp8"):  # a 16-bit and an fp8 worker of a model never mix
            model_id += f"|{dtype}"
        if len(groups) > 1:  # blocks of two groups never share a namespace, or a key
            model_id += f"|group{index}-" + (f"window{window}" if window else "full")
        if parallel.tensor_parallel_size > 1:
            model_id += f"|tp{tp_rank}of{parallel.tensor_parallel_size}"
        if parallel.pipeline_parallel_size > 1:
            model_id += f"|pp{pp_rank}of{parallel.pipeline_parallel_size}"
        layout.validate()
        out.append(_GroupSpec(index, window, model_id, layout, list(group.layer_names)))
    return out, block_size


class _Connection:
    """One kvtier Client, made again after kvtierd went away (one log line each way)."""

    def __init__(self, model_id: str, layout: Any, settings: Settings, name: str,
                 map_arenas: bool) -> None:
        self.model_id, self.layout, self.settings = model_id, layout, settings
        self.name, self.map_arenas = name, map_arenas
        self._client: Optional[Client] = None
        self._next_try = 0.0
        self._lost = False
        self._lock = threading.Lock()
        self.where = settings.socket or "auto"

    def get(self) -> Optional[Client]:
        """The attached client, or None while kvtierd is unreachable."""
        with self._lock:
            if self._client is not None and self._client.healthy:
                return self._client
            if self._client is not None:
                self._lose_locked("the session broke")
            now = time.monotonic()
            if now < self._next_try:
                return None
            try:
                socket = self.settings.resolve_socket()
                self._client = Client(self.model_id, self.layout, socket=socket,
                                      salt=self.settings.salt, client_name=self.name,
                                      timeout_ms=self.settings.timeout_ms,
                                      map_arenas=self.map_arenas,
                                      quantize_lower=self.settings.quantize_lower)
            except LayoutError as e:
                logger.error("kvtier: kvtierd refuses this worker's layout (%s); the connector "
                             "stays off for 10 minutes", e)
                self._next_try = now + 600
                return None
            except Error as e:
                self._next_try = now + self.settings.retry_interval_s
                if not self._lost:
                    logger.warning("kvtier: kvtierd unreachable at %s (%s); requests recompute "
                                   "their prefixes until it is back", self.where, e)
                    self._lost = True
                return None
            self.where = self._client.socket
            if self._lost:
                logger.warning("kvtier: reattached to kvtierd at %s; prefix hits resume",
                               self.where)
            else:
                logger.info("kvtier: attached to kvtierd at %s as %r (%s)", self.where,
                            self.model_id, self.layout)
            self._lost = False
            return self._client

    def failed(self, what: str, e: BaseException) -> None:
        """A call failed: drop the client when the session is gone, else log."""
        with self._lock:
            if isinstance(e, UnavailableError) or (self._client is not None
                                                   and not self._client.healthy):
                self._lose_locked(f"{what}: {e}")
            else:
                logger.warning("kvtier: %s failed: %s", what, e)

    def _lose_locked(self, why: str) -> None:
        if not self._lost:
            logger.warning("kvtier: lost kvtierd at %s (%s); requests recompute their "
                           "prefixes until it is back", self.where, why)
        self._lost = True
        if self._client is not None:
            try:
                self._client.close()
            except Error:
                pass
        self._client = None
        self._next_try = time.monotonic() + self.settings.retry_interval_s

    def retry_now(self) -> None:
        """Lets the next get() try kvtierd at once."""
        with self._lock:
            self._next_try = 0.0

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class KvtierConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM's KV connector (V1) to kvtierd. See the module's documentation."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig") -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.settings = Settings.from_extra_config(
            dict(self._kv_transfer_config.kv_connector_extra_config or {}))
        # A kvtier block that cannot be loaded is recomputed, never a failed request.
        if self._kv_transfer_config.kv_load_failure_policy != "recompute":
            self._kv_transfer_config.kv_load_failure_policy = "recompute"
        # kv_both: loads and stores. Prefill/decode disaggregation: a kv_producer (the
        # prefill instance) stores every prompt at the end of its prefill and never
        # loads; a kv_consumer (the decode instance) loads and never stores.
        kv_role = self._kv_transfer_config.kv_role or "kv_both"
        self.loads = kv_role != "kv_producer"
        self.stores = kv_role != "kv_consumer"
        parallel = vllm_config.parallel_config
        if parallel.pipeline_parallel_size > 1:
            raise ValueError("kvtier.vllm does not serve pipeline parallelism "
                             f"(pipeline_parallel_size {parallel.pipeline_parallel_size}): its "
                             "scheduler cannot check each stage's blocks before it offers a hit")
        tp_rank = pp_rank = 0
        if role == KVConnectorRole.WORKER:
            from vllm.distributed.parallel_state import get_pp_group, get_tp_group

            tp_rank, pp_rank = get_tp_group().rank_in_group, get_pp_group().rank_in_group
        self.groups, self.vllm_block = _namespace(vllm_config, kv_cache_config, self.settings,
                                                  tp_rank, pp_rank)
        self.block_tokens = self.groups[0].layout.block_tokens
        self.ratio = self.block_tokens // self.vllm_block  # vLLM blocks per kvtier block
        is_worker = role == KVConnectorRole.WORKER
        who = "vllm-worker" if is_worker else "vllm-scheduler"
        # One session per group (a session is one namespace). The loader and saver
        # threads talk to kvtierd on sessions of their own: a client serves one call
        # at a time, and an acquire waiting for the SSD must not hold up the
        # forward's loads or the stores.
        self.conns = [_Connection(g.model_id, g.layout, self.settings, who, map_arenas=is_worker)
                      for g in self.groups]
        self.load_conns = self.save_conns = self.conns
        if is_worker:
            self.load_conns = [_Connection(g.model_id, g.layout, self.settings,
                                           "vllm-worker-load", map_arenas=True)
                               for g in self.groups]
            self.save_conns = [_Connection(g.model_id, g.layout, self.settings,
                                           "vllm-worker-save", map_arenas=True)
                               for g in self.groups]
        self.conn = self.conns[0]
        self.model_id, self.layout = self.groups[0].model_id, self.groups[0].layout
        # What a hit needs: with tensor parallelism every rank's shard, so the scheduler
        # looks up (and hints) the namespaces of every rank; a worker only its own.
        self.shards: list[tuple[list[_GroupSpec], list[_Connection]]] = [(self.groups, self.conns)]
        if not is_worker:
            for rank in range(1, parallel.tensor_parallel_size):
                groups, _ = _namespace(vllm_config, kv_cache_config, self.settings, rank, 0)
                self.shards.append((groups, [_Connection(g.model_id, g.layout, self.settings,
                                                         who, map_arenas=False)
                                             for g in groups]))
        # Scheduler state.
        self._requests: dict[str, "Request"] = {}  # accepted and not finished
        self._hits: dict[str, int] = {}  # request -> kvtier blocks cached at lookup
        self._tiers: dict[str, list[Tier]] = {}  # request -> the tier of each hit
        self._async: dict[str, bool] = {}  # request -> its load goes off the forward
        self._wait: dict[str, bool] = {}  # request -> its load waits for a producer's blocks
        self._local: dict[str, int] = {}  # request -> tokens of vLLM's own hit at lookup
        self._prompt_stored: dict[str, int] = {}  # request -> its prompt's blocks, at prefill end
        self._prompt_issued: set[str] = set()  # requests with a store of the prompt issued
        self._loading: set[str] = set()  # asynchronous loads not yet reported done
        self._async_tried: set[str] = set()  # had one: a second lookup means it failed
        self._loads: dict[str, _Load] = {}
        self._saves: list[_Save] = []
        # Worker state.
        # Per group, per layer: [blocks, 2, ratio', tokens', H, D].
        self._layers: list[list[torch.Tensor]] = [[] for _ in self.groups]
        self._layer_index: dict[str, tuple[int, int]] = {}  # name -> (group, layer in it)
        self._layerwise = True  # copy each layer when its attention asks (wait_for_layer_load)
        self._staged: list[_Staged] = []  # this step's loads before the forward, staged
        self._copied: set[tuple[int, int]] = set()  # (group, layer) of this step copied already
        self._load_errors: set[int] = set()
        self._loader: Optional[ThreadPoolExecutor] = None  # asynchronous loads
        self._waiter: Optional[ThreadPoolExecutor] = None  # those waiting for a producer
        self._loaded: set[str] = set()  # asynchronous loads done, for get_finished
        self._saver: Optional[ThreadPoolExecutor] = None
        self._saved: set[str] = set()
        self._in_flight: dict[str, list[Future]] = {}  # request -> its stores under way
        self._lock = threading.Lock()  # the sets the threads fill
        self.counters = {"lookups": 0, "hit_tokens": 0, "hinted_requests": 0,
                         "async_loads": 0, "loaded_blocks": 0, "load_failed_blocks": 0,
                         "saved_blocks": 0, "prompt_stores": 0, "save_failures": 0}
        self._counters_lock = threading.Lock()  # counted from vLLM's and our own threads
        if not is_worker:
            # Attach (with socket "auto", find or start the node's kvtierd) as the
            # engine starts, not at its first request: the log says where kvtierd
            # is, or that it is not, before the server takes traffic.
            for _, conns in self.shards:
                for conn in conns:
                    conn.get()

    def _count(self, name: str, n: int = 1) -> None:
        with self._counters_lock:
            self.counters[name] += int(n)

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a save that does not happen is a later miss

    # ---------------------------------------------------------------- scheduler

    def _usable(self, request: "Request") -> list[int]:
        """The prompt's tokens in whole kvtier blocks, leaving at least one to compute."""
        prompt = request.prompt_token_ids or []
        return list(prompt[:(len(prompt) - 1) // self.block_tokens * self.block_tokens])

    def on_new_request(self, request: "Request") -> None:
        """vLLM accepted the request: hint its prompt, so that what kvtierd has of it on
        the SSD or in the remote tier comes up to memory while it waits to be scheduled."""
        self._requests[request.request_id] = request
        if not self.settings.hints or not self.loads:
            return
        tokens = self._usable(request)
        if not tokens:
            return
        n = len(tokens) // self.block_tokens
        hinted = [self._call("hint", lambda c, g=g: c.hint(
            c.block_keys(tokens)[g.first_block(n * self.block_tokens, self.block_tokens):]),
            conns[g.index]) for groups, conns in self.shards for g in groups]
        if all(h is not None for h in hinted):
            self._count("hinted_requests", 1)

    def _lookup(self, tokens: list[int], local_blocks: int) -> Optional[tuple[int, list[Tier]]]:
        """(kvtier blocks usable as a hit, the tier of each) for a prompt's tokens, or
        None when kvtierd cannot be reached.

        A hit of n blocks needs, in every full-attention group of every tensor-parallel
        rank, the n blocks, and in every sliding-window group the blocks of its window
        before block n: those are the only ones a window group stores, so the hit is
        the longest n for which every group of every rank has what it needs.
        """
        T = self.block_tokens
        n = len(tokens) // T
        tiers: list[Tier] = []
        windows: list[tuple[_GroupSpec, _Connection, Keys]] = []
        for groups, conns in self.shards:
            for g in groups:
                conn = conns[g.index]
                chain = self._call("lookup", lambda c: c.block_keys(tokens), conn)
                if chain is None:
                    return None
                if g.window:
                    windows.append((g, conn, chain))
                    continue
                found = self._call("lookup", lambda c, k=chain: c.lookup(k), conn)
                if found is None:
                    return None
                n = min(n, found.hits)
                if not tiers or len(found.tiers) < len(tiers):
                    tiers = list(found.tiers)
        while windows and n > local_blocks:
            ok = True
            for g, conn, chain in windows:
                first = g.first_block(n * T, T)
                found = self._call("lookup", lambda c, k=chain[first:n]: c.lookup(k), conn)
                if found is None:
                    return None
                if found.hits < n - first:
                    ok = False
                    break
                if len(tiers) < n:  # no full-attention group: the window's tiers
                    tiers = [Tier.HOST] * first + list(found.tiers)
            if ok:
                break
            n -= 1
        return n, tiers[:n]

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        usable = self._usable(request)
        if (not self.loads or len(usable) <= num_computed_tokens
                or request.request_id in self._async_tried):
            # (A request asked again after an asynchronous load had its load fail, or
            # was preempted: it recomputes rather than try the same blocks again.)
            self._hits.pop(request.request_id, None)
            return 0, False
        found = self._lookup(usable, num_computed_tokens // self.block_tokens)
        if found is None:
            return 0, False
        self._count("lookups", 1)
        hits, tiers = found
        # A kv_consumer's request from the proxy names the blocks its producer stored
        # (kv_transfer_params): those still on their way are waited for, off the
        # forward, rather than recomputed.
        params = request.kv_transfer_params or {}
        produced = min(int(params.get("kvtier_prompt_blocks", 0) or 0),
                       len(usable) // self.block_tokens)
        wait = not self.stores and produced > hits
        if wait:
            # The blocks still to come are a peer instance's (vLLM's "p2p" source).
            tiers = list(tiers[:hits]) + [Tier.REMOTE] * (produced - hits)
            hits = produced
        self._wait[request.request_id] = wait
        self._hits[request.request_id] = hits
        self._tiers[request.request_id] = tiers
        # update_state_after_alloc comes before vLLM sets request.num_computed_tokens.
        self._local[request.request_id] = num_computed_tokens
        new = max(0, hits * self.block_tokens - num_computed_tokens)
        first = num_computed_tokens // self.block_tokens
        slow = any(t in (Tier.SSD, Tier.REMOTE) for t in tiers[first:hits])
        mode = self.settings.load_async
        asynchronous = new > 0 and (mode == "always" or (mode == "auto" and slow) or wait)
        self._async[request.request_id] = asynchronous
        return new, asynchronous

    def get_external_cache_hit_sources(self, request: "Request",
                                       num_external_tokens: int) -> dict[Any, int]:
        """The tokens kvtier supplied, by the tier they were in at lookup."""
        from vllm.v1.metrics.cache_hit_source import CacheHitSource

        if num_external_tokens <= 0:
            return {}
        names = {Tier.HOST: CacheHitSource.HOST, Tier.SSD: CacheHitSource.DISK,
                 Tier.REMOTE: CacheHitSource.P2P, Tier.DEVICE: CacheHitSource.DEVICE}
        tiers = self._tiers.get(request.request_id, [])
        load = self._loads.get(request.request_id)
        begin = load.first_token if load is not None else 0
        end = begin + num_external_tokens
        T = self.block_tokens
        out: dict[Any, int] = {}
        for b in range(begin // T, min(len(tiers), -(-end // T))):
            n = min(end, (b + 1) * T) - max(begin, b * T)
            if n > 0:
                src = names.get(tiers[b], CacheHitSource.EXTERNAL_UNSPECIFIED)
                out[src] = out.get(src, 0) + n
        if sum(out.values()) != num_external_tokens:
            return {CacheHitSource.EXTERNAL_UNSPECIFIED: num_external_tokens}
        return out

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int) -> None:
        computed = self._local.pop(request.request_id, 0)
        asynchronous = self._async.pop(request.request_id, False)
        wait = self._wait.pop(request.request_id, False)
        if num_external_tokens <= 0:
            return
        end = computed + num_external_tokens
        self._count("hit_tokens", num_external_tokens)
        self._count("async_loads", asynchronous)
        if asynchronous:
            self._loading.add(request.request_id)
            self._async_tried.add(request.request_id)
        self._loads[request.request_id] = _Load(
            req_id=request.request_id, token_ids=list((request.prompt_token_ids or [])[:end]),
            first_token=computed, block_ids=[list(b) for b in blocks.get_block_ids()],
            asynchronous=asynchronous, wait_s=self.settings.producer_wait_s if wait else 0.0)

    def update_connector_output(self, connector_output: Any) -> None:
        for req_id in getattr(connector_output, "finished_recving", None) or ():
            self._loading.discard(req_id)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        for req_id in scheduler_output.preempted_req_ids or ():
            # Its stores finished before its blocks moved on (handle_preemptions); when
            # it runs again its prompt is stored again at the end of that prefill.
            self._prompt_issued.discard(req_id)
            self._prompt_stored.pop(req_id, None)
        if self.stores and (self.settings.store_prompt or not self.loads):
            self._store_prompts(scheduler_output)
        meta = KvtierConnectorMetadata(
            loads=list(self._loads.values()), saves=self._saves,
            preempted=sorted(scheduler_output.preempted_req_ids or ()))
        self._loads = {}
        self._saves = []
        return meta

    def _store_prompts(self, out: "SchedulerOutput") -> None:
        """Requests whose prefill ends in this step: their prompt's full blocks are stored
        once the step's forward wrote them (its wait_for_save)."""
        state = getattr(out, "kv_connector_block_state", None)
        computed = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        computed.update(zip(cached.req_ids, cached.num_computed_tokens))
        for req_id, n in out.num_scheduled_tokens.items():
            request = self._requests.get(req_id)
            if request is None or req_id in self._prompt_stored or req_id not in computed:
                continue
            prompt = request.prompt_token_ids or []
            if computed[req_id] + n < len(prompt):
                continue  # a chunk of the prefill; the rest comes later
            full = len(prompt) // self.block_tokens
            self._prompt_stored[req_id] = full
            if full <= self._hits.get(req_id, 0) or self.conn.get() is None:
                continue  # kvtierd has them already (or cannot be reached)
            ids = state.get_block_ids(req_id) if state is not None else None
            if not ids:
                continue
            self._saves.append(_Save(req_id=req_id, token_ids=list(prompt[:full * self.block_tokens]),
                                     block_ids=[list(b[:full * self.ratio]) for b in ids],
                                     final=False))
            self._prompt_issued.add(req_id)
            self._count("prompt_stores", 1)

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(
            self, request: "Request",
            block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
        req_id = request.request_id
        hits = self._hits.pop(req_id, 0)
        stored = self._prompt_stored.pop(req_id, 0)
        for d in (self._requests, self._tiers, self._async, self._wait, self._local,
                  self._loads):
            d.pop(req_id, None)
        self._async_tried.discard(req_id)
        if req_id in self._loading:
            # Aborted while its asynchronous load runs: vLLM holds the blocks until
            # the load is reported; a store now would be a second release of them.
            self._loading.discard(req_id)
            self._prompt_issued.discard(req_id)
            return False, None
        # Tokens whose K and V are in vLLM's blocks: all but the last sampled one. (A
        # sliding-window group's list runs as long, its blocks out of the window null.)
        computed = min(request.num_computed_tokens, len(block_ids[0]) * self.vllm_block)
        full = computed // self.block_tokens
        # A store of the prompt may still be reading the blocks: a final store, queued
        # behind it on the worker, says when they may be freed.
        issued = req_id in self._prompt_issued
        self._prompt_issued.discard(req_id)
        # A kv_producer tells the proxy (the response's kv_transfer_params) how many of
        # the prompt's blocks it stored, for the consumer to wait for.
        params = {"kvtier_prompt_blocks": stored} if issued and not self.loads else None
        if not self.stores or (not issued and (full <= max(hits, stored)
                                               or self.conn.get() is None)):
            return False, params
        tokens = list(request.all_token_ids[:full * self.block_tokens])
        self._saves.append(_Save(req_id=req_id, token_ids=tokens,
                                 block_ids=[list(b[:full * self.ratio]) for b in block_ids]))
        return True, params  # vLLM frees the blocks once get_finished() reports the save

    # ---------------------------------------------------------------- worker

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        from vllm.model_executor.models.utils import extract_layer_index

        for g in self.groups:
            names = sorted(g.layer_names, key=extract_layer_index)
            missing = [n for n in names if n not in kv_caches]
            if missing:
                raise ValueError(f"kvtier.vllm: no KV cache tensor for layers {missing}")
            self._layers[g.index] = [self._paged_view(kv_caches[n], n, g) for n in names]
            self._layer_index.update({n: (g.index, i) for i, n in enumerate(names)})
        self._saver = ThreadPoolExecutor(1, thread_name_prefix="kvtier-save")
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="kvtier-load")
        # A kv_consumer's loads that wait for a producer's blocks, off the loader
        # thread: a slow producer holds up no other load (the client serializes calls).
        self._waiter = ThreadPoolExecutor(4, thread_name_prefix="kvtier-wait")

    def _paged_view(self, t: torch.Tensor, name: str, g: _GroupSpec) -> torch.Tensor:
        """One layer's paged cache as [blocks, planes, r, n, kv_heads, head_dim]: planes
        K and V (2) or MLA's latent (1); a vLLM block of ``vllm_block`` tokens is r
        kernel blocks of n tokens.
        """
        heads, dim, bs = g.layout.kv_heads, g.layout.head_dim, self.vllm_block
        if g.layout.kind == "latent":
            if t.dim() == 4 and t.shape[1] == 1:
                t = t.squeeze(1)  # the CPU's AMX MLA: [kernel blocks, 1, n, latent]
            if t.dim() == 3 and t.shape[2] == dim and bs % t.shape[1] == 0:
                # MLA: [kernel blocks, n, latent], a token's latent vector after another.
                r = bs // t.shape[1]
                return t.unflatten(0, (-1, r)).unsqueeze(1).unsqueeze(-2)
        elif t.dim() == 4 and t.shape[1] == heads and t.shape[3] == 2 * dim:
            # CPU_ATTN: [kernel blocks, H, n, 2*D], each head's n rows of K then n of V.
            n = t.shape[2]
            if t.is_contiguous() and bs % n == 0:
                r = bs // n
                return t.view(-1, r, heads, 2, n, dim).permute(0, 3, 1, 4, 2, 5)
        elif t.dim() == 5 and t.shape[0] == 2 and t.shape[3:] == (heads, dim):
            # FlashAttention and friends: [2, kernel blocks, n, H, D] (any strides).
            n = t.shape[2]
            if bs % n == 0:
                r = bs // n
                return t.unflatten(1, (-1, r)).permute(1, 0, 2, 3, 4, 5)
        raise ValueError(f"kvtier.vllm: layer {name}: a {g.layout.kind} KV cache of shape "
                         f"{tuple(t.shape)} is not a layout this connector reads (kv_heads "
                         f"{heads}, head size {dim}, block size {bs})")

    def _scales(self, g: _GroupSpec) -> Optional[torch.Tensor]:
        """An fp8 group's scale table as kvtier's fp8 blocks hold it, [layer][plane][kv_head]
        fp32, from vLLM's per-layer K and V scales (one per tensor, every head alike);
        None for a 16-bit group."""
        if not g.layout.scale_bytes:
            return None
        from vllm.model_executor.models.utils import extract_layer_index

        context = self._vllm_config.compilation_config.static_forward_context
        table = torch.empty((g.layout.layers, g.layout.planes, g.layout.kv_heads),
                            dtype=torch.float32)
        for i, name in enumerate(sorted(g.layer_names, key=extract_layer_index)):
            layer = context[name]
            for p, which in enumerate(("k", "v")[:g.layout.planes]):
                value = getattr(layer, f"_{which}_scale_float", None)
                if value is None:
                    value = float(getattr(layer, f"_{which}_scale"))
                table[i, p] = float(value)
        return table

    def _all_layers(self) -> set[tuple[int, int]]:
        return {(g, i) for g, layers in enumerate(self._layers) for i in range(len(layers))}

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        """Acquires the step's blocks and stages their bytes; the layers follow.

        Each layer is copied into vLLM's blocks when its attention asks for it
        (wait_for_layer_load), so on a GPU the copies of later layers overlap
        the compute of earlier ones. An engine that never asks (a backend
        without the hook) has its blocks reported as failed at the end of the
        step, so they are recomputed, never read half-copied; from then on
        every layer is copied here, before the forward.
        """
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvtierConnectorMetadata)
        for load in meta.loads:
            if load.asynchronous:
                pool = self._waiter if load.wait_s else self._loader
                assert pool is not None
                pool.submit(self._load_async, load)
        self._staged = [staged for load in meta.loads if not load.asynchronous
                        for staged in self._load(load)]
        self._copied = set()
        if not self._layerwise:
            for g, i in sorted(self._all_layers()):
                self._copy_layer(g, i)

    def _load_async(self, load: _Load) -> None:
        """On the loader thread, while vLLM runs other requests: the request's blocks
        come from kvtierd (which reads them up from the SSD or the remote tier) into
        its vLLM blocks, every layer; then get_finished reports it loaded."""
        try:
            for staged in self._load(load, self.load_conns):
                for layer, dst in enumerate(self._layers[staged.group]):
                    self._copy_staged(staged, layer, dst)
        except Exception:  # never leave the request waiting: what failed is recomputed
            logger.exception("kvtier: asynchronous load of request %s failed", load.req_id)
            with self._lock:
                for ids in load.block_ids:
                    self._load_errors.update(b for b in ids[load.first_token // self.vllm_block:
                                                            len(load.token_ids) // self.vllm_block]
                                             if b)
        finally:
            with self._lock:
                self._loaded.add(load.req_id)

    def _load(self, load: _Load, conns: Optional[list[_Connection]] = None) -> list[_Staged]:
        """Acquires a request's kvtier blocks, group by group, and stages their bytes
        (one copy out of the arena each).

        A full-attention group loads the blocks from vLLM's own hit to the end of the
        hit, a sliding-window group those of its window before the end. When a group
        comes back short, the blocks from the first one missing are recomputed (with
        a window group, all of the hit: its window is what vLLM needs first).
        """
        T, r, bs = self.block_tokens, self.ratio, self.vllm_block
        conns = conns or self.conns
        first_kb = load.first_token // T
        last_kb = len(load.token_ids) // T  # exclusive
        got_kb = last_kb  # kvtier blocks every group has loaded up to
        staged: list[tuple[_GroupSpec, int, Optional[torch.Tensor]]] = []
        for g in self.groups:
            begin = max(first_kb, g.first_block(last_kb * T, T))
            device = self._layers[g.index][0].device

            def stage(client: Client, g: _GroupSpec = g, begin: int = begin,
                      device: Any = device) -> Optional[torch.Tensor]:
                keys = client.block_keys(load.token_ids)[begin:last_kb]
                if load.wait_s:  # a producer's store still on its way
                    deadline, pause, have = time.monotonic() + load.wait_s, 0.002, 0
                    while time.monotonic() < deadline:
                        # Only the blocks still missing (each a miss in kvtierd's counts),
                        # less and less often.
                        have += client.lookup(keys[have:]).hits
                        if have >= len(keys):
                            break
                        time.sleep(pause)
                        pause = min(2 * pause, 0.05)
                with client.acquire(keys, tier=self.settings.tier) as lease:
                    n = len(lease)
                    if not n:
                        return None
                    raw = torch.stack([torch.from_dlpack(lease[i]) for i in range(n)])
                src = self._checked_scales(g, raw, load.req_id)
                if src is None:
                    return None
                L, P, _, H, D = g.layout.block_shape
                dtype = self._layers[g.index][0].dtype
                return src.view(dtype).view(-1, L, P, r, bs, H, D).to(device, non_blocking=True)

            src = self._call("load", stage, conns[g.index])
            n = 0 if src is None else src.shape[0]
            if begin + n < last_kb:
                got_kb = min(got_kb, begin + n)
            staged.append((g, begin, src))
        if got_kb < last_kb and any(g.window for g in self.groups):
            got_kb = first_kb  # a window before got_kb was not loaded: recompute the hit
        out: list[_Staged] = []
        loaded = failed = wanted = 0
        for g, begin, src in staged:
            ids_all = load.block_ids[g.index]
            # vLLM blocks to fill: those of the kvtier blocks, less the computed ones.
            want = list(range(max(load.first_token // bs, begin * r), last_kb * r))
            got = [v for v in want if v < got_kb * r]
            bad = [ids_all[v] for v in want[len(got):] if ids_all[v]]
            wanted += len(want)
            loaded += len(got)
            failed += len(bad)
            if bad:
                with self._lock:
                    self._load_errors.update(bad)
            if src is None or not got:
                continue
            skip = got[0] - begin * r  # leading vLLM blocks vLLM had already
            ids = [ids_all[v] for v in got]
            out.append(_Staged(group=g.index, src=src, skip=skip, block_ids=ids,
                               ids=torch.tensor(ids, device=src.device)))
        self._count("loaded_blocks", loaded)
        if failed:
            self._count("load_failed_blocks", failed)
            logger.warning("kvtier: request %s: %d of %d blocks not loaded from kvtierd; vLLM "
                           "recomputes them", load.req_id, failed, wanted)
        return out

    def _checked_scales(self, g: _GroupSpec, src: torch.Tensor,
                        req_id: str) -> Optional[torch.Tensor]:
        """Staged blocks (uint8 [n, block_bytes]) less their fp8 scale tables, cut before the
        first block whose scales are not this worker's (a worker calibrated otherwise
        wrote it: read with other scales its values would be wrong, so it is recomputed);
        the blocks as they are for a 16-bit group. None when none is left."""
        scales = self._scales(g)
        if scales is None:
            return src
        values = g.layout.block_bytes - g.layout.scale_bytes
        stored = src[:, values:].contiguous().view(torch.float32).view(src.shape[0], -1)
        same = (stored == scales.reshape(1, -1).to(stored.device)).all(dim=1)
        n = int(same.long().cumprod(0).sum())
        if n < src.shape[0]:
            logger.warning("kvtier: request %s: %d blocks stored with fp8 scales other than "
                           "this worker's; vLLM recomputes them", req_id, src.shape[0] - n)
        return src[:n, :values] if n else None

    def _copy_layer(self, group: int, layer: int) -> None:
        """Copies one layer of every staged block into vLLM's blocks: one index_put each."""
        if (group, layer) in self._copied:
            return
        self._copied.add((group, layer))
        dst = self._layers[group][layer]
        for st in self._staged:
            if st.group == group:
                self._copy_staged(st, layer, dst)

    def _copy_staged(self, st: _Staged, layer: int, dst: torch.Tensor) -> None:
        r, bs = self.ratio, self.vllm_block
        _, P, _, H, D = self.groups[st.group].layout.block_shape
        n = st.src.shape[0]
        # [n, P, r, bs, H, D] -> [n * r, P, bs, H, D] -> dst's [blocks, P, r', n', H, D]
        part = st.src[:, layer].transpose(1, 2).reshape(n * r, P, bs, H, D)
        part = part[st.skip:st.skip + len(st.block_ids)]
        dst[st.ids] = part.unflatten(2, dst.shape[2:4])

    def _call(self, what: str, fn: Any, conn: Optional[_Connection] = None) -> Any:
        """fn(client), or None when kvtierd cannot be reached or the call fails.

        A session that broke since its last call (kvtierd restarted) is made
        again once, at once, so the first call after a restart is not lost.
        """
        conn = conn or self.conn
        for attempt in (0, 1):
            client = conn.get()
            if client is None:
                return None
            try:
                return fn(client)
            except UnavailableError as e:
                conn.failed(what, e)
                if attempt == 0:
                    conn.retry_now()
            except Error as e:
                conn.failed(what, e)
                return None
        return None

    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._staged:
            where = self._layer_index.get(layer_name)
            if where is not None:
                self._copy_layer(*where)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        return  # a finished request's blocks are saved whole, off the forward

    def wait_for_save(self) -> None:
        if self._staged and self._copied != self._all_layers():
            # The forward ran without asking for some layers: what it read there
            # was not kvtier's. Report the blocks, so that vLLM recomputes them.
            by_name = {where: name for name, where in self._layer_index.items()}
            missed = sorted(by_name[w] for w in self._all_layers() - self._copied)
            logger.warning("kvtier: vLLM ran layers %s without waiting for their load; the "
                           "loaded blocks are recomputed, and from now on every layer is "
                           "loaded before the forward", missed)
            with self._lock:
                for st in self._staged:
                    self._load_errors.update(st.block_ids)
            self._layerwise = False
        self._staged = []
        meta = self._get_connector_metadata()
        assert isinstance(meta, KvtierConnectorMetadata)
        with self._lock:
            failed = set(self._load_errors)  # this step's: vLLM reads them after this
        for save in meta.saves:
            assert self._saver is not None
            bad = [i for ids in save.block_ids for i, b in enumerate(ids) if b and b in failed]
            if bad:
                # A block whose load failed this step holds no valid K and V, and every
                # block after it was computed over it: store only what comes before
                # (vLLM recomputes the rest; the final store brings it in).
                keep = min(bad) // self.ratio
                save = _Save(req_id=save.req_id, token_ids=save.token_ids[:keep * self.block_tokens],
                             block_ids=[ids[:keep * self.ratio] for ids in save.block_ids],
                             final=save.final)
            with self._lock:  # registered before the saver can report it
                future = self._saver.submit(self._save, save)
                self._in_flight.setdefault(save.req_id, []).append(future)
                if save.final:  # nothing of the request is read after its final store
                    self._in_flight[save.req_id] = [future]

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        """A preempted request's blocks go to other requests in this step's forward: a
        store still reading them finishes first."""
        assert isinstance(kv_connector_metadata, KvtierConnectorMetadata)
        for req_id in kv_connector_metadata.preempted:
            with self._lock:
                futures = self._in_flight.pop(req_id, [])
            for f in futures:
                f.result()

    def _save(self, save: _Save) -> None:
        """Off the forward's thread: allocate slots, copy the blocks in, commit; a
        full-attention group stores the whole chain, a sliding-window group the blocks
        of its window before the end (with no parent: the chain's blocks before them
        are not its to store)."""
        T = self.block_tokens

        def store(client: Client, g: _GroupSpec) -> int:
            # The whole chain: blocks cached already come back EXISTS, copied by no one.
            chain = client.block_keys(save.token_ids)
            if not chain:
                return 0
            first = g.first_block(len(chain) * T, T)
            keys = chain[first:]
            ids = save.block_ids[g.index][first * self.ratio:len(chain) * self.ratio]
            if 0 in ids:  # vLLM freed part of the window already (a long output)
                return 0
            with client.allocate(keys, tier=self.settings.tier) as write:
                to_fill = write.allocated
                if to_fill:
                    self._copy_out(write, to_fill, ids, g)
                write.commit()
            if self.settings.retention_priority is not None:
                client.set_retention(keys, [Retention(
                    0, len(keys) * T, self.settings.retention_priority,
                    self.settings.retention_duration_ms)])
            return len(to_fill)

        try:
            results = [self._call(f"store of request {save.req_id}",
                                  lambda c, g=g: store(c, g), self.save_conns[g.index])
                       for g in self.groups]
            if any(r is None for r in results):
                self._count("save_failures", 1)
            self._count("saved_blocks", sum(r for r in results if r))
        except Exception:  # never leave vLLM waiting for blocks to be freed
            self._count("save_failures", 1)
            logger.exception("kvtier: store of request %s failed", save.req_id)
        finally:
            with self._lock:
                if save.final:
                    self._saved.add(save.req_id)
                    self._in_flight.pop(save.req_id, None)
                else:
                    self._count("prompt_stores", 1)

    def _copy_out(self, write: Any, to_fill: list[int], block_ids: list[int],
                  g: _GroupSpec) -> None:
        """Gathers the blocks of the slots to fill, one index per layer, then one copy per slot."""
        r, bs = self.ratio, self.vllm_block
        L, P, T, H, D = g.layout.block_shape
        layers = self._layers[g.index]
        n = len(to_fill)
        ids = torch.tensor([block_ids[i * r + j] for i in to_fill for j in range(r)],
                           device=layers[0].device)
        staged = torch.empty((n, L, P, r, bs, H, D), dtype=layers[0].dtype,
                             device=layers[0].device)
        for layer, src in enumerate(layers):
            part = src[ids]  # [n * r, P, r', n', H, D]
            staged[:, layer] = part.reshape(n, r, P, bs, H, D).transpose(1, 2)
        staged = staged.cpu() if self.settings.tier == Tier.HOST else staged
        # An fp8 block is vLLM's bytes as they are, then vLLM's scales (kvtier's fp8
        # block format: no dequantize, no requantize).
        scales = self._scales(g)
        values = g.layout.block_bytes - g.layout.scale_bytes
        for k, i in enumerate(to_fill):
            slot = torch.from_dlpack(write[i])
            if scales is None:
                slot.view(staged.dtype).copy_(staged[k].reshape(-1))
            else:
                slot[:values].view(staged.dtype).copy_(staged[k].reshape(-1))
                slot[values:].view(torch.float32).copy_(scales.reshape(-1).to(slot.device))
            del slot

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        with self._lock:
            done, self._saved = self._saved, set()
            loaded, self._loaded = self._loaded, set()
        return (done or None), (loaded or None)

    def get_block_ids_with_load_errors(self) -> set[int]:
        with self._lock:
            errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self) -> None:
        for pool in (self._waiter, self._loader):
            if pool is not None:
                pool.shutdown(wait=True)
        if self._saver is not None:
            self._saver.shutdown(wait=True)
        c = self.counters
        if self._role == KVConnectorRole.SCHEDULER:
            logger.info("kvtier: %d lookups, %d prompt tokens found in kvtierd (%d requests "
                        "loaded asynchronously), %d requests hinted", c["lookups"],
                        c["hit_tokens"], c["async_loads"], c["hinted_requests"])
        else:
            logger.info("kvtier: %d blocks loaded (%d failed, recomputed), %d stored (%d "
                        "stores failed, %d prompts stored at the end of their prefill)",
                        c["loaded_blocks"], c["load_failed_blocks"], c["saved_blocks"],
                        c["save_failures"], c["prompt_stores"])
        conns = self.conns + self.load_conns + self.save_conns
        for conn in {id(c): c for c in conns}.values():
            conn.close()

"""LMCache's own storage manager (the one ``lmcache server`` runs) with an L2
adapter, driven on the CPU as the server drives it, for test_lmcache.py and
bench/python/bench_lmcache.py.

    with Server(l2_adapter_json) as s:
        keys = s.keys(b"prompt", 4)
        want = s.store(keys)                 # into L1, pushed to L2 by its store controller
        s.wait_stored(keys, probe)           # (probe: the L2's own check that it has them)
        s.drop_l1(keys)
        hits, got = s.prefetch(keys)         # from L2 back into L1: hits, and the tensors

One Server a process at a time: LMCache names its L1's shared memory by the
process id. The chunk layout is LMCache's MemoryLayoutDesc (2 x 4 x 256 x 64 fp16 by default:
256 KiB a chunk).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")

import torch  # noqa: E402
from lmcache.v1.distributed.api import (  # noqa: E402
    GroupedObjectKeys,
    MemoryLayoutDesc,
    ObjectKey,
    PrefetchTaskSpec,
)
from lmcache.v1.distributed.config import (  # noqa: E402
    add_storage_manager_args,
    parse_args_to_config,
)
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (  # noqa: E402
    _object_key_to_string,
)
from lmcache.v1.distributed.storage_manager import StorageManager  # noqa: E402

SHAPE = [2, 4, 256, 64]


def values(key: ObjectKey, shape: Any) -> torch.Tensor:
    """A chunk's values, made from its key (the same in every process)."""
    g = torch.Generator().manual_seed(int.from_bytes(key.chunk_hash[:8], "little"))
    return torch.randn(torch.Size(shape), generator=g).half()


def kvtier_adapter(socket: str, **params: Any) -> str:
    """The --l2-adapter JSON that makes kvtierd at `socket` LMCache's L2."""
    return json.dumps({"type": "native_plugin", "module_path": "kvtier.lmcache",
                       "class_name": "KvtierL2Client",
                       "adapter_params": {"socket": socket, **params}})


def key_string(key: ObjectKey) -> str:
    """The string LMCache's native adapter names a chunk by."""
    return _object_key_to_string(key)


class Server:
    """LMCache's StorageManager with `l2_adapter` (JSON, as ``lmcache server
    --l2-adapter`` takes it) below an L1 of `l1_gb` GB."""

    def __init__(self, l2_adapter: str, l1_gb: float = 0.2, model: str = "kvtier-test/tiny",
                 shape: Sequence[int] = SHAPE) -> None:
        p = argparse.ArgumentParser()
        add_storage_manager_args(p)
        args = p.parse_args(["--l1-size-gb", str(l1_gb), "--eviction-policy", "LRU",
                             "--l2-adapter", l2_adapter])
        self.sm = StorageManager(parse_args_to_config(args))
        self.model = model
        self.layout = MemoryLayoutDesc(shapes=[torch.Size(shape)], dtypes=[torch.float16])

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sm.close()

    def keys(self, seed: bytes, n: int, model: Optional[str] = None) -> List[ObjectKey]:
        out, prev = [], b""
        for i in range(n):
            prev = hashlib.sha256(prev + seed + i.to_bytes(4, "little")).digest()[:16]
            out.append(ObjectKey(chunk_hash=prev, model_name=model or self.model, kv_rank=0))
        return out

    def store(self, keys: List[ObjectKey]) -> Dict[ObjectKey, torch.Tensor]:
        """Writes each chunk into L1 (values from its key) and finishes the write:
        LMCache's store controller pushes it to L2 in the background."""
        objs = self.sm.reserve_write(keys, self.layout)
        want = {}
        for k in keys:
            want[k] = values(k, objs[k].tensor.shape)
            objs[k].tensor.copy_(want[k])
        self.sm.finish_write(keys)
        return want

    def wait_stored(self, keys: List[ObjectKey], probe: Callable[[List[ObjectKey]], bool],
                    timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if probe(keys):
                return True
            time.sleep(0.01)
        return probe(keys)

    def drop_l1(self, keys: List[ObjectKey]) -> Any:
        return self.sm.delete_l1_keys(keys, force=True)

    def prefetch(self, keys: List[ObjectKey], timeout: float = 30
                 ) -> Tuple[int, Optional[List[torch.Tensor]]]:
        """Prefetches the keys from L2 into L1 as the server does for a lookup;
        returns the L2 hits and, when every key is in L1 then, their tensors."""
        spec = PrefetchTaskSpec(key_groups=[GroupedObjectKeys(keys=keys, object_group_id=0,
                                                              layout_desc=self.layout)])
        h = self.sm.submit_prefetch_task(spec)
        self.sm.wait_prefetch_status(h, timeout=timeout)
        res = self.sm.query_prefetch_status(h)
        hits = int(res.l2_hit_count) if res is not None else 0
        tensors = None
        found = int(res.l1_hit_count) + hits if res is not None else 0
        if found == len(keys):
            with self.sm.read_prefetched_results(keys) as got:
                tensors = [o.tensor.clone() for o in got] if got is not None else None
            self.sm.finish_read_prefetched(keys)
        return hits, tensors

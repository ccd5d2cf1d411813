"""kvtier.sglang: kvtierd as SGLang HiCache's storage backend (its L3).

SGLang runs its model only on a GPU and cannot share .venv with vLLM (it
imports torchvision, whose PyPI build breaks vLLM's import there), so these
tests run SGLang 0.5.23's own HiCache path on the CPU in its environment,
.venv-sglang (scripts/sglang-env.sh; the test command makes it), through
sglang_driver.py: its device and host KV pools, the cache controller serving
builds, with kvtier's backend loaded by SGLang's `dynamic` factory from the
same extra config a user passes, against a real kvtierd. The last test runs
the whole server and needs a GPU (and a CUDA install of SGLang).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kvtier
from kvtier._chunks import chunk_layout

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"


def drive(socket: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    """One run of sglang_driver.py with kvtier's backend; its JSON report."""
    assert SGLANG_PYTHON.exists(), "SGLang's environment is missing: run scripts/sglang-env.sh"
    r = subprocess.run([str(SGLANG_PYTHON), str(HERE / "sglang_driver.py"), "--backend",
                        "kvtier", "--socket", socket, *args],
                       capture_output=True, text=True, timeout=timeout)
    try:
        out: dict[str, Any] = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"sglang_driver.py {args}: no report\n{r.stderr[-3000:]}")
    return out


def calls(report: dict[str, Any], phase: str) -> list[str]:
    return [c["call"] for c in report.get(phase + "_call_log", [])]


def test_a_second_process_loads_what_the_first_stored(daemon) -> None:
    args = ("--pages", "300", "--nodes", "3", "--pass-prefix-keys", "--token-seed", "1")
    first = drive(daemon.socket, "--phase", "store", *args)
    assert first["ok"], first
    assert first["config"]["page_set"] == "_page_set_zero_copy"  # interface_v1
    assert first["store"]["stored_pages"] == 300
    # Each radix node a call or more (at most 128 pages each), from the host pool.
    assert set(calls(first, "store")) == {"batch_set_v1"}
    second = drive(daemon.socket, "--phase", "load", *args)
    assert second["ok"], second
    assert second["load"]["hit_pages"] == 300
    assert second["load"]["loaded_pages"] == 300
    assert second["load"]["bytes_equal"]
    assert calls(second, "load")[0] == "batch_exists"
    assert set(calls(second, "load")[1:]) == {"batch_get_v1"}
    assert second["backend_calls_in_flight"] == [] and second["sglang_warnings"] == []


@pytest.mark.parametrize("args", [
    ("--layout", "layer_first"),                            # a piece a layer, K and V
    ("--layout", "page_first_direct"),
    ("--extra-config", '{"interface_v1": 0}'),              # pages as tensors: get / set
    ("--mla", "--dtype", "fp16"),
], ids=["layer_first", "page_first_direct", "tensors", "mla"])
def test_every_host_pool_layout_round_trips(daemon, args: tuple[str, ...]) -> None:
    got = drive(daemon.socket, *args, "--token-seed", "2")
    assert got["ok"], got
    assert got["load"]["loaded_pages"] == got["load"]["pages"] == 40
    assert got["load"]["bytes_equal"]
    if "tensors" in str(args) or "interface_v1" in str(args):
        assert got["config"]["page_get"] == "_generic_page_get"


def test_mla_pages_are_stored_once_and_shared_by_every_rank(daemon) -> None:
    mla = ("--mla", "--tp-size", "2", "--token-seed", "3")
    reader = drive(daemon.socket, *mla, "--tp-rank", "1", "--phase", "store")
    assert reader["store"]["backup_skip"] and calls(reader, "store") == []
    writer = drive(daemon.socket, *mla, "--tp-rank", "0", "--phase", "store")
    assert writer["store"]["stored_pages"] == 40
    got = drive(daemon.socket, *mla, "--tp-rank", "1", "--phase", "load")
    assert got["ok"] and got["load"]["bytes_equal"], got


def test_mha_ranks_keep_their_own_heads(daemon) -> None:
    mha = ("--tp-size", "2", "--token-seed", "4")
    assert drive(daemon.socket, *mha, "--tp-rank", "0", "--phase", "store")["ok"]
    other = drive(daemon.socket, *mha, "--tp-rank", "1", "--phase", "load")
    assert other["load"]["hit_pages"] == 0  # rank 1's heads were never stored
    mine = drive(daemon.socket, *mha, "--tp-rank", "0", "--phase", "load")
    assert mine["ok"] and mine["load"]["bytes_equal"], mine


def test_pages_of_another_model_layout_or_salt_are_misses(daemon) -> None:
    seed = ("--token-seed", "5")
    assert drive(daemon.socket, *seed, "--phase", "store")["ok"]
    for other in (("--model-name", "another/model"),
                  # The same bytes per page, another order in it: SGLang's file
                  # backend would load these pages as hits and misread them.
                  ("--layout", "layer_first"),
                  ("--extra-config", '{"salt": "tenant-b"}'),
                  ("--dtype", "fp16")):
        got = drive(daemon.socket, *seed, *other, "--phase", "load")
        assert got["load"]["hit_pages"] == 0, (other, got["load"])
        assert got["load"]["loaded_pages"] == 0
    same = drive(daemon.socket, *seed, "--phase", "load")
    assert same["ok"] and same["load"]["bytes_equal"], same


def test_a_full_kvtierd_fails_the_store_and_serves_no_wrong_page(start_daemon) -> None:
    # kvtierd's smallest host tier, 1 MiB: 32 pages of 32 KiB, every one
    # pinned by another reader while SGLang stores.
    d = start_daemon("--host-capacity", "1MiB", "--host-slab", "1MiB")
    page = 32 << 10
    with kvtier.Client("kvtier-test/filler", chunk_layout(page, 16), socket=d.socket) as c:
        keys = kvtier.Keys([i.to_bytes(16, "little") for i in range(1, 33)])
        assert c.put_rows(keys, np.zeros((32, page), np.uint8), list(range(32))) == \
            [kvtier.WriteState.ALLOCATED] * 32
        with c.acquire(keys) as lease:
            assert len(lease) == 32
            full = drive(d.socket, "--token-seed", "6")
    assert full["store"]["stored_pages"] == 0  # SGLang keeps its pages in its host pool
    assert any("failed" in w for w in full["sglang_warnings"])
    assert full["load"]["hit_pages"] == 0 and full["backend_calls_in_flight"] == []
    # The pins gone: what SGLang stores now it finds again, bytes equal.
    again = drive(d.socket, "--token-seed", "6", "--pages", "24")
    assert again["ok"] and again["load"]["bytes_equal"], again


def test_a_kvtierd_that_is_gone_is_a_miss_and_nothing_hangs(start_daemon) -> None:
    d = start_daemon()
    socket = d.socket
    d.stop(signal.SIGKILL)
    start = time.monotonic()
    got = drive(socket, "--token-seed", "7", "--extra-config", '{"timeout_ms": 2000}')
    assert got["store"]["stored_pages"] == 0 and got["load"]["hit_pages"] == 0
    assert got["backend_calls_in_flight"] == [] and "error" not in got["load"]
    assert time.monotonic() - start < 120


def test_hybrid_pools_calls_round_trip(daemon) -> None:
    # The v2 calls a hybrid model's controller makes for its extra pools,
    # made by hand on the host pool: store, existence under both hit
    # policies (a key never stored ends the run), load into other pages.
    got = drive(daemon.socket, "--scenario", "v2", "--token-seed", "8")
    assert got["ok"], got
    assert got["v2"]["kv_hit_pages"] == got["v2"]["pages"]
    assert got["v2"]["pool_hit_pages"] == {"kv": got["v2"]["pages"]}


def test_bad_settings_are_refused_clearly(daemon) -> None:
    got = drive(daemon.socket, "--extra-config", '{"sockets": "typo"}')
    assert not got["ok"]
    assert "unknown setting" in got["error"] and "sockets" in got["error"]


# -- the whole engine: SGLang's server with kvtierd as its HiCache storage ---------

def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="SGLang's server runs its model on a GPU only")
def test_sglang_serves_the_same_tokens_with_kvtierd_as_its_storage(tmp_path) -> None:
    # An environment with a CUDA install of SGLang 0.5.23 and kvtier (not
    # .venv-sglang, whose torch is the CPU build).
    python = os.environ.get("KVTIER_SGLANG_CUDA_PYTHON", sys.executable)
    kvtierd = Path(os.environ.get("KVTIER_BUILD_DIR", REPO / "build-test")) / "daemon/kvtierd"
    r = subprocess.run([python, str(HERE / "sglang_engine_check.py"), str(tmp_path),
                        "--kvtierd", str(kvtierd)], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

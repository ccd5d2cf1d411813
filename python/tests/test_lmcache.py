"""kvtier.lmcache: kvtierd as the L2 store of LMCache's server (its native_plugin
adapter), driven through LMCache 0.5.6's own StorageManager (the one ``lmcache
server`` runs: L1, its store controller pushing chunks to L2, its prefetch
controller bringing them back), on the CPU, against a real kvtierd. The last
test runs the whole engine (vLLM's LMCacheMPConnector feeding ``lmcache
server``, kvtierd its L2) and needs a GPU.
"""

from __future__ import annotations

import os
import random
import signal
import socket as _socket
import subprocess
import sys
import time
from typing import List

import pytest

import kvtier
from conftest import run_python
from kvtier._chunks import chunk_layout
from kvtier.lmcache import KvtierL2Client, namespace_model, page_keys
from lmcache_driver import SHAPE, Server, key_string, kvtier_adapter, values

from pathlib import Path

HERE = Path(__file__).resolve().parent
CHUNK = 2 * 4 * 256 * 64 * 2  # lmcache_driver.SHAPE in fp16: 256 KiB
PAGE = 2 << 20  # kvtier.lmcache's default page
PAGES = 1  # pages of a CHUNK


def in_kvtierd(socket: str):
    """A probe: whether kvtierd holds every chunk of the keys (as LMCache names them)."""
    c = kvtier.Client(namespace_model(PAGE), chunk_layout(PAGE), socket=socket)

    def probe(keys: List) -> bool:
        return all(c.lookup(kvtier.Keys(page_keys(key_string(k), PAGES))).hits == PAGES
                   for k in keys)
    return probe


def pages_client(socket: str) -> kvtier.Client:
    return kvtier.Client(namespace_model(PAGE), chunk_layout(PAGE), socket=socket)


def test_chunks_go_down_to_kvtierd_and_come_back_in_another_process(daemon) -> None:
    stored = run_python(
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from lmcache_driver import Server, kvtier_adapter\n"
        "from test_lmcache import in_kvtierd\n"
        "with Server(kvtier_adapter(sys.argv[1])) as s:\n"
        "    keys = s.keys(b'doc', 4)\n"
        "    s.store(keys)\n"
        "    print('stored', s.wait_stored(keys, in_kvtierd(sys.argv[1])))\n",
        daemon.socket, str(HERE))
    assert stored.returncode == 0, stored.stderr[-3000:]
    assert "stored True" in stored.stdout
    with Server(kvtier_adapter(daemon.socket)) as s:
        keys = s.keys(b"doc", 4)
        hits, got = s.prefetch(keys)
        assert hits == 4
        assert got is not None
        # The values the first process wrote.
        for k, g in zip(keys, got):
            assert (g == values(k, SHAPE)).all()


def test_a_chunk_evicted_from_l1_is_served_from_kvtierd(daemon) -> None:
    with Server(kvtier_adapter(daemon.socket)) as s:
        keys = s.keys(b"p", 6)
        want = s.store(keys)
        assert s.wait_stored(keys, in_kvtierd(daemon.socket))
        s.drop_l1(keys)
        hits, got = s.prefetch(keys)
        assert hits == 6 and got is not None
        assert all((g == want[k]).all() for k, g in zip(keys, got))
        # Never stored: no hit.
        assert s.prefetch(s.keys(b"never", 3))[0] == 0


def test_keys_of_another_model_or_salt_are_misses(daemon) -> None:
    with Server(kvtier_adapter(daemon.socket)) as s:
        keys = s.keys(b"p", 3)
        s.store(keys)
        assert s.wait_stored(keys, in_kvtierd(daemon.socket))
    with Server(kvtier_adapter(daemon.socket), model="another/model") as s:
        assert s.prefetch(s.keys(b"p", 3))[0] == 0
    with Server(kvtier_adapter(daemon.socket, salt="tenant-2")) as s:
        assert s.prefetch(s.keys(b"p", 3))[0] == 0
    with Server(kvtier_adapter(daemon.socket), shape=[2, 4, 128, 64]) as s:
        # Another chunk size under the same names: another namespace, a miss.
        assert s.prefetch(s.keys(b"p", 3))[0] == 0


def test_a_chunk_missing_a_page_is_a_miss_not_a_wrong_block(daemon) -> None:
    # Pages of 64 KiB: a 256 KiB chunk and its header are 5 pages.
    client = KvtierL2Client(socket=daemon.socket, page_bytes=64 << 10)
    try:
        import numpy as np

        data = [np.full(CHUNK, i + 1, np.uint8) for i in range(3)]
        data[0][:] = np.arange(CHUNK) % 251  # (no two pages alike)
        names = [f"m@00000000@0@{i:032x}" for i in range(3)]
        fid = client.submit_batch_set(names, [memoryview(d) for d in data])
        done = wait(client, fid)
        assert done[1], done
        assert wait(client, client.submit_batch_exists(names))[3] == [True] * 3
        with kvtier.Client(namespace_model(64 << 10), chunk_layout(64 << 10),
                           socket=daemon.socket) as c:
            # Chunk 1 loses its last page, chunk 2 its third (and those after it).
            c.remove(kvtier.Keys(page_keys(names[1], 5)[4:]))
            c.remove(kvtier.Keys([page_keys(names[2], 5)[2]]))
            assert c.lookup(kvtier.Keys(page_keys(names[0], 5))).hits == 5
        bufs = [np.zeros(CHUNK, np.uint8) for _ in range(3)]
        got = wait(client, client.submit_batch_get(names, [memoryview(b) for b in bufs]))
        assert got[1] and got[3] == [True, False, False]
        assert (bufs[0] == data[0]).all()
        assert wait(client, client.submit_batch_exists(names))[3] == [True, False, False]
        # A buffer of another length: not this chunk (its header says so), a miss.
        other = np.zeros(CHUNK - 2, np.uint8)
        assert wait(client, client.submit_batch_get(names[:1], [memoryview(other)]))[3] == [False]
        assert (other == 0).all()
        # Stored again whole; deleted, as LMCache's L2 eviction does.
        assert wait(client, client.submit_batch_set(names[1:2], [memoryview(data[1])]))[1]
        assert wait(client, client.submit_batch_exists(names))[3] == [True, True, False]
        assert wait(client, client.submit_batch_delete(names))[3] == [True, True, False]
        assert wait(client, client.submit_batch_exists(names))[3] == [False] * 3
    finally:
        client.close()


def test_a_full_kvtierd_fails_the_store_and_serves_no_wrong_block(start_daemon) -> None:
    # Room for 4 pages of 2 MiB, each chunk one page.
    d = start_daemon("--host-capacity", "8MiB", "--host-slab", "8MiB")
    with Server(kvtier_adapter(d.socket)) as s, pages_client(d.socket) as c:
        keys = s.keys(b"pinned", 3)
        want = s.store(keys)
        assert s.wait_stored(keys, in_kvtierd(d.socket))
        names = [page_keys(key_string(k), PAGES)[0] for k in keys]
        leases = [c.acquire(kvtier.Keys([n])) for n in names]  # pinned by a reader
        try:
            newer = s.keys(b"newer", 3)
            s.store(newer)  # room for one: the store of the others fails
            time.sleep(1.0)
            s.drop_l1(newer)
            hits, got = s.prefetch(newer)
            assert hits < 3
        finally:
            for lease in leases:
                lease.release()
        s.drop_l1(keys)
        hits, got = s.prefetch(keys)
        assert hits == 3 and got is not None
        assert all((g == want[k]).all() for k, g in zip(keys, got))


def test_a_kvtierd_that_goes_away_fails_calls_and_nothing_hangs(start_daemon) -> None:
    d = start_daemon()
    client = KvtierL2Client(socket=d.socket, retry_interval_s=0.2, timeout_ms=2000)
    try:
        import numpy as np

        buf = np.ones(CHUNK, np.uint8)
        assert wait(client, client.submit_batch_set(["k"], [memoryview(buf)]))[1]
        d.stop(signal.SIGKILL)
        start = time.monotonic()
        done = wait(client, client.submit_batch_exists(["k"]))
        assert not done[1] and done[2]  # failed, with the cause
        assert not wait(client, client.submit_batch_get(["k"], [memoryview(buf)]))[1]
        assert time.monotonic() - start < 20
        d2 = start_daemon()
        assert d2.socket == d.socket
        time.sleep(0.3)
        assert wait(client, client.submit_batch_set(["k2"], [memoryview(buf)]))[1]
        assert wait(client, client.submit_batch_exists(["k2"]))[3] == [True]
    finally:
        client.close()


def test_bad_settings_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown adapter_params"):
        KvtierL2Client(sockett="/nowhere")


def wait(client: KvtierL2Client, fid: int, timeout: float = 30):
    """The completion of future `fid`, as LMCache's demux thread would read it."""
    import select

    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(client.event_fd(), select.POLLIN)
    pending = getattr(client, "_test_pending", {})
    client._test_pending = pending  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        if fid in pending:
            return pending.pop(fid)
        poller.poll(100)
        for item in client.drain_completions():
            pending[item[0]] = item
    raise AssertionError(f"future {fid} did not complete")


def test_lmcache_server_starts_with_kvtierd_as_its_l2(daemon, tmp_path) -> None:
    # The README's command line, on the CPU: LMCache's server loads the adapter
    # from its JSON and reports it as its L2. (What it stores comes from an
    # engine's GPU: the whole-engine test below.)
    import json
    import urllib.request

    port, http = _free_port(), _free_port()
    server = _lmcache_server(port, daemon.socket, tmp_path / "lmcache.log", "--http-port",
                             str(http), "--l1-size-gb", "0.2")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/config/adapters",
                                            timeout=5) as r:
                    adapters = json.loads(r.read())["adapters"]
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "lmcache.log").read_text()
                time.sleep(0.5)
        assert [(a["type_name"], a["tier"]) for a in adapters] == [("native_plugin", "l2")]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        assert server.wait(timeout=60) is not None


def _free_port() -> int:
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the whole engine: vLLM's LMCache connector, `lmcache server`, kvtierd below ------

def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _lmcache_server(port: int, socket: str, log: Path, *extra: str) -> subprocess.Popen:
    """`lmcache server` with kvtierd as its L2, as the README starts it."""
    lmcache = Path(sys.executable).parent / "lmcache"
    # (An address, not "localhost": ZeroMQ resolves names itself, and a minimal
    # root without /etc/hosts has no such name for it.)
    proc = subprocess.Popen([str(lmcache), "server", "--host", "127.0.0.1", "--port", str(port),
                             "--l1-size-gb", "1",
                             "--eviction-policy", "LRU", "--disable-observability",
                             "--l2-adapter", kvtier_adapter(socket), *extra],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        with _socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"lmcache server did not listen on {port}")


@pytest.mark.skipif(not _cuda(), reason="vLLM's LMCache connector copies GPU <-> CPU: "
                    "needs a GPU")
def test_vllm_through_lmcache_server_loads_what_kvtierd_kept(start_daemon, tmp_path) -> None:
    # vLLM's LMCacheMPConnector talks to `lmcache server`, kvtierd its L2. The
    # second engine runs against a new server (its L1 empty): what it finds
    # came from kvtierd.
    from vllm_driver import Engine, outputs_without_connector

    port = _free_port()
    d = start_daemon("--host-capacity", "1GiB")
    rng = random.Random(7)
    prompt = [rng.randrange(1, 1000) for _ in range(700)]
    lmcache = {"kv_transfer_config": {
        "kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1",
                                      "lmcache.mp.port": port}}}
    model = tmp_path / "tiny-llama"
    want = outputs_without_connector(model, tmp_path / "plain.log", {"p": prompt},
                                     enable_prefix_caching=False)[0]["p"]
    for name in ("first", "second"):
        server = _lmcache_server(port, d.socket, tmp_path / f"lmcache-{name}.log")
        try:
            engine = Engine(model, tmp_path / f"{name}.log", enable_prefix_caching=False,
                            **lmcache)
            try:
                got = engine.generate(prompt)
                assert got["tokens"] == want["tokens"]
                if name == "second":
                    assert got["cached"] > 0  # LMCache's L1 was empty: kvtierd's chunks
                else:
                    time.sleep(5)  # (LMCache's store to L2 runs behind the reply)
            finally:
                engine.close()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)

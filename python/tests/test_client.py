"""The binding against the real kvtierd: keys, zero-copy slots, errors, lifetimes."""

from __future__ import annotations

import json
import os
import socket as pysocket
import subprocess
import threading
import time

import numpy as np
import pytest
import torch

import kvtier

from conftest import KVTIER_CLI, run_python

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=16, dtype="fp32", block_tokens=16)


def client(d, model: str = "test-model", layout: kvtier.Layout = LAYOUT, **kw) -> kvtier.Client:
    return kvtier.Client(model, layout, socket=d.socket, **kw)


def fill(c: kvtier.Client, keys, value_of=lambda i: i + 1, parent=None) -> None:
    with c.allocate(keys, parent=parent) as w:
        for i in w.allocated:
            np.asarray(w[i])[:] = value_of(i)
        w.commit()


def wait_for(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# ---- keys ------------------------------------------------------------------


def test_block_keys_equal_the_cpp_clients(daemon):
    tokens = [(i * 7919) % 50000 for i in range(16 * 5 + 3)]
    with client(daemon, salt="tenant-a") as c:
        keys = c.block_keys(tokens)
        assert len(keys) == 5  # the partial last block gets no key
        assert all(isinstance(k, bytes) and len(k) == 16 for k in keys)
        cli = subprocess.run(
            [str(KVTIER_CLI), "lookup", "--json", "--socket", daemon.socket, "--model",
             "test-model", "--salt", "tenant-a", "--layers", "2", "--kv-heads", "2", "--head-dim",
             "16", "--dtype", "fp32", "--block-tokens", "16", "--tokens",
             ",".join(map(str, tokens))],
            capture_output=True, text=True, check=True)
        assert [k.hex() for k in keys] == json.loads(cli.stdout)["keys"]
        # A chain continued from a parent is the same chain.
        assert c.block_keys(tokens[32:], parent=keys[1]) == keys[2:]
        # Token ids as an int64 tensor or array give the same keys.
        assert c.block_keys(torch.tensor(tokens)) == keys
        assert c.block_keys(np.array(tokens, dtype=np.int64)) == keys
        with pytest.raises(ValueError):
            c.block_keys([-1] * 16)
    with client(daemon, salt="tenant-b") as other:
        assert other.block_keys(tokens)[0] != keys[0]  # the salt is in the secret


# ---- zero copy ---------------------------------------------------------------


def test_slots_are_the_arena_itself(daemon):
    with client(daemon) as a, client(daemon) as b:
        keys = a.block_keys(list(range(64)))
        fill(a, keys, lambda i: 10 + i)
        assert a.lookup(keys).hits == 4
        with b.acquire(keys) as lease_b:
            assert len(lease_b) == 4
            seen_by_b = np.asarray(lease_b[2])
            assert seen_by_b.nbytes == b.block_bytes and not seen_by_b.flags.writeable
            assert (seen_by_b == 12).all()
            # The same view through DLPack: torch sees the very same memory.
            t = torch.from_dlpack(lease_b[2])
            assert t.data_ptr() == seen_by_b.ctypes.data
            # Another process's view of the same slot: what one writes the
            # other reads, with nothing crossing the socket. (Writing into a
            # leased block is what no worker may do; torch ignores the view's
            # read-only flag, which makes the sharing visible.)
            with a.acquire(keys) as lease_a:
                torch.from_dlpack(lease_a[2]).fill_(99)
            assert (seen_by_b == 99).all()
            del t, seen_by_b
        assert a.remove(keys) >= 1  # the chain's root; the rest hangs below it
        assert a.lookup(keys).hits == 0


def test_inline_put_and_get_copy_through_the_socket(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(100, 148)))
        data = np.arange(3 * c.block_bytes, dtype=np.uint32).astype(np.uint8)
        assert c.put(keys, data) == [kvtier.WriteState.ALLOCATED] * 3
        assert c.get(keys) == data.tobytes()
        assert c.put(keys, data) == [kvtier.WriteState.EXISTS] * 3
        with pytest.raises(kvtier.InvalidArgumentError):
            c.put(keys, data[:-1])


def test_rows_of_a_chunk_buffer_in_and_out_in_one_call(daemon):
    # An engine's buffer of chunks (vLLM's CPU offloading tier): a 2-D array,
    # one block a row, written into slots and read back by row numbers.
    bb = LAYOUT.block_bytes
    buf = np.random.default_rng(3).integers(0, 256, (6, bb), dtype=np.uint8)
    with client(daemon) as c:
        keys = c.block_keys(list(range(16 * 4)))
        states = c.put_rows(keys[:2], buf, [4, 1])
        assert states == [kvtier.WriteState.ALLOCATED] * 2
        with c.allocate(keys, parent=None) as w:  # the first two exist already
            assert w.states[:2] == [kvtier.WriteState.EXISTS] * 2
            w.write_rows(buf, [0, 0, 2, 3])  # (rows of EXISTS keys are not read)
            w.commit()
        out = np.zeros_like(buf)
        assert c.get_rows(keys, out, [5, 4, 3, 2]) == 4
        assert (out[5] == buf[4]).all() and (out[4] == buf[1]).all()
        assert (out[3] == buf[2]).all() and (out[2] == buf[3]).all()
        # Read again: straight out of the arena, no request (direct reads).
        assert c.direct_reads == 0
        out[:] = 0
        assert c.get_rows(keys, out, [5, 4, 3, 2]) == 4
        assert c.direct_reads == 4
        assert (out[5] == buf[4]).all() and (out[2] == buf[3]).all()
        with c.acquire(keys[2:]) as lease:
            out2 = np.zeros_like(buf)
            lease.read_rows(out2, [0, 1])
            assert (out2[0] == buf[2]).all() and (out2[1] == buf[3]).all()
        # Only the leading cached run is copied.
        other = c.block_keys(list(range(1000, 1000 + 16)))
        assert c.get_rows(other + keys, out, [0, 1, 2, 3, 4]) == 0
        # Wrong rows: clear errors, nothing written.
        with pytest.raises(kvtier.InvalidArgumentError, match="rows must be"):
            c.put_rows(other, np.zeros((2, bb + 4), np.uint8), [0])
        with pytest.raises(IndexError):
            c.put_rows(other, buf, [6])
        with pytest.raises(kvtier.InvalidArgumentError, match="1 rows for 2 keys"):
            c.get_rows(keys[:2], out, [0])
        with pytest.raises(kvtier.InvalidArgumentError, match="rows must be"):
            c.get_rows(keys[:1], buf[:, ::2], [0])  # not contiguous
        assert c.lookup(other).hits == 0


def test_blocks_laid_over_pieces_of_host_memory(daemon):
    # An engine's page in pieces of its host pool (SGLang's: a K half and a V
    # half in two places), given by address and size: each block is its
    # pieces end to end.
    bb = LAYOUT.block_bytes
    half = bb // 2
    k = np.random.default_rng(7).integers(0, 256, (4, half), dtype=np.uint8)
    v = np.random.default_rng(8).integers(0, 256, (4, half), dtype=np.uint8)

    def pieces(rows):
        addrs = [a for r in rows for a in (k[r].ctypes.data, v[r].ctypes.data)]
        return addrs, [half] * len(addrs)

    with client(daemon) as c:
        keys = c.block_keys(list(range(2000, 2000 + 16 * 3)))
        assert c.put_spans(keys, *pieces([2, 0, 3])) == [kvtier.WriteState.ALLOCATED] * 3
        assert c.put_spans(keys[:1], *pieces([1])) == [kvtier.WriteState.EXISTS]
        out = np.zeros((3, bb), np.uint8)
        assert c.get_rows(keys, out, [0, 1, 2]) == 3
        assert (out[0] == np.concatenate([k[2], v[2]])).all()
        assert (out[2] == np.concatenate([k[3], v[3]])).all()
        k2, v2 = np.zeros_like(k), np.zeros_like(v)
        addrs = [a for r in (1, 2, 0) for a in (k2[r].ctypes.data, v2[r].ctypes.data)]
        assert c.get_spans(keys, addrs, [half] * 6) == 3
        assert (k2[1] == k[2]).all() and (v2[1] == v[2]).all()
        assert (k2[0] == k[3]).all() and (v2[0] == v[3]).all()
        # Only the leading cached run is copied.
        other = c.block_keys(list(range(3000, 3000 + 16)))
        assert c.get_spans(other + keys, addrs + addrs[:2], [half] * 8) == 0
        # Pieces that are not a block each: clear errors, nothing written.
        with pytest.raises(kvtier.InvalidArgumentError, match="not a block of"):
            c.put_spans(other, [k[0].ctypes.data], [half])
        with pytest.raises(kvtier.InvalidArgumentError, match="for 2 keys"):
            c.put_spans(keys[:2], [k[0].ctypes.data] * 3, [half] * 3)
        with pytest.raises(kvtier.InvalidArgumentError, match="null address"):
            c.get_spans(keys[:1], [0, v[0].ctypes.data], [half, half])
        assert c.lookup(other).hits == 0


def test_a_chunk_laid_over_a_chain_of_blocks(daemon):
    # An engine's chunk larger than a block (LMCache's): a head and the bytes
    # laid end to end over 3 blocks, read back only if the head matches.
    bb = LAYOUT.block_bytes
    head = np.frombuffer(b"HEAD" + bytes(12), np.uint8)
    data = np.random.default_rng(5).integers(0, 256, 3 * bb - 16 - 100, dtype=np.uint8)
    with client(daemon) as c:
        keys = c.block_keys(list(range(16 * 3)))
        assert c.put_concat(keys, head, data) == [kvtier.WriteState.ALLOCATED] * 3
        out = np.zeros_like(data)
        assert c.get_concat(keys, head, out) == 3
        assert (out == data).all()
        other = np.frombuffer(b"ELSE" + bytes(12), np.uint8)
        out2 = np.zeros_like(data)
        assert c.get_concat(keys, other, out2) == -1 and (out2 == 0).all()
        assert c.get_concat(c.block_keys(list(range(900, 948))), head, out2) == 0
        with pytest.raises(kvtier.InvalidArgumentError, match="do not fill 2 blocks"):
            c.put_concat(keys[:2], head, data)
        with pytest.raises(kvtier.InvalidArgumentError, match="do not fill 4 blocks"):
            c.get_concat(c.block_keys(list(range(16 * 4))), head, out)


def test_write_handle_states_parent_and_copy_in(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(200, 264)))
        fill(c, keys[:2])
        with c.allocate(keys[1:], parent=keys[0]) as w:
            assert w.states == [kvtier.WriteState.EXISTS] + [kvtier.WriteState.ALLOCATED] * 2
            assert w.allocated == [1, 2]
            with pytest.raises(ValueError):
                w[0]  # cached already: no slot
            payload = bytes([7]) * c.block_bytes
            w.write(1, payload)
            w.write(2, np.full(c.block_bytes // 4, 7, dtype=np.int32).view(np.uint8))
            with pytest.raises(kvtier.InvalidArgumentError):
                w.write(1, payload[:-1])
            w.commit()
            assert not w.open
        with c.acquire(keys) as lease:
            assert len(lease) == 4
            assert bytes(np.asarray(lease[2])) == bytes([7]) * c.block_bytes
            assert (np.asarray(lease[3]).view(np.int32) == 7).all()


def test_a_write_never_published_leaves_nothing(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(300, 332)))
        with c.allocate(keys) as w:
            np.asarray(w[0])[:] = 1
        assert not w.open  # leaving the block aborted it
        assert c.lookup(keys).hits == 0
        assert c.stats()["open_allocations"] == 0


def test_commit_refuses_while_views_of_the_slots_live(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(400, 416)))
        with c.allocate(keys) as w:
            view = np.asarray(w[0])
            view[:] = 3
            with pytest.raises(BufferError):
                w.commit()
            assert w.open
            del view
            w.commit()
        assert c.lookup(keys).hits == 1


def test_a_lease_stays_pinned_while_a_view_lives(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(500, 532)))
        fill(c, keys)
        with c.acquire(keys) as lease:
            view = torch.from_dlpack(lease[0])
        assert not lease.held
        with pytest.raises(kvtier.FailedPreconditionError):
            lease[0]
        assert c.stats()["open_leases"] == 1  # the view still reads the block
        del view
        assert c.stats()["open_leases"] == 0


def test_no_lease_leaks_over_ten_thousand_cycles(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(600, 664)))
        fill(c, keys)
        before = c.stats()
        total = 0
        for i in range(10_000):
            with c.acquire(keys) as lease:
                total += int(np.asarray(lease[i % 4])[0])
        after = c.stats()
        assert total == 10_000 * 2.5
        assert after["open_leases"] == 0
        assert after["acquired_blocks"] - before["acquired_blocks"] == 40_000


def test_retention_and_stats(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(700, 764)))
        fill(c, keys)
        updated = c.set_retention(keys, [kvtier.Retention(0, 64, priority=90, duration_ms=60_000)])
        assert updated == 4
        stats = c.stats()
        assert isinstance(stats["tier.host.capacity_bytes"], int)
        assert stats["tier.host.capacity_bytes"] == 64 << 20
        assert isinstance(stats["version"], str)


def test_hints_protect_until_used_and_are_bounded(start_daemon):
    d = start_daemon("--max-hinted-blocks-per-session", "6")
    with client(d) as c:
        keys = c.block_keys(list(range(900, 1060)))  # 10 blocks
        fill(c, keys)
        assert c.hint(keys[:4], ttl_ms=30_000) == (4, 0)
        assert c.stats()["hinted_now"] == 4
        with pytest.raises(kvtier.ResourceExhaustedError, match="max_hinted_blocks_per_session"):
            c.hint(keys)
        assert c.stats()["hinted_now"] == 4  # the refused hint changed nothing
        assert c.hint(c.block_keys(list(range(5000, 5064)))) == (0, 0)  # never written
        with c.acquire(keys[:4]) as lease:
            assert len(lease) == 4
        stats = c.stats()
        assert stats["hints_used"] == 4
        assert stats["hinted_now"] == 0
        assert c.hint(keys[:2]) == (2, 0)
        assert c.unhint(keys[:2]) == 2


def test_emulated_device_tier_slots(start_daemon):
    d = start_daemon("--device", "emulated", "--device-capacity", "8MiB")
    with client(d) as c:
        assert c.device == "emulated"
        keys = c.block_keys(list(range(800, 832)))
        with c.allocate(keys, kvtier.Tier.DEVICE) as w:
            assert w.tier == kvtier.Tier.DEVICE
            for i in w.allocated:
                np.asarray(w[i])[:] = 5
            w.commit()
        assert c.lookup(keys).tiers == [kvtier.Tier.DEVICE] * 2
        with c.acquire(keys, kvtier.Tier.HOST) as lease:  # demoted copy in host
            assert lease.tier == kvtier.Tier.HOST
            assert (np.asarray(lease[1]) == 5).all()


def test_gpu_slots_are_cuda_tensors(start_daemon):
    if not torch.cuda.is_available():
        pytest.skip("no GPU: the device tier's CUDA IPC views need one")
    d = start_daemon("--device", "cuda", "--device-capacity", "64MiB")
    with client(d) as c:
        assert c.device == "cuda"
        keys = c.block_keys(list(range(900, 932)))
        with c.allocate(keys, kvtier.Tier.DEVICE) as w:
            for i in w.allocated:
                slot = torch.from_dlpack(w[i])
                assert slot.is_cuda
                slot.fill_(i + 1)
                del slot
            w.commit()
        with c.acquire(keys, kvtier.Tier.DEVICE) as lease:
            assert torch.from_dlpack(lease[1]).cpu().eq(2).all()


# ---- errors -------------------------------------------------------------------


def test_no_daemon_is_unavailable(tmp_path):
    with pytest.raises(kvtier.UnavailableError) as e:
        kvtier.Client("m", LAYOUT, socket=str(tmp_path / "none.sock"))
    assert isinstance(e.value, ConnectionError)
    assert e.value.code == 6 and "none.sock" in e.value.message


def test_a_daemon_that_goes_away_is_unavailable(start_daemon):
    d = start_daemon()
    c = client(d)
    keys = c.block_keys(list(range(32)))
    assert c.lookup(keys).hits == 0
    d.stop()
    with pytest.raises(kvtier.UnavailableError):
        c.lookup(keys)
    assert not c.healthy
    c.close()


def test_a_full_tier_is_resource_exhausted(start_daemon):
    d = start_daemon("--host-capacity", "1MiB", "--host-slab", "256KiB")
    big = kvtier.Layout(layers=4, kv_heads=4, head_dim=64, dtype="fp16", block_tokens=16)  # 64 KiB
    with client(d, layout=big) as c:
        keys = c.block_keys(list(range(16 * 16)))
        fill(c, keys)  # 16 blocks fill the tier
        with c.acquire(keys) as lease:
            assert len(lease) == 16  # all pinned: nothing can be evicted
            with pytest.raises(kvtier.ResourceExhaustedError) as e:
                c.allocate(c.block_keys(list(range(10_000, 10_016))))
            assert e.value.code == 3
        # Unpinned, the tier makes room again.
        fill(c, c.block_keys(list(range(10_000, 10_016))))


def test_a_wrong_layout_is_a_layout_error(daemon):
    with client(daemon, model="shared-model"):
        other = kvtier.Layout(layers=2, kv_heads=2, head_dim=16, dtype="bf16", block_tokens=16)
        with pytest.raises(kvtier.LayoutError) as e:
            client(daemon, model="shared-model", layout=other)
        assert isinstance(e.value, kvtier.InvalidArgumentError)
        assert "layout" in e.value.message
    with pytest.raises(kvtier.InvalidArgumentError) as e:
        kvtier.Client("m", kvtier.Layout(0, 2, 16), socket=daemon.socket)
    assert not isinstance(e.value, kvtier.LayoutError)


def test_a_latent_namespace_round_trips_and_is_not_its_kv_twin(daemon):
    # An MLA model (DeepSeek-V2/V3): one 512 + 64 latent per token and layer.
    latent = kvtier.Layout(layers=3, kv_heads=1, head_dim=576, dtype="bf16", block_tokens=16,
                           kind="latent")
    assert (latent.kind, latent.planes) == ("latent", 1)
    assert latent.block_shape == (3, 1, 16, 1, 576)
    assert latent.block_bytes == 3 * 16 * 576 * 2
    assert "kind='latent'" in repr(latent)
    kv = kvtier.Layout(layers=3, kv_heads=1, head_dim=576, dtype="bf16", block_tokens=16)
    assert (kv.kind, kv.planes, kv.block_shape) == ("kv", 2, (3, 2, 16, 1, 576))
    assert kv != latent and kv.block_bytes == 2 * latent.block_bytes
    assert "kind" not in repr(kv)
    g = torch.Generator().manual_seed(1)
    latents = torch.randn(3, *latent.block_shape, generator=g).bfloat16()  # 3 blocks
    with client(daemon, model="deepseek-test", layout=latent) as a, \
            client(daemon, model="deepseek-test", layout=latent) as b:
        assert a.layout == latent
        keys = a.block_keys(list(range(16 * 3)))
        with a.allocate(keys) as w:
            assert w.allocated == [0, 1, 2]
            for i in w.allocated:
                np.asarray(w[i])[:] = latents[i].view(torch.int16).numpy().view(np.uint8).ravel()
            w.commit()
        with b.acquire(keys) as lease:
            assert len(lease) == 3
            for i in range(3):
                got = torch.from_dlpack(lease[i]).view(torch.bfloat16).view(latent.block_shape)
                assert torch.equal(got, latents[i])
                del got
            # The K/V sequence copies have no K and V to copy here.
            with pytest.raises(kvtier.InvalidArgumentError, match="MLA latent"):
                lease.copy_into([torch.zeros(1, 48, 576).bfloat16()] * 3,
                                [torch.zeros(1, 48, 576).bfloat16()] * 3)
        # The K/V layout of the same numbers is another layout.
        with pytest.raises(kvtier.LayoutError) as e:
            client(daemon, model="deepseek-test", layout=kv)
        assert "kind=latent" in e.value.message
    with client(daemon, model="kv-model", layout=kv):
        with pytest.raises(kvtier.LayoutError):
            client(daemon, model="kv-model", layout=latent)
    with pytest.raises(kvtier.InvalidArgumentError, match="kv_heads 1") as e:
        kvtier.Client("m", kvtier.Layout(3, 2, 576, "bf16", 16, kind="latent"),
                      socket=daemon.socket)
    assert not isinstance(e.value, kvtier.LayoutError)
    with pytest.raises(ValueError, match="unknown layout kind"):
        kvtier.Layout(3, 1, 576, kind="mla")


def test_bad_keys_and_closed_objects(daemon):
    c = client(daemon)
    with pytest.raises(ValueError):
        c.lookup([b"short"])
    with pytest.raises(TypeError):
        c.lookup(b"0123456789abcdef")
    c.close()
    assert c.closed
    with pytest.raises(kvtier.FailedPreconditionError):
        c.lookup([])


def test_a_worker_killed_mid_write_leaves_nothing_behind(daemon):
    code = """
import os, signal, sys, numpy as np, kvtier
c = kvtier.Client("test-model", kvtier.Layout(2, 2, 16, "fp32", 16), socket=sys.argv[1])
keys = c.block_keys(list(range(5000, 5064)))
w = c.allocate(keys)
np.asarray(w[0])[:] = 1
np.asarray(w[1])[: c.block_bytes // 2] = 2   # half a block written
print("writing", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    r = run_python(code, daemon.socket)
    assert r.returncode == -9 and "writing" in r.stdout, r.stderr
    with client(daemon) as c:
        keys = c.block_keys(list(range(5000, 5064)))
        assert wait_for(lambda: c.stats()["open_allocations"] == 0)
        assert c.stats()["pending_blocks"] == 0
        assert c.lookup(keys).hits == 0
        with c.allocate(keys) as w:
            assert w.allocated == [0, 1, 2, 3]  # the slots are free to take again


def test_blocking_calls_release_the_gil(tmp_path):
    # A "daemon" that accepts and never answers: the HELLO waits for the
    # timeout, and meanwhile this thread must keep running Python.
    path = str(tmp_path / "silent.sock")
    server = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    failed = []

    def attach() -> None:
        try:
            kvtier.Client("m", LAYOUT, socket=path, timeout_ms=1500)
        except kvtier.Error as e:
            failed.append(e)

    t = threading.Thread(target=attach)
    t.start()
    conn, _ = server.accept()
    steps = 0
    while t.is_alive():
        steps += 1
    t.join()
    conn.close()
    server.close()
    assert len(failed) == 1 and isinstance(failed[0], kvtier.UnavailableError)
    assert steps > 10_000  # Python ran while the call waited


# ---- sequence copies ----------------------------------------------------------


def test_copy_from_and_into_per_layer_tensors(daemon):
    layout = kvtier.Layout(layers=3, kv_heads=2, head_dim=8, dtype="bf16", block_tokens=4)
    lo = layout
    with client(daemon, model="seq-copy", layout=layout) as c:
        tokens = list(range(4 * 5))  # 5 blocks
        keys = c.block_keys(tokens)
        g = torch.Generator().manual_seed(0)
        ks = [torch.randn(1, lo.kv_heads, 20, lo.head_dim, generator=g).bfloat16() for _ in range(3)]
        vs = [torch.randn(1, lo.kv_heads, 20, lo.head_dim, generator=g).bfloat16() for _ in range(3)]
        fill(c, keys[:2])  # blocks 0 and 1 exist: the write fills blocks 2..4
        with c.allocate(keys[2:], parent=keys[1]) as w:
            w.copy_from(ks, vs, first_block=2)
            w.commit()
        with c.acquire(keys) as lease:
            assert len(lease) == 5
            for b in range(2, 5):
                block = torch.from_dlpack(lease[b]).view(torch.bfloat16).view(lo.block_shape)
                for layer in range(3):
                    span = slice(4 * b, 4 * b + 4)
                    # [token, head, dim] in the block = [head, token, dim] in the model
                    assert torch.equal(block[layer, 0], ks[layer][0, :, span].transpose(0, 1))
                    assert torch.equal(block[layer, 1], vs[layer][0, :, span].transpose(0, 1))
                del block
            # And back: into [kv_heads, seq, head_dim] tensors, blocks 2..4 only.
            k_out = [torch.full((lo.kv_heads, 20, lo.head_dim), float("nan")).bfloat16()
                     for _ in range(3)]
            v_out = [t.clone() for t in k_out]
            lease.copy_into(k_out, v_out)
            for layer in range(3):
                assert torch.equal(k_out[layer][:, 8:], ks[layer][0, :, 8:])
                assert torch.equal(v_out[layer][:, 8:], vs[layer][0, :, 8:])
            with pytest.raises(kvtier.InvalidArgumentError, match="positions"):
                lease.copy_into([t[:, :19] for t in k_out], v_out)  # too short
            with pytest.raises(kvtier.InvalidArgumentError, match="bf16"):
                lease.copy_into([t.float() for t in k_out], v_out)  # wrong dtype
            with pytest.raises(kvtier.InvalidArgumentError, match="layers"):
                lease.copy_into(k_out[:2], v_out[:2])


def test_host_buffers_are_reused_up_to_the_cap():
    cap, _ = kvtier.host_buffer_cache()
    try:
        a = torch.from_dlpack(kvtier.host_buffer(3 << 20))
        a.fill_(7)
        address = a.data_ptr()
        assert address % 4096 == 0 and a.numel() == 3 << 20
        del a
        assert kvtier.host_buffer_cache()[1] >= 3 << 20  # kept
        b = torch.from_dlpack(kvtier.host_buffer(3 << 20))
        assert b.data_ptr() == address  # the same memory, paged in already
        del b
        kvtier.set_host_buffer_cache(0)
        assert kvtier.host_buffer_cache() == (0, 0)  # given back to the system
    finally:
        kvtier.set_host_buffer_cache(cap)

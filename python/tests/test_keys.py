"""kvtier.Keys: the one-buffer key array block_keys returns and every call reads in place."""

from __future__ import annotations

import collections.abc
import copy
import json
import pickle
import subprocess

import numpy as np
import pytest

import kvtier

from conftest import KVTIER_CLI

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=16, dtype="fp32", block_tokens=16)


def client(d, **kw) -> kvtier.Client:
    return kvtier.Client("test-model", LAYOUT, socket=d.socket, **kw)


def cli_keys(d, tokens: list[int], salt: str = "") -> list[str]:
    """The C++ client's keys of tokens, as hex (kvtier lookup --json)."""
    out = subprocess.run(
        [str(KVTIER_CLI), "lookup", "--json", "--socket", d.socket, "--model", "test-model",
         "--salt", salt, "--layers", "2", "--kv-heads", "2", "--head-dim", "16", "--dtype",
         "fp32", "--block-tokens", "16", "--tokens", ",".join(map(str, tokens))],
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["keys"]


def made(n: int, first: int = 0) -> kvtier.Keys:
    return kvtier.Keys([bytes([first + i]) * 16 for i in range(n)])


# ---- the keys themselves ---------------------------------------------------------------


def test_block_keys_are_the_cpp_clients_byte_for_byte(daemon):
    tokens = [(i * 7919) % 50000 for i in range(16 * 7 + 5)]
    with client(daemon, salt="s") as c:
        keys = c.block_keys(tokens)
        assert isinstance(keys, kvtier.Keys) and len(keys) == 7
        want = cli_keys(daemon, tokens, salt="s")
        assert [k.hex() for k in keys] == want
        assert bytes(keys) == bytes.fromhex("".join(want))  # 16 bytes a key, back to back
        assert all(type(k) is bytes and len(k) == 16 for k in keys)
        # Block by block through the parent: the same chain.
        for i in range(1, 7):
            assert c.block_keys(tokens[16 * i:16 * (i + 1)], parent=keys[i - 1])[0] == keys[i]
        assert c.block_keys(tokens[:15]) == kvtier.Keys() and not c.block_keys([])


def test_index_slice_iterate_compare():
    keys = made(6)
    assert len(keys) == 6 and keys[0] == bytes([0]) * 16 and keys[-1] == bytes([5]) * 16
    with pytest.raises(IndexError):
        keys[6]
    with pytest.raises(IndexError):
        keys[-7]
    as_list = list(keys)
    assert as_list == [bytes([i]) * 16 for i in range(6)]
    for s in (slice(2, 5), slice(None, -1), slice(4, None), slice(None, None, 2),
              slice(None, None, -1), slice(5, 1, -2), slice(9, 20), slice(3, 3)):
        part = keys[s]
        assert isinstance(part, kvtier.Keys)
        assert list(part) == as_list[s] and part == as_list[s] and len(part) == len(as_list[s])
    assert keys[1:4][1:] == keys[2:4]  # a slice of a slice
    assert keys == as_list and keys == kvtier.Keys(as_list) and keys != keys[1:]
    assert keys != tuple(as_list) and keys != bytes(keys) and keys != as_list[::-1]
    assert hash(keys[1:3]) == hash(kvtier.Keys(as_list[1:3]))
    assert len({keys, kvtier.Keys(as_list), keys[:2]}) == 2
    assert as_list[3] in keys and bytes(16) + b"x" not in keys and "x" not in keys
    assert keys[:2] + keys[4:] == as_list[:2] + as_list[4:]
    assert keys[:2] + as_list[2:] == keys
    assert isinstance(keys, collections.abc.Sequence)
    assert keys.index(as_list[2]) == 2 and keys.count(as_list[2]) == 1
    with pytest.raises(ValueError):
        keys.index(bytes(16) + b"x")
    assert list(reversed(keys)) == as_list[::-1]
    assert repr(made(1)) == f"Keys(1 key: {'00' * 16})"
    assert repr(keys).startswith("Keys(6 keys: ") and repr(kvtier.Keys()) == "Keys(0 keys)"


def test_buffer_bytes_pickle_and_construction():
    keys = made(5, first=7)
    view = memoryview(keys)
    assert view.readonly and view.nbytes == 80 and view.tobytes() == b"".join(keys)
    assert memoryview(keys[1:3]).tobytes() == b"".join(list(keys)[1:3])
    rows = np.frombuffer(keys, np.uint8).reshape(-1, 16)
    assert rows.shape == (5, 16) and bytes(rows[2]) == keys[2]
    with pytest.raises(ValueError):
        np.asarray(keys)[0] = 1  # read-only
    assert kvtier.Keys(bytes(keys)) == keys
    assert kvtier.Keys(bytearray(bytes(keys))) == keys and kvtier.Keys(rows) == keys
    assert kvtier.Keys(keys) == keys and kvtier.Keys(tuple(keys)) == keys
    assert kvtier.Keys(iter(list(keys))) == keys  # any iterable of keys
    assert pickle.loads(pickle.dumps(keys[1:4])) == keys[1:4]
    assert copy.deepcopy(keys) == keys
    with pytest.raises(ValueError, match="16 bytes per key"):
        kvtier.Keys(b"x" * 17)
    with pytest.raises(ValueError, match="16 bytes"):
        kvtier.Keys([b"x" * 15])
    with pytest.raises(ValueError, match="16 bytes"):
        kvtier.Keys([bytearray(16)])  # keys are bytes, as block_keys gives them
    with pytest.raises(TypeError):
        kvtier.Keys("0" * 32)
    with pytest.raises(TypeError):
        kvtier.Keys(5)


# ---- every call reads a Keys, and still takes a list ------------------------------------


def test_calls_take_keys_slices_and_lists_alike(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(16 * 6)))
        data = np.arange(3 * c.block_bytes, dtype=np.uint32).astype(np.uint8)
        assert c.put(keys[:3], data) == [kvtier.WriteState.ALLOCATED] * 3
        assert c.lookup(keys).hits == 3
        assert c.lookup(list(keys)).hits == 3 and c.lookup(tuple(keys[:2])).hits == 2
        # A slice is read from its offset in the shared buffer: keys 1 and 2 are cached.
        assert c.lookup(keys[1:]).hits == 2 and c.lookup(keys[3:]).hits == 0
        assert c.get(keys[:3]) == data.tobytes() and c.get(list(keys)) == data.tobytes()
        # A slice and its parent, as kvtier.hf and the vLLM connector store a chain's tail.
        hit = c.lookup(keys).hits
        with c.allocate(keys[hit:], parent=keys[hit - 1]) as w:
            assert w.allocated == [0, 1, 2]
            for i in w.allocated:
                np.asarray(w[i])[:] = 40 + i
            w.commit()
        assert [t == kvtier.Tier.HOST for t in c.lookup(keys).tiers] == [True] * 6
        with c.acquire(keys) as lease:
            assert len(lease) == 6 and (np.asarray(lease[4]) == 41).all()
        assert c.set_retention(keys, [kvtier.Retention(0, 96, priority=90)]) == 6
        assert c.hint(keys[:4]) == (4, 0) and c.unhint(list(keys[:4])) == 4
        # Key 3 is removed by name; keys 4 and 5 hang below it and go with it.
        assert c.remove(keys[3:]) == 1 and c.lookup(keys).hits == 3
        assert c.lookup(kvtier.Keys()).hits == 0
        with pytest.raises(TypeError):
            c.lookup(bytes(keys))  # one bytes object is not a sequence of keys
        with pytest.raises(ValueError):
            c.lookup([keys[0], b"short"])
        with pytest.raises(TypeError):
            c.lookup(17)


def test_a_long_chain_and_the_limit(daemon):
    with client(daemon) as c:
        keys = c.block_keys(list(range(16 * 300)))  # longer than a call's inline buffer
        assert len(keys) == 300 and c.lookup(keys).hits == 0
        c.put(keys[:200], np.zeros(200 * c.block_bytes, np.uint8))
        assert c.lookup(keys).hits == 200 and c.lookup(list(keys)).hits == 200
        too_many = c.block_keys(list(range(16 * (c.max_keys + 1))))
        with pytest.raises(kvtier.InvalidArgumentError):
            c.lookup(too_many)


def test_deployment_keys_are_keys_too(daemon):
    secret = "00112233445566778899aabbccddeeff"
    keys = kvtier.deployment_keys(secret, "m", "", 16, list(range(40)))
    assert isinstance(keys, kvtier.Keys) and len(keys) == 2
    assert kvtier.event_hash(keys[1]) == int.from_bytes(keys[1][8:], "big")

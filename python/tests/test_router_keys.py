"""Router-side keys: kvtier.deployment_keys computes, from tokens and the
deployment secret alone, the keys kvtierd's workers compute after attaching,
and kvtier.event_hash gives the block hash the KV events carry for each."""

from __future__ import annotations

import random

import pytest

import kvtier

SECRET = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=16, dtype="fp16", block_tokens=16)


def test_deployment_keys_equal_an_attached_workers(start_daemon):
    d = start_daemon("--secret", SECRET)
    tokens = [random.Random(5).randrange(50_000) for _ in range(16 * 7 + 3)]
    for model, salt in [("llama-test", ""), ("llama-test", "tenant-b"), ("other", "")]:
        c = kvtier.Client(model, LAYOUT, socket=d.socket, salt=salt)
        want = c.block_keys(tokens)
        assert len(want) == 7
        assert kvtier.deployment_keys(SECRET, model, salt, 16, tokens) == want
        assert [kvtier.event_hash(k) for k in want] == [int.from_bytes(k[8:], "big") for k in want]
        c.close()
    # Another secret, another namespace or another block size: other keys.
    other = "1" + SECRET[1:]
    assert kvtier.deployment_keys(other, "llama-test", "", 16, tokens) != kvtier.deployment_keys(
        SECRET, "llama-test", "", 16, tokens)
    assert len(kvtier.deployment_keys(SECRET, "llama-test", "", 32, tokens)) == 3


def test_a_malformed_secret_is_a_clear_error():
    with pytest.raises(ValueError, match="32 or more hex digits"):
        kvtier.deployment_keys("abc", "m", "", 16, [1] * 16)

"""kvtierd's KV events, read end to end as a KV-aware router reads vLLM's.

A real kvtierd publishes block events on a ZeroMQ PUB socket (ipc://, in the
test's directory) while the real kvtier client writes, reads and removes
blocks; pyzmq subscribers read them. Every payload is decoded twice: with
plain msgpack, against the layout daemon/kv_events.h documents, and with
vLLM's own decoder (msgspec, vllm.distributed.kv_events.KVEventBatch), so a
router that reads vLLM's events reads these. What the tests prove:

 - the stream starts with one AllBlocksCleared (seq 0, topic ""), sequence
   numbers are contiguous, a committed chain is a BlockStored on "CPU" whose
   hashes are the low 64 bits of the client's keys, chained by
   parent_block_hash, with the layout's block_tokens as block_size, and a
   removed chain is a BlockRemoved of the same hashes;
 - blocks the host tier evicts are BlockRemoved, each after its BlockStored;
 - a subscriber that connects late gets what it missed from the replay
   socket, byte for byte what went out live, then the end marker;
 - a warm restart announces what it restored from the ssd tier, on
   "STORAGE", after its AllBlocksCleared;
 - a subscriber that never reads does not hold the daemon back: the PUB
   socket drops its messages, every request succeeds, every event is
   published.

The daemon sends AllBlocksCleared before it listens, so no subscriber started
after it can read seq 0 live; it is read back from the replay socket, as a
router that starts late does (python/examples/kv_events_subscriber.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import msgpack
import msgspec
import numpy as np
import pytest
import zmq
from vllm.distributed.kv_events import KVEventBatch

import kvtier

from conftest import Daemon

MODEL = "events-model"
# 32 tokens per block, so block_size cannot pass by being vLLM's usual 16.
LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=16, dtype="fp32", block_tokens=32)
END_SEQ = -1
WAIT_MS = 10_000

# Each event's keys in order, as vLLM writes them (omit_defaults: the
# defaulted fields are left out).
FIELDS = {
    "BlockStored": [
        "type",
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    ],
    "BlockRemoved": ["type", "block_hashes", "medium"],
    "AllBlocksCleared": ["type"],
}
VLLM_DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)


def lo(key: bytes) -> int:
    """The block hash vLLM's events carry for a kvtier key: its low 64 bits.

    A key is 16 bytes, BlockKey.hi then BlockKey.lo, each big-endian.
    """
    assert len(key) == 16
    return int.from_bytes(key[8:], "big")


def stored(keys: List[bytes], parent: Optional[bytes], block_size: int) -> dict:
    return {
        "type": "BlockStored",
        "block_hashes": [lo(k) for k in keys],
        "parent_block_hash": None if parent is None else lo(parent),
        "token_ids": [],
        "block_size": block_size,
        "lora_id": None,
        "medium": "CPU",
        "lora_name": None,
    }


def removed(keys: List[bytes]) -> dict:
    return {"type": "BlockRemoved", "block_hashes": [lo(k) for k in keys], "medium": "CPU"}


@dataclass
class Batch:
    topic: bytes
    seq: int
    ts: float
    events: List[dict]
    payload: bytes


def decode(topic: bytes, seq_bytes: bytes, payload: bytes) -> Batch:
    """One batch, decoded with plain msgpack and with vLLM's decoder, which must agree."""
    assert len(seq_bytes) == 8
    plain = msgpack.unpackb(payload)
    assert isinstance(plain, list) and len(plain) == 3, plain
    ts, events, rank = plain
    assert isinstance(ts, float) and rank == 0
    for event in events:
        assert list(event) == FIELDS[event["type"]], event  # "type" first, then vLLM's order
    typed = VLLM_DECODER.decode(payload)
    assert (typed.ts, typed.data_parallel_rank) == (ts, 0)
    assert len(typed.events) == len(events)
    for t, event in zip(typed.events, events):
        assert type(t).__name__ == event["type"]
        assert {f: getattr(t, f) for f in FIELDS[event["type"]][1:]} == {
            f: event[f] for f in FIELDS[event["type"]][1:]
        }
    return Batch(topic, int.from_bytes(seq_bytes, "big"), ts, events, payload)


class Subscriber:
    """A SUB socket on every topic of the daemon's events."""

    def __init__(self, ctx: zmq.Context, endpoint: str, rcvhwm: Optional[int] = None) -> None:
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        if rcvhwm is not None:
            self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)

    def recv(self, timeout_ms: int = WAIT_MS) -> Optional[Batch]:
        if not self.sock.poll(timeout_ms):
            return None
        topic, seq, payload = self.sock.recv_multipart()
        return decode(topic, seq, payload)

    def read_until(self, done: Callable[[Batch], bool]) -> List[Batch]:
        """Batches up to and including the first that is `done`."""
        out: List[Batch] = []
        while True:
            batch = self.recv()
            assert batch is not None, f"no batch in {WAIT_MS} ms after {[b.seq for b in out]}"
            out.append(batch)
            if done(batch):
                return out

    def wait_subscribed(self, write: Callable[[int], None]) -> List[Batch]:
        """Calls write(i) for i = 0, 1, ... until a batch arrives: a subscription
        reaches the publisher some time after connect, and what goes out before
        is not sent to it."""
        for i in range(200):
            write(i)
            batch = self.recv(timeout_ms=50)
            if batch is not None:
                return [batch]
        pytest.fail("the subscription never reached the publisher")


def replay(ctx: zmq.Context, endpoint: str, start: int) -> List[Batch]:
    """Every batch the publisher keeps from seq `start` on, asked from a DEALER."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    try:
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        out: List[Batch] = []
        while True:
            assert dealer.poll(WAIT_MS), f"no replay answer in {WAIT_MS} ms"
            empty, topic, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if int.from_bytes(seq, "big", signed=True) == END_SEQ:
                assert (topic, payload) == (b"", b"")
                return out
            out.append(decode(topic, seq, payload))
    finally:
        dealer.close()


def flat(batches: List[Batch], topic: bytes) -> List[Tuple[str, str, int]]:
    """(type, medium, hash) per block, in order, of the batches under `topic`."""
    return [
        (e["type"], e["medium"], h)
        for b in batches
        if b.topic == topic
        for e in b.events
        for h in e["block_hashes"]
    ]


def wait_for(predicate: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def blocks(c: kvtier.Client, n: int, value: int = 1) -> np.ndarray:
    return np.full(n * c.block_bytes, value, dtype=np.uint8)


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def events(start_daemon, tmp_path: Path) -> Callable[..., Tuple[Daemon, str, str]]:
    """events(*args) starts a kvtierd publishing events (no device tier, so
    every block is on "CPU"); returns it with its PUB and replay endpoints."""

    def start(*args: str) -> Tuple[Daemon, str, str]:
        pub, rep = f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/replay"
        # One batch per request unless a test says otherwise, so that batch
        # boundaries follow the test's requests.
        flush = [] if "--events-flush-us" in args else ["--events-flush-us", "0"]
        d = start_daemon(
            "--device", "off", "--events-endpoint", pub, "--events-replay-endpoint", rep,
            *flush, *args
        )
        return d, pub, rep

    return start


class Probe:
    """A client of another model ("probe"), writing one-block chains on demand:
    events to wait for while a subscription is on its way."""

    def __init__(self, d: Daemon, layout: kvtier.Layout = LAYOUT) -> None:
        self.client = kvtier.Client("probe", layout, socket=d.socket)
        self.keys: List[bytes] = []

    def write(self, i: int) -> None:
        c = self.client
        self.keys += c.block_keys([i] * c.block_tokens)
        assert c.put(self.keys[-1:], blocks(c, 1)) == [kvtier.WriteState.ALLOCATED]

    def __enter__(self) -> "Probe":
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()


def test_a_subscriber_reads_stored_and_removed_chains_as_vllm_events(events, ctx):
    d, pub, rep = events()
    sub = Subscriber(ctx, pub)
    with Probe(d) as probe, kvtier.Client(MODEL, LAYOUT, socket=d.socket) as c:
        live = sub.wait_subscribed(probe.write)
        topic = MODEL.encode()  # the topic prefix ("" by default) and the model
        keys = c.block_keys(list(range(5 * LAYOUT.block_tokens)))
        assert len(keys) == 5
        # Two commits, each waited for, so that each is its own event: the
        # second continues the chain from the first's last block.
        assert c.put(keys[:2], blocks(c, 2)) == [kvtier.WriteState.ALLOCATED] * 2
        live += sub.read_until(lambda b: b.topic == topic)
        assert c.put(keys[2:], blocks(c, 3), parent=keys[1]) == [kvtier.WriteState.ALLOCATED] * 3
        live += sub.read_until(lambda b: b.topic == topic)
        assert c.remove(keys) >= 1  # the root, and the chain below it with it
        assert c.lookup(keys).hits == 0
        live += sub.read_until(lambda b: b.topic == topic)

    history = [b for b in replay(ctx, rep, 0) if b.seq < live[0].seq]
    stream = history + live
    assert [b.seq for b in stream] == list(range(len(stream)))
    assert (stream[0].topic, stream[0].events) == (b"", [{"type": "AllBlocksCleared"}])
    assert all(b.topic in (b"probe", topic) for b in stream[1:])
    assert all(b.ts > 1.6e9 for b in stream)  # seconds since the epoch
    bs = LAYOUT.block_tokens
    assert [e for b in stream if b.topic == topic for e in b.events] == [
        stored(keys[:2], None, bs),
        stored(keys[2:], keys[1], bs),
        removed(keys),  # root first, as the chain hangs
    ]


def test_evicted_blocks_are_removed_after_they_were_stored(events, ctx):
    # 256 KiB blocks in a 1 MiB host tier with LRU eviction and nowhere to
    # demote to: four fit, and each write past them evicts the oldest.
    layout = kvtier.Layout(layers=4, kv_heads=8, head_dim=128, dtype="fp16", block_tokens=16)
    d, pub, _ = events("--host-capacity", "1MiB", "--host-slab", "1MiB", "--host-policy", "lru")
    topic = MODEL.encode()
    sub = Subscriber(ctx, pub)
    with Probe(d, layout) as probe, kvtier.Client(MODEL, layout, socket=d.socket) as c:
        assert c.block_bytes == 256 << 10
        sub.wait_subscribed(probe.write)
        assert probe.client.remove(probe.keys) == len(probe.keys)  # the tier empty again
        # Ten chains of one block each (no chain drops another with it).
        keys = [c.block_keys([1000 + i] * layout.block_tokens)[0] for i in range(10)]
        for i, key in enumerate(keys):
            assert c.put([key], blocks(c, 1, i)) == [kvtier.WriteState.ALLOCATED]
        seen = sub.read_until(lambda b: ("BlockStored", "CPU", lo(keys[-1])) in flat([b], topic))
        cached = [c.lookup([k]).hits == 1 for k in keys]
        assert c.stats()["tier.host.evictions"] == 6

    assert cached == [False] * 6 + [True] * 4
    expected = [("BlockStored", "CPU", lo(k)) for k in keys[:4]]
    for old, new in zip(keys, keys[4:]):
        expected += [("BlockRemoved", "CPU", lo(old)), ("BlockStored", "CPU", lo(new))]
    assert flat(seen, topic) == expected
    assert [b.seq for b in seen] == list(range(seen[0].seq, seen[-1].seq + 1))


def test_a_flush_window_sends_a_burst_as_few_batches_in_order(events, ctx):
    # A window far longer than the burst takes (20 puts, milliseconds): the
    # burst's events go out in a batch or two, every one of them, in order.
    d, pub, _ = events("--events-flush-us", "200000")
    topic = MODEL.encode()
    sub = Subscriber(ctx, pub)
    with Probe(d) as probe, kvtier.Client(MODEL, LAYOUT, socket=d.socket) as c:
        sub.wait_subscribed(probe.write)
        keys = [c.block_keys([2000 + i] * LAYOUT.block_tokens)[0] for i in range(20)]
        for i, key in enumerate(keys):
            assert c.put([key], blocks(c, 1, i)) == [kvtier.WriteState.ALLOCATED]
        seen = sub.read_until(lambda b: ("BlockStored", "CPU", lo(keys[-1])) in flat([b], topic))
    mine = [b for b in seen if b.topic == topic]
    assert flat(mine, topic) == [("BlockStored", "CPU", lo(k)) for k in keys]
    assert len(mine) <= 10
    assert [b.seq for b in seen] == list(range(seen[0].seq, seen[-1].seq + 1))


def test_a_late_subscriber_replays_what_it_missed(events, ctx):
    d, pub, rep = events()
    with kvtier.Client(MODEL, LAYOUT, socket=d.socket) as c:

        def write(i: int) -> None:
            keys = c.block_keys([i] * LAYOUT.block_tokens)
            assert c.put(keys, blocks(c, 1)) == [kvtier.WriteState.ALLOCATED]

        early = [c.block_keys([i] * LAYOUT.block_tokens)[0] for i in range(3)]
        for i in range(3):
            write(i)  # before anyone listens: lost to live subscribers
        sub = Subscriber(ctx, pub)
        live = sub.wait_subscribed(lambda i: write(100 + i))
        for i in range(3):
            write(1000 + i)
            live += sub.read_until(lambda b: True)
        replayed = replay(ctx, rep, 0)
        from_middle = replay(ctx, rep, 2)
        past_the_end = replay(ctx, rep, live[-1].seq + 1)
        assert c.stats()["events.replay_requests"] == 3

    last = live[-1].seq
    # seq 0 (AllBlocksCleared) went out long before anyone listened; the early
    # writes were published before the subscriber connected, but the
    # publisher's thread sends them a moment later, so the last of them may
    # still reach it live (seen in CI under load). Either way the replay has
    # them all, after seq 0.
    assert live[0].seq > 0
    assert [b.seq for b in live] == list(range(live[0].seq, last + 1))
    # The publisher keeps every batch (10,000 by default): all come back,
    # in order, then the end marker.
    assert [b.seq for b in replayed] == list(range(last + 1))
    assert [b.seq for b in from_middle] == list(range(2, last + 1))
    assert past_the_end == []
    assert replayed[0].events == [{"type": "AllBlocksCleared"}]
    assert flat(replayed, MODEL.encode())[:3] == [("BlockStored", "CPU", lo(k)) for k in early]
    # What a router gets: the replayed batches before the first live one and
    # the live ones, together contiguous; a batch seen both ways is the same
    # bytes both ways.
    union = sorted({b.seq for b in replayed if b.seq < live[0].seq} | {b.seq for b in live})
    assert union == list(range(last + 1))
    by_seq: Dict[int, Batch] = {b.seq: b for b in replayed}
    for b in live:
        assert (by_seq[b.seq].topic, by_seq[b.seq].payload) == (b.topic, b.payload)


def test_a_warm_restart_announces_the_blocks_it_restored_on_storage(events, ctx, tmp_path):
    # A chain written through to the ssd tier survives a restart; the new
    # daemon's stream starts with AllBlocksCleared (forget what the old one
    # said) and then tells which blocks it still holds: the chain, on
    # "STORAGE", chained as it was written.
    d, _, rep = events(
        "--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "64MiB", "--ssd-prepare", "sparse",
        "--ssd-write-through",
    )
    with kvtier.Client(MODEL, LAYOUT, socket=d.socket) as c:
        keys = c.block_keys(list(range(3 * LAYOUT.block_tokens)))
        assert c.put(keys, blocks(c, 3)) == [kvtier.WriteState.ALLOCATED] * 3

        def on_disk() -> bool:
            s = c.stats()
            return s["tier.ssd.used_bytes"] >= 3 * c.block_bytes and s["moves_in_flight"] == 0

        assert wait_for(on_disk)
    assert d.stop() == 0
    d.start()
    assert "warm restart: 3 blocks restored" in d.log()
    topic = MODEL.encode()
    assert wait_for(lambda: len(flat(replay(ctx, rep, 0), topic)) == 3)
    after = replay(ctx, rep, 0)
    assert (after[0].seq, after[0].topic, after[0].events) == (
        0, b"", [{"type": "AllBlocksCleared"}])
    restored = [e for b in after if b.topic == topic for e in b.events]
    assert restored == [dict(stored(keys, None, LAYOUT.block_tokens), medium="STORAGE")]
    with kvtier.Client(MODEL, LAYOUT, socket=d.socket) as c:
        assert c.get(keys) == blocks(c, 3).tobytes()


def test_a_subscriber_that_never_reads_does_not_hold_the_daemon_back(events, ctx, tmp_path):
    # A PUB high-water mark of 16 messages and a receive queue of one, on a
    # stream of ~4,000 batches, most of a megabyte (more than the kernel's
    # default socket buffers hold, ~200 KB): the stalled subscriber must fall
    # behind, and its messages be dropped, not waited for.
    config = tmp_path / "events.toml"
    config.write_text("[events]\nhwm = 16\n")
    d, pub, _ = events("--config", str(config))
    stalled = Subscriber(ctx, pub, rcvhwm=1)
    layout = kvtier.Layout(layers=1, kv_heads=1, head_dim=16, dtype="fp16", block_tokens=16)
    iterations, chain = 2000, 8
    with Probe(d, layout) as probe, kvtier.Client(MODEL, layout, socket=d.socket) as c:
        stalled.wait_subscribed(probe.write)  # the one batch it reads before the end
        for i in range(iterations):
            keys = c.block_keys([i] * (chain * layout.block_tokens))
            data = blocks(c, chain, i % 251)
            assert c.put(keys, data) == [kvtier.WriteState.ALLOCATED] * chain
            assert c.get(keys) == data.tobytes()
            assert c.remove(keys) >= 1
        # Every event went out: AllBlocksCleared, one BlockStored per probe
        # write, and a BlockStored and a BlockRemoved per iteration.
        want = 1 + len(probe.keys) + 2 * iterations
        assert wait_for(lambda: c.stats()["events.events_published"] == want)
        stats = c.stats()
        assert stats["events.batches_dropped"] == 0
    assert d.proc is not None and d.proc.poll() is None

    got: List[int] = []
    while (batch := stalled.recv(timeout_ms=200)) is not None:
        got.append(batch.seq)
    assert all(a < b for a, b in zip(got, got[1:]))
    assert len(got) < stats["events.batches_published"] // 2  # the rest were dropped

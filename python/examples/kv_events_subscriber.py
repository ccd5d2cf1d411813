"""Reads kvtierd's KV events and prints them, asking for replay across gaps.

    .venv/bin/python python/examples/kv_events_subscriber.py \
        --endpoint tcp://HOST:5557 --replay-endpoint tcp://HOST:5558 [--history]

kvtierd publishes in vLLM's KV-event format (daemon/kv_events.h), so this
reads vLLM's events too. On the PUB socket each batch is three frames:

    topic, seq (8 bytes, big-endian), payload

and the payload is msgpack `[ts, [event, ...], data_parallel_rank]`, each
event a map whose "type" is "BlockStored", "BlockRemoved" or
"AllBlocksCleared". seq goes up by one per batch the publisher sends, so a
seq that skips ahead means this subscriber missed batches (its receive
queue overflowed, or it was reconnecting). Then it asks the replay socket
(a ROUTER) for them: it sends ("", start seq as 8 bytes big-endian) from a
DEALER and gets back ("", topic, seq, payload) for every batch the
publisher still keeps from `start` on, then ("", "", -1 as 8 bytes, "").
Batches older than the publisher's replay buffer are gone for good; they
are reported as lost.

--history asks for everything the publisher still keeps before the first
live batch, so a router that starts late can rebuild its view.
"""

from __future__ import annotations

import argparse

import msgpack
import zmq

END_SEQ = -1
REPLAY_TIMEOUT_MS = 5_000


def describe(event: dict) -> str:
    kind = event["type"]
    if kind == "BlockStored":
        parent = event["parent_block_hash"]
        return (f"stored {[f'{h:016x}' for h in event['block_hashes']]} "
                f"after {'the root' if parent is None else f'{parent:016x}'} "
                f"on {event['medium']}, "
                f"{event['block_size']} tokens/block, {len(event['token_ids'])} token ids")
    if kind == "BlockRemoved":
        return (f"removed {[f'{h:016x}' for h in event['block_hashes']]} "
                f"from {event['medium']}")
    return kind  # AllBlocksCleared


class Subscriber:
    def __init__(self, ctx: zmq.Context, endpoint: str, replay_endpoint: str | None,
                 topic: str) -> None:
        self.ctx = ctx
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.next_seq: int | None = None  # the seq expected next; None before the first

    def handle(self, topic: bytes, seq: int, payload: bytes) -> None:
        ts, events, rank = msgpack.unpackb(payload)
        print(f"seq {seq} topic {topic.decode()!r} ts {ts:.3f} rank {rank}")
        for event in events:
            print(f"  {describe(event)}")
        self.next_seq = seq + 1

    def replay(self, start: int, stop: int | None) -> None:
        """Asks for batches start..stop-1 (stop None: all kept) and handles them."""
        if self.replay_endpoint is None:
            print(f"missed batches {start}..{stop - 1}: no replay endpoint")
            return
        # A DEALER per request: an answer that times out cannot turn up in
        # the next one's place.
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        try:
            while True:
                if not dealer.poll(REPLAY_TIMEOUT_MS):
                    print(f"replay from {start}: no answer in {REPLAY_TIMEOUT_MS} ms")
                    return
                _, topic, seq_bytes, payload = dealer.recv_multipart()
                seq = int.from_bytes(seq_bytes, "big", signed=True)
                if seq == END_SEQ:
                    break
                if seq < start or (stop is not None and seq >= stop):
                    continue  # newer ones come on the PUB socket
                if seq > start:
                    print(f"batches {start}..{seq - 1} are no longer kept for replay")
                self.handle(topic, seq, payload)
                start = seq + 1
        finally:
            dealer.close()
        if stop is not None and start < stop:
            print(f"batches {start}..{stop - 1} are no longer kept for replay")

    def on_message(self, topic: bytes, seq: int, payload: bytes) -> None:
        if self.next_seq is not None and seq > self.next_seq:
            print(f"gap: expected seq {self.next_seq}, got {seq}; asking for replay")
            self.replay(self.next_seq, seq)
        if self.next_seq is not None and seq < self.next_seq:
            return  # already handled (replayed)
        self.handle(topic, seq, payload)

    def run(self, history: bool) -> None:
        first = True
        while True:
            topic, seq_bytes, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            if first and history:
                self.replay(0, seq)  # everything still kept before the first live batch
            first = False
            self.on_message(topic, seq, payload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5557",
                        help="the publisher's PUB endpoint")
    parser.add_argument("--replay-endpoint", default=None,
                        help="its ROUTER endpoint for replay (none: gaps are only reported)")
    parser.add_argument("--topic", default="", help="topic prefix to subscribe to")
    parser.add_argument("--history", action="store_true",
                        help="first replay what the publisher keeps from seq 0")
    args = parser.parse_args()
    ctx = zmq.Context()
    try:
        Subscriber(ctx, args.endpoint, args.replay_endpoint, args.topic).run(args.history)
    except KeyboardInterrupt:
        pass
    finally:
        ctx.destroy(linger=0)


if __name__ == "__main__":
    main()

"""Recorded traffic turned into token ids, deterministically.

Both traces name a request's prompt as a list of block ids, prefix-chained (an
id implies every id before it; see tests/data/README.md). A block id expands
to the same ``tokens_per_id`` seeded token ids wherever it appears, so prompts
that share a prefix of ids share that prefix of tokens, and vLLM and kvtier see
exactly the reuse the trace recorded. Each request then gets a short tail of
its own (the new question of a turn), so no two prompts are equal and the last
block always has something to compute.

- ``mooncake``: tests/data/mooncake_synthetic_trace.jsonl (512-token blocks,
  3,993 requests over 1,022 s). The trace mixes 2,211 sessions (a session is the
  requests that share a first block); most are a single request. The load keeps
  the sessions of at least ``min_session`` requests, in arrival order, so that a
  few hundred requests carry the trace's multi-turn reuse rather than its
  one-off prompts: whole sessions, every k-th in the order they start (so
  that first turns arrive over the whole recording), until the request cap. ``tokens_per_id`` 64 by default (a 512-token block becomes 64
  tokens: the prompts' shape at an eighth of the length).
- ``agent``: the kv-cache-tester coding-agent sessions, tests/data/kv-cache-tester/
  (64-token blocks; ids are local to a file, so each file's ids are scoped by
  its name). Contexts there reach 260,000 tokens; ``tokens_per_id`` 2 by default
  brings them under 8,192. Sessions start ``agent_stagger_s`` apart.

Arrival times are the trace's, multiplied by ``time_scale``; output lengths
are the trace's, capped at ``max_output``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
from dataclasses import dataclass
from typing import Dict, List, Optional

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data")


@dataclass
class Request:
    index: int  # position in the load, from 0
    arrival_s: float  # when it is sent, from the start of the run (open loop)
    prompt: List[int]  # token ids
    max_tokens: int
    session: str  # the conversation it belongs to (for prefix-affine routing)
    prefix_ids: int  # the trace's block ids behind its prompt


class Expander:
    """Block id -> its seeded tokens, the same every time (a small cache in front)."""

    def __init__(self, tokens_per_id: int, vocab: int, salt: str) -> None:
        self.tokens_per_id, self.vocab, self.salt = tokens_per_id, vocab, salt
        self._cache: Dict[str, List[int]] = {}

    def block(self, scope: str, block_id: int) -> List[int]:
        key = f"{scope}:{block_id}"
        got = self._cache.get(key)
        if got is None:
            seed = int.from_bytes(hashlib.blake2b(f"{self.salt}|{key}".encode(),
                                                  digest_size=8).digest(), "little")
            rng = random.Random(seed)
            # Ids 0..2 are the tokenizer's specials; never put them in a prompt.
            got = [rng.randrange(3, self.vocab) for _ in range(self.tokens_per_id)]
            self._cache[key] = got
        return got

    def prompt(self, scope: str, ids: List[int], tail_seed: int, tail: int,
               max_prompt: int) -> List[int]:
        keep = max(0, (max_prompt - tail) // self.tokens_per_id)
        tokens: List[int] = []
        for i in ids[:keep]:
            tokens.extend(self.block(scope, i))
        rng = random.Random(tail_seed * 7919 + 17)
        tokens.extend(rng.randrange(3, self.vocab) for _ in range(tail))
        return tokens


def mooncake(limit: Optional[int], time_scale: float, vocab: int, tokens_per_id: int = 64,
             min_session: int = 3, max_prompt: int = 8000, max_output: int = 32,
             tail: int = 16, path: Optional[str] = None) -> List[Request]:
    path = path or os.path.join(DATA, "mooncake_synthetic_trace.jsonl")
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    sessions: Dict[int, int] = {}
    for r in rows:
        sessions[r["hash_ids"][0]] = sessions.get(r["hash_ids"][0], 0) + 1
    # Whole sessions, spread evenly over the trace (every k-th in the order
    # they start), until `limit` requests: their first turns arrive over the
    # whole recording, not in one cold burst at its start.
    order: List[int] = []
    seen: set = set()
    for r in rows:
        first = r["hash_ids"][0]
        if sessions[first] >= min_session and first not in seen:
            seen.add(first)
            order.append(first)
    chosen: set = set()
    if limit is None:
        chosen = set(order)
    else:
        mean = sum(sessions[f] for f in order) / max(1, len(order))
        step = max(1.0, len(order) / max(1.0, limit / mean))
        count, j = 0, 0.0
        while int(j) < len(order) and count < limit:
            chosen.add(order[int(j)])
            count += sessions[order[int(j)]]
            j += step
    kept = [(i, r) for i, r in enumerate(rows) if r["hash_ids"][0] in chosen]
    if not kept:
        return []
    t0 = kept[0][1]["timestamp"]
    ex = Expander(tokens_per_id, vocab, "mooncake")
    return [Request(index=n, arrival_s=(r["timestamp"] - t0) / 1000.0 * time_scale,
                    prompt=ex.prompt("m", r["hash_ids"], i, tail, max_prompt),
                    max_tokens=max(1, min(max_output, int(r["output_length"]))),
                    session=f"m{r['hash_ids'][0]}", prefix_ids=len(r["hash_ids"]))
            for n, (i, r) in enumerate(kept)]


def agent(limit: Optional[int], time_scale: float, vocab: int, tokens_per_id: int = 2,
          max_prompt: int = 8000, max_output: int = 32, tail: int = 16,
          agent_stagger_s: float = 30.0, directory: Optional[str] = None) -> List[Request]:
    directory = directory or os.path.join(DATA, "kv-cache-tester")
    ex = Expander(tokens_per_id, vocab, "agent")
    raw = []
    for k, path in enumerate(sorted(glob.glob(os.path.join(directory, "*.json")))):
        with open(path) as f:
            doc = json.load(f)
        scope = doc.get("id") or os.path.basename(path)

        def walk(node: dict, name: str) -> None:
            for r in node["requests"]:
                if "requests" in r:  # a sub-agent: its own requests, the parent's ids
                    walk(r, name + "/sub")
                else:
                    raw.append((k * agent_stagger_s + float(r["t"]), scope, name, r))

        walk(doc, scope)
    raw.sort(key=lambda x: x[0])
    if limit is not None:
        raw = raw[:limit]
    return [Request(index=n, arrival_s=t * time_scale,
                    prompt=ex.prompt(scope, r["hash_ids"], n, tail, max_prompt),
                    max_tokens=max(1, min(max_output, int(r["out"]))), session=name,
                    prefix_ids=len(r["hash_ids"]))
            for n, (t, scope, name, r) in enumerate(raw)]


def load(name: str, limit: Optional[int], time_scale: float, vocab: int,
         **kw: object) -> List[Request]:
    if name == "mooncake":
        return mooncake(limit, time_scale, vocab, **kw)  # type: ignore[arg-type]
    if name == "agent":
        return agent(limit, time_scale, vocab, **kw)  # type: ignore[arg-type]
    raise ValueError(f"unknown trace {name!r}: mooncake or agent")


def working_set_tokens(reqs: List[Request], block: int) -> int:
    """Distinct full blocks of `block` tokens over all prompts, in tokens."""
    seen = set()
    for r in reqs:
        h = hashlib.blake2b(digest_size=16)
        for b in range(len(r.prompt) // block):
            h.update(repr(r.prompt[b * block:(b + 1) * block]).encode())
            seen.add(h.copy().digest())
    return len(seen) * block

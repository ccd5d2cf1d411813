"""kvtier.vllm driven through vLLM itself (its CPU build), against a real kvtierd.

Each engine is a real ``vllm.LLM`` in a process of its own (vllm_engine.py)
over a tiny Llama with seeded weights; prompts are token ids. The block size of
vLLM's CPU backend is 128 tokens, so a 600-token prefix is 4 kvtier blocks.
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
BLOCK = 128  # vLLM's block size on the CPU, and the connector's default kvtier block

_rng = random.Random(1)
PREFIX = [_rng.randrange(1, 1000) for _ in range(600)]
P1 = PREFIX + [5, 6, 7]
P2 = PREFIX + [8, 9, 10, 11]
OTHER = [_rng.randrange(1, 1000) for _ in range(400)] + [3, 4]
PROMPTS = {"P1": P1, "P2": P2, "OTHER": OTHER}


class Engine:
    """A vllm.LLM in a child process, one generate per command."""

    def __init__(self, model_dir: Path, log_path: Path, **engine: Any) -> None:
        self.log_path = log_path
        self.lines: List[str] = []
        self._replies: "queue.Queue[str]" = queue.Queue()
        reply_r, reply_w = os.pipe()  # the answers; stdout and stderr carry vLLM's logs
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "vllm_engine.py"), str(model_dir), json.dumps(engine),
             str(reply_w)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            pass_fds=(reply_w,))
        os.close(reply_w)
        threading.Thread(target=self._read_log, daemon=True).start()
        threading.Thread(target=self._read_replies, args=(os.fdopen(reply_r),),
                         daemon=True).start()
        if self._reply(timeout=300) != "ready":
            pytest.fail(f"vLLM did not start:\n{self.log()}")

    def _read_log(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a") as log:
            for line in self.proc.stdout:
                self.lines.append(line)
                log.write(line)
                log.flush()

    def _read_replies(self, replies: Any) -> None:
        with replies:
            for line in replies:
                self._replies.put(line.strip())
        self._replies.put("")  # the process ended

    def _reply(self, timeout: float = 120) -> str:
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no answer from vLLM in {timeout} s:\n{self.log()}")
        if not reply:
            pytest.fail(f"vLLM exited ({self.proc.poll()}):\n{self.log()}")
        return reply

    def _ask(self, cmd: Dict[str, Any], timeout: float = 120) -> Dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._reply(timeout))

    def generate(self, prompt: List[int], max_tokens: int = 8) -> Dict[str, Any]:
        return self._ask({"prompt": prompt, "max_tokens": max_tokens})

    def wait_committed(self, socket: str, blocks: int) -> int:
        """Waits until kvtierd has committed `blocks` blocks (the asynchronous stores);
        returns how many it has."""
        got = self._ask({"wait_committed": blocks, "socket": socket})["committed"]
        assert got >= blocks, f"kvtierd committed {got} blocks, expected {blocks}"
        return int(got)

    def reset_prefix_cache(self) -> None:
        assert self._ask({"reset_prefix_cache": True})["reset"]

    def log(self) -> str:
        return "".join(self.lines[-200:])

    def logged(self, text: str, timeout: float = 30) -> bool:
        """Whether vLLM's log shows `text` within `timeout` s (the log has a pipe of
        its own, so a line written before a reply may be read after it)."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                return any(text in line for line in self.lines)
            time.sleep(0.05)
        return True

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def connector(socket: str, **extra: Any) -> Dict[str, Any]:
    return {"kv_transfer_config": {
        "kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
        "kv_role": "kv_both", "kv_connector_extra_config": {"socket": socket, **extra}}}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm") / "tiny-llama"


@pytest.fixture(scope="module")
def baseline(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """Greedy outputs without the connector (vLLM's own prefix cache off)."""
    log = tmp_path_factory.mktemp("baseline") / "vllm.log"
    engine = Engine(model_dir, log, enable_prefix_caching=False)
    try:
        return {name: engine.generate(p) for name, p in PROMPTS.items()}
    finally:
        engine.close()


def assert_same_output(got: Dict[str, Any], want: Dict[str, Any]) -> None:
    assert got["tokens"] == want["tokens"]
    # The same model over the same K and V: a prefill of the suffix alone sums in
    # another order than a full prefill, so allow float32 rounding, no more (one
    # changed prefix token moves these log-probabilities by tenths).
    assert got["logprobs"] == pytest.approx(want["logprobs"], abs=2e-3)


def test_same_greedy_output_and_the_prefix_is_loaded(start_daemon, model_dir, baseline,
                                                     tmp_path) -> None:
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", enable_prefix_caching=False,
                    **connector(d.socket))
    try:
        first = engine.generate(P1)
        assert first["cached"] == 0  # nothing in kvtierd yet
        assert_same_output(first, baseline["P1"])
        # Stored when it finished: 603 prompt + 7 output tokens computed = 4 full blocks.
        engine.wait_committed(d.socket, 4)
        second = engine.generate(P2)
        # vLLM's own prefix cache is off: the 512 tokens came from kvtierd, and its
        # prefill computed only the other 92.
        assert second["cached"] == 4 * BLOCK
        assert_same_output(second, baseline["P2"])
        # A prompt with nothing in common: no hit, the same output.
        other = engine.generate(OTHER)
        assert other["cached"] == 0
        assert_same_output(other, baseline["OTHER"])
    finally:
        engine.close()
    assert engine.logged("attached to kvtierd"), engine.log()
    # vLLM asked for each layer before its attention: the loads went layer by layer.
    assert "without waiting for their load" not in engine.log()


def test_reuse_across_vllm_processes_and_failed_loads_recompute(start_daemon, model_dir,
                                                                baseline, tmp_path) -> None:
    d = start_daemon("--device", "off")
    first = Engine(model_dir, tmp_path / "first.log", **connector(d.socket))
    try:
        assert first.generate(P1)["cached"] == 0
        first.wait_committed(d.socket, 4)
    finally:
        first.close()
    # A new process, vLLM's prefix cache on (its default) but empty: the hit is kvtierd's.
    second = Engine(model_dir, tmp_path / "second.log", **connector(d.socket))
    try:
        out = second.generate(P2)
        assert out["cached"] == 4 * BLOCK
        assert_same_output(out, baseline["P2"])
    finally:
        second.close()
    # A third that loads from the device tier, which this kvtierd does not have: the
    # lookup finds the 4 blocks, every load fails, and vLLM recomputes them.
    third = Engine(model_dir, tmp_path / "third.log", **connector(d.socket, tier="device"))
    try:
        out = third.generate(P2)
        assert_same_output(out, baseline["P2"])
        assert third.logged("4 of 4 blocks not loaded from kvtierd; vLLM recomputes them"), \
            third.log()
    finally:
        third.close()


def test_kvtier_blocks_of_two_vllm_blocks_after_a_local_hit(start_daemon, model_dir, baseline,
                                                           tmp_path) -> None:
    """block_tokens 256: each kvtier block fills two vLLM blocks; a vLLM block that
    vLLM's own prefix cache holds already is left as it is."""
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", **connector(d.socket, block_tokens=256))
    try:
        assert engine.generate(P1)["cached"] == 0
        engine.wait_committed(d.socket, 2)  # 610 tokens computed: 2 blocks of 256
        engine.reset_prefix_cache()
        # A prompt sharing one vLLM block (128 tokens) with P1, and no kvtier block.
        q = PREFIX[:128] + OTHER[:200]
        assert engine.generate(q)["cached"] == 0
        # P2: vLLM has its first 128 tokens, kvtierd the first 512; 384 are loaded,
        # from the middle of the first kvtier block on.
        out = engine.generate(P2)
        assert out["cached"] == 4 * BLOCK
        assert_same_output(out, baseline["P2"])
    finally:
        engine.close()


def test_daemon_stopped_while_vllm_runs(start_daemon, model_dir, baseline, tmp_path) -> None:
    d = start_daemon()
    engine = Engine(model_dir, tmp_path / "vllm.log", enable_prefix_caching=False,
                    **connector(d.socket, retry_interval_s=0.2, timeout_ms=2000))
    try:
        assert engine.generate(P1)["cached"] == 0
        engine.wait_committed(d.socket, 4)
        d.stop()
        # kvtierd is gone: the request completes, recomputed, and the log says why.
        out = engine.generate(P2)
        assert out["cached"] == 0
        assert_same_output(out, baseline["P2"])
        assert engine.logged("requests recompute their prefixes until it is back"), engine.log()
        # It comes back (empty: no SSD here): the next request stores, hits resume.
        d.start()
        time.sleep(0.3)  # past the connector's retry interval
        assert engine.generate(P1)["cached"] == 0
        engine.wait_committed(d.socket, 4)
        out = engine.generate(P2)
        assert out["cached"] == 4 * BLOCK
        assert_same_output(out, baseline["P2"])
        assert engine.logged("prefix hits resume"), engine.log()
    finally:
        engine.close()


def test_bad_settings_are_refused_clearly(start_daemon, model_dir, tmp_path) -> None:
    from kvtier.vllm import Settings

    with pytest.raises(ValueError, match="unknown setting"):
        Settings.from_extra_config({"sokcet": "/x"})
    with pytest.raises(ValueError, match="tier must be"):
        Settings.from_extra_config({"tier": "ssd"})
    with pytest.raises(ValueError, match="retention_priority"):
        Settings.from_extra_config({"retention_priority": 101})
    s = Settings.from_extra_config({"socket": "/s", "salt": "t", "tier": "device",
                                    "retention_priority": 80, "block_tokens": 256})
    assert (s.socket, s.salt, s.retention_priority, s.block_tokens) == ("/s", "t", 80, 256)

"""The driver's side of a vLLM engine: starts vllm_engine.py in a process of
its own and talks to it, one generate per command.

    engine = Engine(model_dir, log_path, enable_prefix_caching=False,
                    **connector(socket))
    engine.generate(prompt)   # {"tokens", "logprobs", "cached", "elapsed_s"}
    engine.close()

Used by test_vllm.py and bench/python/bench_vllm.py; vllm_engine.py is the
other side, the script that runs inside the engine's process. The keyword
arguments are vllm.LLM's engine arguments, plus ``model_config`` (the Llama
config to build, vllm_engine.TINY by default).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

HERE = Path(__file__).resolve().parent


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


def outputs_without_connector(model_dir: Path, log_path: Path, prompts: Dict[str, List[int]],
                              **engine: Any) -> Tuple[Dict[str, Dict[str, Any]], Engine]:
    """The prompts' greedy outputs from an engine without the connector (the baseline
    the tests compare with), and that engine, closed, its log kept."""
    e = Engine(model_dir, log_path, **engine)
    try:
        return {name: e.generate(p) for name, p in prompts.items()}, e
    finally:
        e.close()


def connector(socket: str, **extra: Any) -> Dict[str, Any]:
    """The engine arguments that plug kvtier.vllm in, talking to kvtierd at `socket`;
    `extra` goes to its kv_connector_extra_config (kvtier.vllm.Settings)."""
    return {"kv_transfer_config": {
        "kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
        "kv_role": "kv_both", "kv_connector_extra_config": {"socket": socket, **extra}}}

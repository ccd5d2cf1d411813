"""The real servers of a serving run, started and stopped by the harness:
kvtierd from the build, and ``vllm serve`` as the README writes it.

    with Kvtierd(binary, work_dir, host="1GiB") as d:          # d.socket, d.metrics_url
        with VllmServer(model_dir, port, kv_blocks=256,
                        connector=kvtier_connector(d.socket)) as v:  # v.url
            ...

vLLM's CPU build is configured by environment variables: its KV cache space
(VLLM_CPU_KVCACHE_SPACE) and the cores its workers compute on
(VLLM_CPU_OMP_THREADS_BIND). ``kv_blocks`` sets the KV cache to exactly that
many blocks (--num-gpu-blocks-override), so that the trace's working set is a
known multiple of it.
"""

from __future__ import annotations

import json
import os
import signal
import socket as socketlib
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def find_kvtierd() -> Path:
    """kvtierd of the build: $KVTIERD, else build-release/, else build-test/."""
    if os.environ.get("KVTIERD"):
        return Path(os.environ["KVTIERD"])
    for build in ("build-release", "build-test", "build"):
        p = ROOT / build / "daemon" / "kvtierd"
        if p.exists():
            return p
    raise FileNotFoundError("no kvtierd: build it (scripts/run.sh builds build-release/) or "
                            "set KVTIERD")


class Kvtierd:
    """kvtierd with a host tier, optionally an SSD tier, and a metrics endpoint."""

    def __init__(self, work_dir: Path, host: str = "1GiB", ssd: Optional[str] = None,
                 binary: Optional[Path] = None, extra: Optional[List[str]] = None,
                 log_name: str = "kvtierd.log") -> None:
        self.binary = binary or find_kvtierd()
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.work_dir / "kvtierd.sock")
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.args = [str(self.binary), "--socket", self.socket, "--host-capacity", host,
                     "--device", "off", "--metrics-address", f"127.0.0.1:{self.metrics_port}",
                     "--no-reserve-memory"]
        if ssd:
            self.args += ["--ssd-dir", str(self.work_dir / "ssd"), "--ssd-capacity", ssd,
                          "--ssd-prepare", "sparse"]
        else:
            self.args += ["--ssd-dir", ""]
        self.args += extra or []
        self.log_path = self.work_dir / log_name
        self.proc: Optional[subprocess.Popen] = None
        self.restarts = 0

    def start(self) -> "Kvtierd":
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvtierd exited ({self.proc.returncode}); see "
                                   f"{self.log_path}:\n{self.log_path.read_text()[-3000:]}")
            try:
                http_get(self.metrics_url, timeout=1)
                if os.path.exists(self.socket):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"kvtierd did not come up in 60 s; see {self.log_path}")

    def kill9_and_restart(self) -> float:
        """SIGKILL, then the same command again (a warm restart from the SSD).
        Returns the seconds from the kill to serving again."""
        assert self.proc is not None
        t = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.restarts += 1
        self.start()
        return time.monotonic() - t

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> "Kvtierd":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def kvtier_connector(socket: str, **extra: Any) -> Dict[str, Any]:
    """The --kv-transfer-config of the README: kvtier.vllm talking to kvtierd at `socket`."""
    return {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_connector_extra_config": {"socket": socket, **extra}}


def offloading_connector(cpu_bytes: int, block_size: int = 128) -> Dict[str, Any]:
    """vLLM's own CPU offloading (OffloadingConnector)."""
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": cpu_bytes,
                                          "block_size": block_size}}


class VllmServer:
    """``vllm serve MODEL`` (the venv's vllm command, as the README has it)."""

    def __init__(self, model_dir: Path, log_path: Path, kv_blocks: Optional[int] = None,
                 connector: Optional[Dict[str, Any]] = None, prefix_caching: bool = True,
                 cores: Optional[str] = None, max_model_len: int = 8192,
                 extra: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
                 port: Optional[int] = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = str(model_dir)
        self.log_path = Path(log_path)
        self.args = [str(VENV_BIN / "vllm"), "serve", self.model, "--port", str(self.port),
                     "--max-model-len", str(max_model_len), "--dtype", "float32", "--seed", "0",
                     "--enable-prompt-tokens-details", "--max-logprobs", "2"]
        if not prefix_caching:
            self.args.append("--no-enable-prefix-caching")
        if kv_blocks:
            self.args += ["--num-gpu-blocks-override", str(kv_blocks)]
        if connector:
            self.args += ["--kv-transfer-config", json.dumps(connector)]
        self.args += extra or []
        self.env = dict(os.environ)
        self.env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                         "VLLM_CPU_KVCACHE_SPACE": self.env.get("VLLM_CPU_KVCACHE_SPACE", "4"),
                         # vLLM keeps one core for its scheduler; with a connector it asks for
                         # one more, which 2 cores cannot give: the same one for every server.
                         "VLLM_CPU_NUM_OF_RESERVED_CPU": "1",
                         "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
        if cores is not None:
            self.env["VLLM_CPU_OMP_THREADS_BIND"] = cores
        self.env.update(env or {})
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 600) -> "VllmServer":
        log = open(self.log_path, "a")
        log.write("$ " + " ".join(self.args) + "\n")
        log.flush()
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.proc.returncode}); the end of "
                                   f"{self.log_path}:\n{self.log_tail()}")
            try:
                http_get(self.url + "/health", timeout=1)
                return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vllm serve did not answer /health in {timeout} s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text()[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:  # the server and its engine processes
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # engine processes left behind
        except (ProcessLookupError, PermissionError):
            pass
        self.proc = None

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

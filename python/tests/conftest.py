"""Fixtures: the real kvtierd, started per test on a socket of its own.

The daemon and CLI come from a build tree of the project: $KVTIER_BUILD_DIR
(scripts/test.sh points it at its build), else build-test/ beside python/.
A missing binary fails the tests; nothing here is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KVTIER_BUILD_DIR", REPO / "build-test"))
KVTIERD = BUILD / "daemon" / "kvtierd"
KVTIER_CLI = BUILD / "cli" / "kvtier"

# Tests build tiny models from a config; nothing may come from a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


class Daemon:
    """A kvtierd process on `socket`, with a small test configuration."""

    def __init__(self, workdir: Path, args: List[str], name: str = "kvtierd") -> None:
        if not KVTIERD.exists():
            pytest.fail(f"no kvtierd at {KVTIERD}: build the project (scripts/test.sh) or set "
                        "KVTIER_BUILD_DIR to a build tree")
        self.workdir = workdir
        self.socket = str(workdir / f"{name}.sock")
        self.log_path = workdir / f"{name}.log"
        self.args = args
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "Daemon":
        cmd = [str(KVTIERD), "--socket", self.socket, "--metrics-address", "",
               "--no-reserve-memory", "--busy-poll-us", "0"] + self.args
        self._log = open(self.log_path, "ab")
        seen = len(self.log())
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"kvtierd exited with {self.proc.returncode}:\n{self.log()}")
            if "listening on" in self.log()[seen:]:
                return self
            time.sleep(0.02)
        pytest.fail(f"kvtierd did not start listening in 30 s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._log.close()
        return rc


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator:
    """start_daemon(*args) starts a kvtierd (64 MiB host tier, no SSD unless asked)."""
    daemons: List[Daemon] = []

    def start(*args: str, name: str = "kvtierd") -> Daemon:
        defaults = {"--host-capacity": "64MiB", "--host-slab": "1MiB", "--ssd-dir": ""}
        given = [a for a in args if a.startswith("--")]
        extra = [x for k, v in defaults.items() if k not in given for x in (k, v)]
        d = Daemon(tmp_path, extra + list(args), name).start()
        daemons.append(d)
        return d

    yield start
    for d in daemons:
        d.stop()


@pytest.fixture
def daemon(start_daemon) -> Daemon:
    return start_daemon()


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a new Python process (this interpreter), args as sys.argv[1:]."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))

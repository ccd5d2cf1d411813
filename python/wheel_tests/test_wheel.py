"""The wheel scripts/build-wheel.sh builds, installed into a virtual environment of
its own with nothing else but what these tests import (scripts/test.sh, stage
"wheel"): its kvtierd and kvtier commands, what they load, and socket="auto".

Run from that environment with no build tree on PATH or LD_LIBRARY_PATH:

    ENV/bin/python -m pytest python/wheel_tests
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

import kvtier
from kvtier import _auto, _launch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VENV = Path(sys.prefix)

# glibc's libraries and the kernel's vDSO: what the wheel may take from the machine.
SYSTEM_LIBS = ("linux-vdso.so", "ld-linux-x86-64.so", "libc.so", "libm.so", "libpthread.so",
               "libdl.so", "librt.so", "libresolv.so", "libutil.so")


def test_the_environment_has_the_wheel_and_no_build_tree() -> None:
    assert Path(kvtier.__file__).resolve().is_relative_to(VENV.resolve()), kvtier.__file__
    for var in ("PATH", "LD_LIBRARY_PATH"):
        for entry in filter(None, os.environ.get(var, "").split(":")):
            where = Path(entry).resolve()
            assert where.is_relative_to(VENV.resolve()) or not where.is_relative_to(REPO), \
                f"{var} has {entry}, in the checkout"
    for name in ("kvtierd", "kvtier"):
        found = shutil.which(name)
        assert found is not None and Path(found).parent == VENV / "bin", (name, found)
        assert _launch.executable(name).is_relative_to(Path(kvtier.__file__).parent)


@pytest.mark.parametrize("name", ["kvtierd", "kvtier"])
def test_the_executables_load_nothing_from_outside_the_wheel_but_glibc(name: str) -> None:
    exe = _launch.executable(name)
    bundle = exe.parent
    files = [exe, *sorted((bundle / "lib").glob("*.so*"))]
    assert len(files) > 10  # RocksDB, prometheus-cpp, hiredis, ZeroMQ, libstdc++, ...
    for f in files:
        out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, check=True,
                             env={"PATH": os.environ["PATH"]}).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "=>":
                lib, path = parts[0], parts[2]
                if lib.startswith(SYSTEM_LIBS):
                    continue
                assert path != "not" and Path(path).resolve().is_relative_to(bundle.resolve()), \
                    f"{f.name} loads {lib} from {path}"
        # The CUDA runtime is linked in statically: nothing of CUDA is loaded.
        assert "libcuda" not in out, f"{f.name}: {out}"


def test_kvtierd_from_the_wheel_serves_the_cli_round_trip(tmp_path: Path) -> None:
    sock = str(tmp_path / "kvtierd.sock")
    log = open(tmp_path / "kvtierd.log", "w")
    d = subprocess.Popen(["kvtierd", "--socket", sock, "--host-capacity", "64MiB",
                          "--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "64MiB",
                          "--metrics-address", ""], stderr=log, stdout=log)
    try:
        deadline = time.monotonic() + 60
        while not _auto.listening(sock):
            assert d.poll() is None and time.monotonic() < deadline, (
                tmp_path / "kvtierd.log").read_text()
            time.sleep(0.05)

        def cli(*args: str) -> str:
            return subprocess.run(["kvtier", *args, "--socket", sock], capture_output=True,
                                  text=True, check=True).stdout

        assert "64 written" in cli("put", "--random", "64")
        assert "64/64 blocks hit" in cli("get", "--random", "64", "--verify")
        assert "64 verified, 0 wrong" in cli("get", "--random", "64", "--verify")
        stats = json.loads(cli("stats", "--json"))
        assert stats["pid"] == d.pid and stats["version"] == kvtier.__version__
        # Built with CUDA (statically): it looks for a GPU, and starts without one.
        assert "gpu: " in (tmp_path / "kvtierd.log").read_text()
    finally:
        d.send_signal(signal.SIGTERM)
        assert d.wait(timeout=60) == 0, (tmp_path / "kvtierd.log").read_text()
    assert "stopped" in (tmp_path / "kvtierd.log").read_text()


@pytest.fixture
def auto_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dict[str, str]]:
    """socket="auto" confined to `tmp_path`: no operator's daemon (KVTIER_SOCKET names
    a socket nobody listens on), the on-demand daemon's socket and log there. Kills a
    daemon left behind."""
    auto_dir = tmp_path / "auto"
    env = {"KVTIER_SOCKET": str(tmp_path / "nobody.sock"),
           "KVTIER_AUTO_SOCKET": str(auto_dir / "kvtierd.sock"),
           "KVTIER_AUTO_HOST_MEMORY": "256MiB", "KVTIER_AUTO_IDLE_EXIT_S": "4"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
    pid_file = auto_dir / "kvtierd.log"
    if pid_file.exists():
        for line in pid_file.read_text().splitlines():
            if "starting, pid " in line:
                try:
                    os.kill(int(line.rsplit(" ", 1)[1]), signal.SIGKILL)
                except ProcessLookupError:
                    pass


WORKER = textwrap.dedent("""
    import json, logging, os, sys, time
    import kvtier

    said = []  # what kvtier logged: the worker that starts the daemon says so

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    logging.getLogger("kvtier").addHandler(Keep())
    go = sys.argv[1]
    while not os.path.exists(go):  # all four start at once
        time.sleep(0.001)
    c = kvtier.Client("wheel-test", kvtier.Layout(2, 2, 64, "fp16", 16), socket="auto")
    print(json.dumps({"socket": c.socket, "pid": int(c.stats()["pid"]), "said": said}),
          flush=True)
    for line in sys.stdin:  # each line: one more stats call; EOF: done
        print(json.dumps({"pid": int(c.stats()["pid"])}), flush=True)
    c.close()
""")


def _daemon_starts(log: Path) -> List[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in log.read_text().splitlines()
            if "starting, pid " in line]


def test_four_workers_starting_at_once_elect_one_daemon_which_outlives_them_then_idles_out(
        tmp_path: Path, auto_env: Dict[str, str]) -> None:
    go = tmp_path / "go"
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(go)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(4)]
    time.sleep(1.0)  # let every interpreter reach the start line
    go.touch()
    attached = []
    for w in workers:
        assert w.stdout is not None
        line = w.stdout.readline()
        assert line, w.communicate()[1]
        attached.append(json.loads(line))
    sock = auto_env["KVTIER_AUTO_SOCKET"]
    assert {a["socket"] for a in attached} == {sock}
    pids = {a["pid"] for a in attached}
    assert len(pids) == 1, attached
    pid = pids.pop()
    log = Path(sock).parent / "kvtierd.log"
    assert _daemon_starts(log) == [pid], log.read_text()
    # A session of its own: no signal to a worker's process group reaches it.
    assert os.getsid(pid) not in (os.getsid(0), *(os.getsid(w.pid) for w in workers))
    # Exactly one worker started it, and said where it listens and how to stop it.
    starters = [i for i, a in enumerate(attached) if any("started kvtierd" in m for m in a["said"])]
    assert len(starters) == 1, attached
    said = next(m for m in attached[starters[0]]["said"] if "started kvtierd" in m)
    assert sock in said and f"kill {pid}" in said and "256 MiB" in said, said

    def finish(w: subprocess.Popen) -> None:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err

    # The starter goes first: the daemon stays and serves the other three.
    finish(workers[starters[0]])
    others = [w for i, w in enumerate(workers) if i != starters[0]]
    for w in others:
        assert w.stdin is not None and w.stdout is not None
        w.stdin.write("stats\n")
        w.stdin.flush()
        assert json.loads(w.stdout.readline())["pid"] == pid
    for w in others:
        finish(w)

    # No worker left: it exits after its idle time (4 s here), removing its socket.
    deadline = time.monotonic() + 60
    while _auto._alive(pid):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    assert not os.path.exists(sock)
    assert "(server.idle_exit_s): stopping" in log.read_text()
    assert log.read_text().splitlines()[-1].endswith("stopped")


def test_an_explicit_socket_that_does_not_answer_is_never_auto(
        tmp_path: Path, auto_env: Dict[str, str]) -> None:
    layout = kvtier.Layout(2, 2, 64, "fp16", 16)
    with pytest.raises(kvtier.UnavailableError):
        kvtier.Client("m", layout, socket=str(tmp_path / "x.sock"))
    with pytest.raises(kvtier.UnavailableError):  # $KVTIER_SOCKET is explicit too
        kvtier.Client("m", layout)
    assert not Path(auto_env["KVTIER_AUTO_SOCKET"]).parent.exists()


def test_vllm_with_socket_auto_twice_the_second_process_hits_what_the_first_stored(
        tmp_path: Path, auto_env: Dict[str, str]) -> None:
    sys.path.insert(0, str(REPO / "python" / "tests"))
    from vllm_driver import Engine, connector

    block = 128  # vLLM's block size on the CPU, and the connector's kvtier block
    prompt = [(i * 7919) % 997 + 1 for i in range(4 * block + 3)]
    sock = auto_env["KVTIER_AUTO_SOCKET"]
    args = connector("auto", daemon_host_memory="256MiB", daemon_idle_exit_s=120)
    first = Engine(tmp_path / "model", tmp_path / "vllm-1.log", **args)
    try:
        a = first.generate(prompt)
        assert a["cached"] == 0
        first.wait_committed(sock, 4)
        assert first.logged("started kvtierd"), first.log()
    finally:
        first.close()
    log = Path(sock).parent / "kvtierd.log"
    [pid] = _daemon_starts(log)
    assert _auto._alive(pid), log.read_text()  # outlived the vLLM that started it

    second = Engine(tmp_path / "model", tmp_path / "vllm-2.log", **args)
    try:
        b = second.generate(prompt)
    finally:
        second.close()
    # A new process has an empty prefix cache of its own: these came from kvtierd.
    assert b["cached"] == 4 * block, b
    assert b["tokens"] == a["tokens"]
    assert _daemon_starts(log) == [pid], log.read_text()  # attached, started none
    os.kill(pid, signal.SIGTERM)

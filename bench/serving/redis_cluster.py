"""A real Redis Cluster for kvtierd's remote tier in a serving run: Debian's
redis-server on loopback ports, joined with ``redis-cli --cluster create``,
masters with one replica each so that a killed master is failed over.

    with RedisCluster(work_dir, masters=3) as rc:   # rc.seeds: "127.0.0.1:p1,..."
        ...
        rc.kill_a_master()                          # SIGKILL; its replica takes over

No persistence: a killed node's data is gone; what its replica had received
survives. The nodes' logs are in ``work_dir``.
"""

from __future__ import annotations

import os
import signal
import socket as socketlib
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List


def _free_port_pair() -> int:
    """A port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        with socketlib.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        if p + 10000 > 65535:
            continue
        try:
            with socketlib.socket() as s:
                s.bind(("127.0.0.1", p + 10000))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair for a Redis node")


class RedisCluster:
    def __init__(self, work_dir: Path, masters: int = 3, replicas: int = 1,
                 node_timeout_ms: int = 1000) -> None:
        self.dir = Path(work_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.masters, self.replicas = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self.ports: List[int] = []
        self.procs: Dict[int, subprocess.Popen] = {}
        self.killed: List[int] = []

    @property
    def seeds(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def cli(self, port: int, *args: str, timeout: float = 10) -> str:
        r = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                           text=True, timeout=timeout)
        return r.stdout

    def _start_node(self, port: int) -> None:
        log = open(self.dir / f"redis-{port}.log", "a")
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--protected-mode", "no",
             "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
             "--cluster-node-timeout", str(self.node_timeout_ms),
             "--repl-diskless-sync-delay", "0"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def start(self) -> "RedisCluster":
        n = self.masters * (1 + self.replicas)
        for _ in range(n):
            p = _free_port_pair()
            while p in self.ports:
                p = _free_port_pair()
            self.ports.append(p)
            self._start_node(p)
        for p in self.ports:
            deadline = time.monotonic() + 20
            while "PONG" not in self.cli(p, "PING"):
                if self.procs[p].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {p} did not start; see "
                                       f"{self.dir}/redis-{p}.log")
                time.sleep(0.05)
        r = subprocess.run(["redis-cli", "--cluster", "create",
                            *[f"127.0.0.1:{p}" for p in self.ports],
                            "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{r.stdout}{r.stderr}")
        self.wait_healthy()
        return self

    def live(self) -> List[int]:
        return [p for p in self.ports if p not in self.killed]

    def wait_healthy(self, seconds: float = 30) -> float:
        """Until every live node says cluster_state:ok and every live replica is
        in sync; returns the seconds it took."""
        t = time.monotonic()
        while time.monotonic() - t < seconds:
            ok = all("cluster_state:ok" in self.cli(p, "CLUSTER", "INFO") for p in self.live())
            if ok:
                for p in self.live():
                    info = self.cli(p, "INFO", "replication")
                    if "role:slave" in info and "master_link_status:up" not in info:
                        ok = False
            if ok:
                return time.monotonic() - t
            time.sleep(0.1)
        raise RuntimeError(f"the Redis Cluster did not become healthy in {seconds} s")

    def master_ports(self) -> List[int]:
        out = []
        for p in self.live():
            if "role:master" in self.cli(p, "INFO", "replication"):
                out.append(p)
        return out

    def kill_a_master(self) -> Dict[str, Any]:
        """SIGKILLs the master holding the most keys, then waits for its replica
        to be promoted. Returns what happened (port, keys lost with it, seconds
        until the cluster was healthy again)."""
        sizes = {p: int((self.cli(p, "DBSIZE").strip() or "0")) for p in self.master_ports()}
        port = max(sizes, key=lambda p: sizes[p])
        t = time.monotonic()
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait()
        self.killed.append(port)
        healthy_after = self.wait_healthy(60)
        return {"port": port, "keys_on_it": sizes[port], "healthy_after_s": healthy_after,
                "took_s": time.monotonic() - t}

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> "RedisCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def write_secret(path: Path) -> Path:
    """A deployment secret for --remote-secret-file: 64 hex digits, mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path


def remote_args(cluster: RedisCluster, work_dir: Path, write_through: bool = False,
                ) -> List[str]:
    """kvtierd's flags for a remote tier on `cluster`."""
    args = ["--remote-seeds", cluster.seeds, "--remote-secret-file",
            str(write_secret(Path(work_dir) / "deployment.secret"))]
    if write_through:
        args.append("--remote-write-through")
    return args


#!/usr/bin/env python3
"""Runs kvtier's side-by-side benchmarks and writes their tables.

    bench/report.sh BUILD [--quick | --full] [--only a,b] [--out FILE] [--check]

Every figure is a ratio to a peer or a limit measured in the same run, the
median of at least three runs (or rounds), with the worst run beside it. The
tables go between `<!-- report:NAME -->` and `<!-- /report:NAME -->` in
docs/performance.md (and the summary in README.md), so the docs say what the
code does on the machine that ran the report; the header of each says when,
where, at which commit and what else ran. See bench/README.md, "The report".

Only the standard library: it runs with Debian's python3 before any venv.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"report: {msg}", file=sys.stderr, flush=True)


# ---- the machine ---------------------------------------------------------------


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def proc_cpu() -> dict[int, tuple[str, int]]:
    """pid -> (command, utime + stime jiffies) of every process."""
    out = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            s = (p / "stat").read_text()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        out[int(p.name)] = (comm, int(rest[11]) + int(rest[12]))
    return out


@dataclass
class Load:
    """What else used the CPUs over one second."""
    busy_cores: float
    others: list[str]

    def text(self) -> str:
        who = ", ".join(self.others) or "nothing over 10 % of a core"
        return f"{self.busy_cores:.1f} cores busy ({who})"


def measure_load(seconds: float = 1.0) -> Load:
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0 = cpu_times()
    p0 = proc_cpu()
    time.sleep(seconds)
    b1, t1 = cpu_times()
    p1 = proc_cpu()
    ncpu = os.cpu_count() or 1
    busy = (b1 - b0) / max(1, t1 - t0) * ncpu
    others = []
    me = os.getpid()
    for pid, (comm, j) in sorted(p1.items(), key=lambda kv: -(kv[1][1] - p0.get(kv[0], ("", kv[1][1]))[1])):
        used = (j - p0.get(pid, (comm, j))[1]) / hz / seconds
        if used >= 0.1 and pid != me:
            others.append(f"{comm} {used:.0%}")
    return Load(busy, others[:4])


def git(*args: str) -> str:
    """git's output in the checkout, or "" where there is no git or no checkout
    (a source tarball, a fresh machine without git)."""
    if shutil.which("git") is None:
        return ""
    r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def machine() -> dict[str, str]:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // (1024 * 1024)
    commit = git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout, or no git)"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": f"{os.cpu_count()} × {model}",
        "memory": f"{mem} GiB",
        "kernel": os.uname().release,
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
    }


@dataclass
class Placement:
    """Which CPUs the servers (kvtierd, Redis, the limit's peer) and the load
    generators run on, where the machine has two or more free ones."""
    server: list[str]
    load: list[str]
    note: str

    @staticmethod
    def choose(busy: int = 0) -> "Placement":
        """`busy`: CPUs that an unrelated busy process takes (BusyCore); the servers
        and load generators get CPUs of their own only where two are left."""
        cpus = sorted(os.sched_getaffinity(0))
        if busy > 0 and len(cpus) - busy < 2:
            return Placement([], [], f"not placed: {busy} of the {len(cpus)} CPUs kept busy by "
                             "an unrelated process, so the servers and load generators share "
                             "the rest with it as the scheduler places them")
        if len(cpus) < 2 or shutil.which("taskset") is None:
            return Placement([], [], f"not placed: {len(cpus)} CPU(s) to run on"
                             + ("" if shutil.which("taskset") else ", no taskset"))
        half = len(cpus) // 2
        srv, ld = cpus[half:], cpus[:half]
        return Placement(["taskset", "-c", ",".join(map(str, srv))],
                         ["taskset", "-c", ",".join(map(str, ld))],
                         f"servers on CPU {','.join(map(str, srv))}, load generators on CPU "
                         f"{','.join(map(str, ld))}")


class BusyCore:
    """An unrelated process that keeps one CPU busy for as long as it lives, not
    pinned, as an inference engine beside kvtierd would."""

    def __enter__(self) -> "BusyCore":
        self.proc = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


# ---- figures -------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


@dataclass
class Ratio:
    """Per-run ratios of one figure; printed as `median× (worst w×)`."""
    runs: list[float] = field(default_factory=list)
    higher_is_better: bool = True

    def worst(self) -> float:
        return (min if self.higher_is_better else max)(self.runs) if self.runs else float("nan")

    def text(self) -> str:
        if not self.runs:
            return "n/a"
        return f"**{med(self.runs):.2f}×** ({self.worst():.2f}×)"

    def meets(self, goal: float) -> bool:
        if not self.runs:
            return False
        w = self.worst()
        return w >= goal if self.higher_is_better else w <= goal


def goal_cell(r: Ratio, goal: float | None, sign: str = "≥") -> str:
    if goal is None:
        return "—"
    return f"{sign} {goal:g}× " + ("✓" if r.meets(goal) else "✗ (worst run)" if r.runs and
                                   (med(r.runs) >= goal if r.higher_is_better else
                                    med(r.runs) <= goal) else "✗")


def fmt(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


# ---- processes -----------------------------------------------------------------


class Servers:
    """kvtierd and redis-server on Unix sockets in a temporary directory."""

    def __init__(self, build: Path, place: Placement, redis: bool = True):
        self.dir = Path(tempfile.mkdtemp(prefix="kvtier-report-"))
        self.procs: list[subprocess.Popen] = []
        self.kvtierd = str(self.dir / "kvtierd.sock")
        self.redis = str(self.dir / "redis.sock")
        self.log = open(self.dir / "servers.log", "w")
        self.procs.append(subprocess.Popen(
            place.server + [str(build / "daemon" / "kvtierd"), "--socket", self.kvtierd,
                            "--host-capacity", "1GiB", "--ssd-dir", "", "--metrics-address", ""],
            stdout=self.log, stderr=self.log))
        if redis:
            self.procs.append(subprocess.Popen(
                place.server + ["redis-server", "--port", "0", "--unixsocket", self.redis,
                                "--save", "", "--appendonly", "no"],
                stdout=self.log, stderr=self.log))
        want = [self.kvtierd] + ([self.redis] if redis else [])
        for _ in range(200):
            if all(os.path.exists(p) for p in want):
                break
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.05)
        else:
            pass
        if not all(os.path.exists(p) for p in want):
            self.close()
            raise RuntimeError("kvtierd or redis-server did not start; see " + str(self.dir))

    def arena_pages(self) -> str:
        """What pages kvtierd's host arena got, from its start-up log."""
        self.log.flush()
        text = (self.dir / "servers.log").read_text(errors="replace")
        if "2 MiB huge pages" in text:
            return "2 MiB huge pages"
        pool = Path("/proc/sys/vm/nr_hugepages")
        size = pool.read_text().strip() if pool.exists() else "?"
        return f"4 KiB pages (no huge pages for it: vm.nr_hugepages = {size})"

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(cmd: list[str], **kw) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}… exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def redis_get(place: Placement, sock: str, clients: int, requests: int, size: int = 3) -> float:
    """redis-benchmark GET ops/s on `sock`."""
    out = run(place.load + ["redis-benchmark", "-s", sock, "-t", "set,get", "-c", str(clients),
                            "-n", str(requests), "-d", str(size), "--csv"])
    for line in out.splitlines():
        cells = [c.strip('"') for c in line.split('","')]
        if cells[0].strip('"') == "GET":
            return float(cells[1])
    raise RuntimeError("redis-benchmark printed no GET line")


# ---- sections ------------------------------------------------------------------


@dataclass
class Mode:
    quick: bool
    runs: int
    seconds: float

    @property
    def name(self) -> str:
        return "quick" if self.quick else "full"


@dataclass
class Section:
    title: str
    table: str                       # markdown
    summary: list[tuple[str, str, str]] = field(default_factory=list)  # (what, result, goal)


def section_control(build: Path, mode: Mode, place: Placement) -> Section:
    """LOOKUP against the socket's limit (a ping-pong peer) and Redis GET."""
    cases = [(1, 1), (1, 64), (50, 1), (50, 64)]
    kv: dict[tuple[int, int], list[dict]] = {c: [] for c in cases}
    redis: dict[int, list[float]] = {1: [], 50: []}
    srv = Servers(build, place)
    try:
        for r in range(mode.runs):
            log(f"control plane, run {r + 1} of {mode.runs}")
            for clients, keys in cases:
                out = run(place.load + [str(build / "bench" / "bench_control_plane"), "--socket",
                                        srv.kvtierd, "--clients", str(clients), "--keys",
                                        str(keys), "--seconds", str(mode.seconds), "--json"])
                kv[(clients, keys)].append(json.loads(out))
            for clients in redis:
                ops = kv[(clients, 1)][-1]["ops_per_s"]
                n = max(2000, int(ops * mode.seconds * 0.5))
                redis[clients].append(redis_get(place, srv.redis, clients, n))
    finally:
        srv.close()
    rows = ["| LOOKUP | kvtierd ops/s | p50 / p99 µs | ÷ socket limit | goal | ÷ Redis GET | goal |",
            "|---|---:|---:|---:|---|---:|---|"]
    summary = []
    for clients, keys in cases:
        runs = kv[(clients, keys)]
        lim = Ratio([x["ops_per_s"] / x["pingpong_ops_per_s"] for x in runs])
        red = Ratio([x["ops_per_s"] / redis[clients][i] for i, x in enumerate(runs)])
        red_goal = 2.0 if (clients, keys) == (50, 64) else None
        rows.append(
            f"| {keys} key{'s' if keys > 1 else ''}, {clients} client{'s' if clients > 1 else ''} "
            f"| {fmt(med([x['ops_per_s'] for x in runs]))} "
            f"| {med([x['p50_us'] for x in runs]):.0f} / {med([x['p99_us'] for x in runs]):.0f} "
            f"| {lim.text()} | {goal_cell(lim, 0.8)} | {red.text()} | {goal_cell(red, red_goal)} |")
        summary.append((f"LOOKUP {keys} key{'s' if keys > 1 else ''}, {clients} "
                        f"client{'s' if clients > 1 else ''}: ÷ socket limit / ÷ Redis GET",
                        f"{med(lim.runs):.2f}× / {med(red.runs):.2f}×",
                        "≥ 0.8× limit" + (", ≥ 2× Redis" if red_goal else "")))
    limit = "; ".join(
        f"{k} key{'s' if k > 1 else ''} × {c}: {fmt(med([x['pingpong_ops_per_s'] for x in kv[(c, k)]]))} ops/s"
        for c, k in cases)
    rd = "; ".join(f"{c} client{'s' if c > 1 else ''}: {fmt(med(v))} ops/s" for c, v in redis.items())
    text = "\n".join(rows) + (
        f"\n\nSocket limit (the ping-pong peer, same request and reply sizes, same busy-poll): {limit}. "
        f"Redis GET: {rd}. {mode.runs} runs of {mode.seconds:g} s per case.")
    return Section("control", text, summary)


def section_data(build: Path, mode: Mode, place: Placement) -> Section:
    """2 MiB blocks: the zero-copy read against memcpy, the inline GET against Redis."""
    runs: dict[int, list[dict]] = {1: [], 8: []}
    redis: list[float] = []
    srv = Servers(build, place)
    pages = srv.arena_pages()
    try:
        for r in range(mode.runs):
            log(f"data plane, run {r + 1} of {mode.runs}")
            for batch in runs:
                out = run(place.load + [str(build / "bench" / "bench_data_plane"), "--socket",
                                        srv.kvtierd, "--batch", str(batch), "--seconds",
                                        str(mode.seconds), "--json"])
                runs[batch].append(json.loads(out))
            redis.append(redis_get(place, srv.redis, 1, 400 if mode.quick else 2000, 2 << 20)
                         * (2 << 20) / 1e9)
    finally:
        srv.close()
    rows = ["| 2 MiB blocks | GB/s | ÷ memcpy (same run) | goal | ÷ Redis GET of 2 MiB |",
            "|---|---:|---:|---|---:|"]
    summary = []
    for batch, rs in runs.items():
        blocks = f"{batch} block{'s' if batch > 1 else ''}/op"
        d = Ratio([x["direct_gbs"] / x["memcpy_gbs"] for x in rs])
        dr = Ratio([x["direct_gbs"] / redis[i] for i, x in enumerate(rs)])
        goal = 0.9 if batch == 1 else None
        rows.append(f"| direct read (`Client::Read` of blocks read before), {blocks} "
                    f"| {med([x['direct_gbs'] for x in rs]):.2f} | {d.text()} "
                    f"| {goal_cell(d, goal)} | {med(dr.runs):.1f}× |")
        z = Ratio([x["acquire_copy_gbs"] / x["memcpy_gbs"] for x in rs])
        zr = Ratio([x["acquire_copy_gbs"] / redis[i] for i, x in enumerate(rs)])
        rows.append(f"| acquire + copy out + release (a first read), {blocks} "
                    f"| {med([x['acquire_copy_gbs'] for x in rs]):.2f} | {z.text()} "
                    f"| — | {med(zr.runs):.1f}× |")
        summary.append((f"zero-copy read, {batch} × 2 MiB, direct / through ACQUIRE: ÷ memcpy",
                        f"{med(d.runs):.2f}× / {med(z.runs):.2f}×", "≥ 0.9× direct" if goal else "—"))
    i = Ratio([x["inline_get_gbs"] / redis[k] for k, x in enumerate(runs[1])])
    rows.append(f"| inline GET through the socket, 1 block/op "
                f"| {med([x['inline_get_gbs'] for x in runs[1]]):.2f} "
                f"| {med([x['inline_get_gbs'] / x['memcpy_gbs'] for x in runs[1]]):.2f}× | — | {i.text()} |")
    text = "\n".join(rows) + (
        f"\n\nmemcpy: {med([x['memcpy_gbs'] for x in runs[1]]):.1f} GB/s (1 block), "
        f"{med([x['memcpy_gbs'] for x in runs[8]]):.1f} GB/s (8); Redis GET of 2 MiB values "
        f"{med(redis):.2f} GB/s. {mode.runs} runs of {mode.seconds:g} s. kvtierd's host arena: "
        f"{pages}. One block's round trip alone (ACQUIRE and its RELEASE, nothing copied) "
        f"{med([x['round_trip_us'] for x in runs[1]]):.1f} µs beside its memcpy's "
        f"{med([x['memcpy_us'] for x in runs[1]]):.1f} µs: the most a read of one block per "
        f"round trip can reach is "
        f"{med([x['memcpy_us'] / (x['memcpy_us'] + x['round_trip_us']) for x in runs[1]]):.2f}× "
        f"memcpy. Direct reads found their block still in its slot in "
        f"{min(x['direct_share'] for r in runs.values() for x in r) * 100:.0f} % of reads "
        f"(the least of any run).")
    return Section("data", text, summary)


def section_python(build: Path, mode: Mode, place: Placement) -> Section:
    """LOOKUP of 64 keys from Python against the C++ client."""
    py = Path(os.environ.get("KVTIER_VENV", REPO / ".venv")) / "bin" / "python"
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run(place.load + [str(py), str(REPO / "bench" / "python" / "bench_python.py"), "--build",
                          str(build), "--only", "lookup", "--rounds", str(max(3, mode.runs)),
                          "--seconds", str(mode.seconds), "--json", f.name])
        lk = json.loads(Path(f.name).read_text())["lookup"]
    r = Ratio([p / c for p, c in zip(lk["python_ops_per_s"], lk["cpp_ops_per_s"])])
    table = ("| LOOKUP of 64 keys, 1 client | Python ops/s | C++ client ops/s | ratio | goal |\n"
             "|---|---:|---:|---:|---|\n"
             f"| `Client.lookup(block_keys(…))` against `kvtier bench --op lookup` "
             f"| {fmt(med(lk['python_ops_per_s']))} | {fmt(med(lk['cpp_ops_per_s']))} "
             f"| {r.text()} | {goal_cell(r, 0.9)} |\n\n"
             f"{len(r.runs)} alternating rounds of {mode.seconds:g} s.")
    return Section("python", table, [("Python LOOKUP of 64 keys ÷ C++ client",
                                      f"{med(r.runs):.2f}×", "≥ 0.9×")])


def section_ssd(build: Path, mode: Mode, place: Placement) -> Section:
    """The SSD store interleaved with fio (bench/ssd_vs_fio.sh)."""
    env = dict(os.environ, ROUNDS=str(max(3, mode.runs if mode.quick else 6)),
               SLICE_MIB="64" if mode.quick else "256", BENCH_FILTER="none")
    out = run([str(REPO / "bench" / "ssd_vs_fio.sh"), str(build),
               os.environ.get("KVTIER_REPORT_DISK", "/var/tmp")], env=env)
    rows = ["| op | block | in flight | SsdStore GB/s | fio GB/s | ÷ fio, median (worst round) | goal | ÷ own raw I/O |",
            "|---|---|---:|---:|---:|---:|---|---:|"]
    pat = re.compile(r"^(\w+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x\s+([\d.]+)x\s+([\d.]+)-\s*([\d.]+)x\s+([\d.]+)\s+([\d.]+)x")
    worst_all: list[float] = []
    found = 0
    for line in out.splitlines():
        m = pat.match(line)
        if not m:
            continue
        found += 1
        op, bs, depth, store, fio, median, lo, _hi, _raw, own = m.groups()
        worst_all.append(float(lo))
        goal = 0.95 if op != "fill_sparse" else None
        ok = "—" if goal is None else f"≥ 0.95× {'✓' if float(lo) >= goal else '✗'}"
        rows.append(f"| {op} | {bs} | {depth} | {float(store):.2f} | {float(fio):.2f} "
                    f"| **{float(median):.2f}×** ({float(lo):.2f}×) | {ok} | {float(own):.2f}× |")
    if found == 0:
        raise RuntimeError("ssd_vs_fio.sh printed no interleaved table:\n" + out[-2000:])
    goal_rows = [float(lo) for lo, line in zip(worst_all, rows[2:]) if "fill_sparse" not in line]
    table = "\n".join(rows) + (f"\n\n{env['ROUNDS']} rounds of {env['SLICE_MIB']} MiB per case, "
                               "the legs' order rotating; fill_sparse (a sparse file, the old "
                               "design) is shown for comparison.")
    return Section("ssd", table, [("SSD tier ÷ fio, worst case (worst round)",
                                   f"{min(goal_rows):.2f}×", "≥ 0.95×")])


def section_seal(build: Path, mode: Mode, place: Placement) -> Section:
    """The SSD store with block keys against without (bench/ssd_vs_fio.sh, SEAL=1)."""
    env = dict(os.environ, ROUNDS=str(max(3, mode.runs if mode.quick else 6)),
               SLICE_MIB="64" if mode.quick else "256", BENCH_FILTER="none", SEAL="1",
               ONLY="write:*:*,read:*:*")
    out = run([str(REPO / "bench" / "ssd_vs_fio.sh"), str(build),
               os.environ.get("KVTIER_REPORT_DISK", "/var/tmp")], env=env)
    rows = ["| op | block | in flight | sealed GB/s | SsdStore GB/s | sealed ÷ SsdStore, median (worst round) | goal |",
            "|---|---|---:|---:|---:|---:|---|"]
    part = out.split("=== The sealed store", 1)
    if len(part) != 2:
        raise RuntimeError("ssd_vs_fio.sh printed no sealed table:\n" + out[-2000:])
    pat = re.compile(r"^(\w+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x\s+([\d.]+)x\s+([\d.]+)-\s*([\d.]+)x")
    worst: list[float] = []
    for line in part[1].splitlines():
        m = pat.match(line)
        if not m:
            continue
        op, bs, depth, sealed, store, median, lo, _hi = m.groups()
        worst.append(float(lo))
        rows.append(f"| {op} | {bs} | {depth} | {float(sealed):.2f} | {float(store):.2f} "
                    f"| **{float(median):.2f}×** ({float(lo):.2f}×) "
                    f"| ≥ 0.9× {'✓' if float(lo) >= 0.9 else '✗'} |")
    if not worst:
        raise RuntimeError("ssd_vs_fio.sh printed no sealed rows:\n" + out[-2000:])
    table = "\n".join(rows) + (f"\n\n{env['ROUNDS']} rounds of {env['SLICE_MIB']} MiB per case; "
                               "each round runs fio, the store, its own raw I/O and the store "
                               "with block keys (AES-256-GCM on every write and read) in "
                               "rotating order.")
    return Section("seal", table, [("SSD tier with block keys ÷ without, worst case (worst round)",
                                    f"{min(worst):.2f}×", "≥ 0.9×")])


def section_remote(build: Path, mode: Mode, place: Placement) -> Section:
    """The remote tier against raw hiredis on a 3-master Redis Cluster."""
    env = dict(os.environ, ROUNDS=str(max(3, mode.runs)), SLICE_MIB="32" if mode.quick else "128",
               SET_MIB="16" if mode.quick else "64")
    out = run([str(REPO / "bench" / "remote_vs_redis.sh"), str(build)], env=env)
    pat = re.compile(r"^(\S.*?)\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)x \[([\d.]+)-([\d.]+)\]\s+([\d.]+)\s+([\d.]+)x \[([\d.]+)-([\d.]+)\]")
    rows = ["| case | ours MB/s | raw hiredis MB/s | ÷ hiredis, median (worst round) | goal |",
            "|---|---:|---:|---:|---|"]
    worst = []
    for line in out.splitlines():
        m = pat.match(line)
        if not m:
            continue
        name, ours, _cl, _r1, _l1, _h1, hi, r2, l2, _h2 = m.groups()
        worst.append(float(l2))
        rows.append(f"| {name.strip()} | {float(ours):,.0f} | {float(hi):,.0f} | **{float(r2):.2f}×** "
                    f"({float(l2):.2f}×) | ≥ 0.8× {'✓' if float(l2) >= 0.8 else '✗'} |")
    if not worst:
        raise RuntimeError("remote_vs_redis.sh printed no table:\n" + out[-2000:])
    table = "\n".join(rows) + f"\n\n{env['ROUNDS']} alternating rounds of {env['SLICE_MIB']} MiB per leg."
    return Section("remote", table, [("remote tier ÷ raw hiredis, worst case (worst round)",
                                      f"{min(worst):.2f}×", "≥ 0.8×")])


def section_remote_seal(build: Path, mode: Mode, place: Placement) -> Section:
    """The remote tier with block keys and over TLS against in the clear, same rounds."""
    env = dict(os.environ, ROUNDS=str(max(3, mode.runs if mode.quick else 6)),
               SLICE_MIB="32" if mode.quick else "128", SET_MIB="16" if mode.quick else "64",
               SEAL="1", TLS="1")
    out = run([str(REPO / "bench" / "remote_vs_redis.sh"), str(build)], env=env)
    pat = re.compile(r"^(\S.*?)\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)x \[([\d.]+)-([\d.]+)\]\s+(-?[\d.]+)$")
    legs = {"sealed": "with block keys (values sealed, AES-256-GCM) ÷ in the clear",
            "tls": "over TLS ÷ plaintext (the same cluster's TLS ports)"}
    # The limit of TLS here: Redis' own client over TLS ÷ plain (median,
    # worst), per op and size.
    limit: dict[tuple[str, str], tuple[float, float, float, float]] = {}
    lim = out.split("== the limit:", 1)
    if len(lim) == 2:
        for line in lim[1].splitlines():
            m = re.match(r"^(set|get)\s+(256k|2M)\s+(\d+)\s+(\d+)\s+([\d.]+)x\s+([\d.]+)x", line)
            if m:
                limit[(m.group(1), m.group(2))] = (float(m.group(3)), float(m.group(4)),
                                                   float(m.group(5)), float(m.group(6)))
    if not limit:
        raise RuntimeError("remote_vs_redis.sh printed no limit table:\n" + out[-2000:])

    def limit_of(name: str) -> tuple[float, float, float, float] | None:
        # GET only: redis-benchmark's SET over TLS stalls its client with
        # values this large (remote_vs_redis.sh).
        if not name.startswith("read"):
            return None
        return limit.get(("get", "256k" if "256 KiB" in name else "2M"))

    rows = ["| leg | case | clear MB/s | encrypted MB/s | ÷ clear, median (worst round) | extra CPU per block "
            "| ÷ the limit (Redis' own TLS ÷ plain) | goal |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    summary = []
    for leg, what in legs.items():
        part = out.rsplit(f"\n{leg}: ", 1)
        if len(part) != 2:
            raise RuntimeError(f"remote_vs_redis.sh printed no {leg} table:\n" + out[-2000:])
        worst, of_limit = [], []
        for line in part[1].split("\n\n", 1)[0].splitlines():
            m = pat.match(line)
            if not m:
                continue
            name, clear, enc, median, lo, _hi, cpu = m.groups()
            name = name.strip()
            worst.append(float(lo))
            vs_limit = "—"
            if leg == "tls" and (l := limit_of(name)) is not None and l[2] > 0:
                of_limit.append(float(median) / l[2])
                vs_limit = f"{of_limit[-1]:.2f}× (of {l[2]:.2f}×)"
            rows.append(f"| {leg} | {name} | {float(clear):,.0f} | {float(enc):,.0f} "
                        f"| **{float(median):.2f}×** ({float(lo):.2f}×) | {float(cpu):.0f} µs | {vs_limit} "
                        f"| ≥ 0.9× {'✓' if float(lo) >= 0.9 else '✗ (worst run)' if float(median) >= 0.9 else '✗'} |")
        if not worst:
            raise RuntimeError(f"remote_vs_redis.sh printed no {leg} rows:\n" + out[-2000:])
        summary.append((f"remote tier {what}, worst case (worst round)", f"{min(worst):.2f}×", "≥ 0.9×"))
        if of_limit:
            summary.append(("remote tier reads over TLS ÷ Redis' own client's (its TLS ÷ plain GET: "
                            "the limit here), lowest case", f"{min(of_limit):.2f}×", "—"))
    rows += ["", "| the limit: redis-benchmark, 1 connection | plain req/s | TLS req/s | TLS ÷ plain, median (worst round) |",
             "|---|---:|---:|---:|"]
    for (op, size), (plain, tls, median, lo) in limit.items():
        rows.append(f"| {op.upper()} {size} | {plain:,.0f} | {tls:,.0f} | **{median:.2f}×** ({lo:.2f}×) |")
    table = "\n".join(rows) + (f"\n\n{env['ROUNDS']} rounds of {env['SLICE_MIB']} MiB per leg, the "
                               "legs' order rotating; the Redis nodes run on this machine's cores, "
                               "so their side of TLS competes with ours. The limit: Redis' own client "
                               "(`redis-benchmark -c 1`) against one more node, standalone, over its "
                               "TLS port and its plain one, GET of the same sizes, rounds alternating "
                               "(its SET over TLS stalls its own client with values this large, so "
                               "writes have no limit here); a TLS read's \"÷ the limit\" is its "
                               "median ÷ that of GET of the same size.")
    return Section("remote_seal", table, summary)


def section_replay(build: Path, mode: Mode, place: Placement) -> Section:
    """Eviction cost: refs/s of each policy replaying the same traces on one core."""
    kvtier = build / "cli" / "kvtier"
    mooncake = str(REPO / "tests/data/mooncake_synthetic_trace.jsonl")
    traces = {"Mooncake (synthetic), 16 copies": ["--combine", "concat"] + ["--trace", mooncake] * 16,
              "kv-cache-tester": sum((["--trace", str(t)] for t in
                                      sorted((REPO / "tests/data/kv-cache-tester").glob("*.json"))), [])}
    policies = ["lru", "adaptive", "s3fifo", "lfu"]
    rows = ["| trace | capacity (blocks) | LRU M refs/s | adaptive ÷ LRU cost, median (worst) | goal | s3fifo ÷ LRU | lfu ÷ LRU |",
            "|---|---:|---:|---:|---|---:|---:|"]
    summary = []
    lru_all: list[float] = []
    worst_cost: list[float] = []
    for name, args in traces.items():
        caps = {"Mooncake (synthetic), 16 copies": [1953, 19531], "kv-cache-tester": [1000, 10000]}[name]
        for cap in caps:
            speed: dict[str, list[float]] = {p: [] for p in policies}
            for r in range(max(3, mode.runs)):
                order = policies[r % len(policies):] + policies[:r % len(policies)]
                for p in order:
                    with tempfile.NamedTemporaryFile(suffix=".json") as f:
                        run(place.load + [str(kvtier), "replay", "--quiet", *args, "--policies", p,
                                          "--capacity-blocks", str(cap), "--json", f.name])
                        speed[p].append(refs_per_s(json.loads(Path(f.name).read_text())))
            lru = speed["lru"]
            lru_all += lru
            cost = {p: Ratio([lru[i] / s for i, s in enumerate(speed[p])], higher_is_better=False)
                    for p in policies[1:]}
            worst_cost.append(cost["adaptive"].worst())
            rows.append(f"| {name} | {cap:,} | {med(lru) / 1e6:.2f} | {cost['adaptive'].text()} "
                        f"| {goal_cell(cost['adaptive'], 1.2, '≤')} | {med(cost['s3fifo'].runs):.2f}× "
                        f"| {med(cost['lfu'].runs):.2f}× |")
    summary.append(("`kvtier replay` with LRU, M block references/s on one core",
                    f"{med(lru_all) / 1e6:.1f}", "≥ 5"))
    summary.append(("adaptive ÷ LRU cost per block reference, worst point", f"{max(worst_cost):.2f}×",
                    "≤ 1.2×"))
    table = "\n".join(rows) + ("\n\nCost = LRU's refs/s ÷ the policy's, the policies' order "
                               f"rotating over {max(3, mode.runs)} runs; docs/replay/sweep.sh "
                               "measures every capacity of docs/eviction.md the same way.")
    return Section("replay", table, summary)


def refs_per_s(report: dict) -> float:
    """Block references per second of the one policy in a `kvtier replay --json` report."""
    def find(d):
        if isinstance(d, dict):
            for k in ("refs_per_second", "refs_per_s"):
                if k in d:
                    return float(d[k])
            for v in d.values():
                x = find(v)
                if x is not None:
                    return x
        if isinstance(d, list):
            for v in d:
                x = find(v)
                if x is not None:
                    return x
        return None
    x = find(report)
    if x is None:
        raise RuntimeError("kvtier replay --json has no refs/s")
    return x


def section_fp8(build: Path, mode: Mode, place: Placement) -> Section:
    """The CPU fp8 codecs against memcpy of the same 16-bit bytes."""
    runs: dict[str, list[list[float]]] = {}
    for r in range(mode.runs):
        log(f"fp8 codecs, run {r + 1} of {mode.runs}")
        out = run(place.load + [str(build / "bench" / "bench_fp8")])
        for line in out.splitlines():
            m = re.match(r"^(fp16|bf16)\s+([\d.]+)\s+([\d.]+) \(([\d.]+)x\)\s+([\d.]+) \(([\d.]+)x\)", line)
            if m:
                runs.setdefault(m.group(1), []).append([float(m.group(4)), float(m.group(6)),
                                                        float(m.group(2))])
    if not runs:
        raise RuntimeError("bench_fp8 printed no summary")
    rows = ["| dtype | memcpy GB/s | quantize to e4m3 ÷ memcpy | dequantize ÷ memcpy | goal |",
            "|---|---:|---:|---:|---|"]
    summary = []
    for dtype, rs in runs.items():
        q, d = Ratio([x[0] for x in rs]), Ratio([x[1] for x in rs])
        rows.append(f"| {dtype} | {med([x[2] for x in rs]):.1f} | {q.text()} | {d.text()} "
                    f"| ≥ 0.5× {'✓' if q.meets(0.5) and d.meets(0.5) else '✗'} |")
        summary.append((f"fp8 codecs, {dtype} ↔ e4m3 ÷ memcpy", f"{med(q.runs):.2f}× / {med(d.runs):.2f}×",
                        "≥ 0.5×"))
    return Section("fp8", "\n".join(rows) + f"\n\n{mode.runs} runs of bench_fp8 (each the median of 5 repetitions).",
                   summary)


def section_cipher(build: Path, mode: Mode, place: Placement) -> Section:
    """Block seals on one core: each AES-256-GCM engine against memcpy (bench_seal)."""
    runs: dict[str, list[list[float]]] = {}
    engine = "?"
    for r in range(mode.runs):
        log(f"block seal engines, run {r + 1} of {mode.runs}")
        out = run(place.load + [str(build / "bench" / "bench_seal")])
        for line in out.splitlines():
            m = re.match(r"^block seals \(AES-256-GCM\) on one core: OpenSSL and (.+), against memcpy", line)
            if m:
                engine = m.group(1)
            m = re.match(r"^(256k|2M)\s+([\d.]+)" + r"\s+([\d.]+) \(([\d.]+)x\)" * 4
                         + r"\s+([\d.]+)x\s+([\d.]+)x", line)
            if m:
                g = [float(x) for x in m.groups()[1:]]
                # memcpy, seal/open OpenSSL, seal/open fastest (GB/s), gains
                runs.setdefault(m.group(1), []).append([g[0], g[1], g[3], g[5], g[7], g[9], g[10]])
    if not runs:
        raise RuntimeError("bench_seal printed no summary")
    rows = [f"| block | memcpy GB/s | seal: OpenSSL GB/s | seal: {engine} GB/s | open: OpenSSL GB/s "
            f"| open: {engine} GB/s | seal ÷ OpenSSL, median (worst) | open ÷ OpenSSL, median (worst) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary = []
    for block, rs in runs.items():
        seal_gain, open_gain = Ratio([x[5] for x in rs]), Ratio([x[6] for x in rs])
        rows.append(f"| {block} | {med([x[0] for x in rs]):.1f} | {med([x[1] for x in rs]):.2f} "
                    f"| {med([x[3] for x in rs]):.2f} | {med([x[2] for x in rs]):.2f} "
                    f"| {med([x[4] for x in rs]):.2f} | {seal_gain.text()} | {open_gain.text()} |")
        summary.append((f"block seal engine ({engine}) ÷ OpenSSL on one core, {block}: seal / open",
                        f"{med(seal_gain.runs):.2f}× / {med(open_gain.runs):.2f}×", "—"))
    return Section("cipher", "\n".join(rows) + f"\n\n{mode.runs} runs of bench_seal (each the median "
                   "of 5 repetitions); sealing 16 blocks (32 MiB of 2 MiB ones) into other buffers in "
                   "parts of 512 KiB, opening them in place in parts of 64 KiB.", summary)


def section_quantize(build: Path, mode: Mode, place: Placement) -> Section:
    """Quantize on demote: fp8 below memory against exact, the real engine and SSD tier."""
    blocks = "128" if mode.quick else "512"
    rounds = str(max(3, mode.runs))
    out = run([str(build / "bench" / "bench_quantize_ssd"),
               f"--dir={os.environ.get('KVTIER_REPORT_DISK', '/var/tmp')}", f"--blocks={blocks}",
               f"--rounds={rounds}"])
    demote, promote = [], []
    for line in out.splitlines():
        m = re.match(r"^(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)x\s+[\d.]+\s+[\d.]+\s+([\d.]+)x", line)
        if m:
            demote.append(float(m.group(2)))
            promote.append(float(m.group(3)))
    if not demote:
        raise RuntimeError("bench_quantize_ssd printed no rounds:\n" + out[-2000:])
    d, p = Ratio(demote), Ratio(promote)
    table = ("| this machine's disk as it is | fp8 ÷ exact, median (worst round) |\n|---|---:|\n"
             f"| blocks demoted to SSD per second | {d.text()} |\n"
             f"| blocks promoted from SSD per second | {p.text()} |\n\n"
             f"{rounds} rounds of {blocks} blocks of 2 MiB (Llama-3-8B's layout, fp16), modes "
             "alternating. The disk-bound case (goal ≥ 1.6×) needs root to throttle the disk: "
             "bench/quantize_on_off.sh.")
    return Section("quantize", table, [("quantize on demote, this disk: demote / promote",
                                        f"{med(d.runs):.2f}× / {med(p.runs):.2f}×", "(≥ 1.6× disk-bound)")])


def section_scale(build: Path, mode: Mode, place: Placement) -> Section:
    """How cost grows: blocks 10k → 10M, sessions 1 → 1,000 (bench/scale.sh)."""
    out = run([str(REPO / "bench" / "scale.sh"), str(build)] + (["--quick"] if mode.quick else []))
    if "|" not in out:
        raise RuntimeError("bench/scale.sh printed no table")
    return Section("scale", out.strip(), [])


def with_busy_core(section: Callable[[Path, Mode, Placement], Section]
                   ) -> Callable[[Path, Mode, Placement], Section]:
    """The section again with one CPU kept busy by an unrelated process (BusyCore)."""
    def run_busy(build: Path, mode: Mode, place: Placement) -> Section:
        with BusyCore():
            busy_place = Placement.choose(busy=1)
            s = section(build, mode, busy_place)
        note = (f"With one CPU kept busy by an unrelated process (a shell loop, not pinned) "
                f"for the whole section; placement: {busy_place.note}.\n\n")
        return Section(s.title, note + s.table,
                       [(w + ", one CPU busy", r, g) for w, r, g in s.summary])
    return run_busy


SECTIONS: dict[str, Callable[[Path, Mode, Placement], Section]] = {
    "control": section_control,
    "control-busy": with_busy_core(section_control),
    "data": section_data,
    "data-busy": with_busy_core(section_data),
    "python": section_python,
    "ssd": section_ssd,
    "seal": section_seal,
    "cipher": section_cipher,
    "remote": section_remote,
    "remote_seal": section_remote_seal,
    "replay": section_replay,
    "fp8": section_fp8,
    "quantize": section_quantize,
    "scale": section_scale,
}


# ---- writing -------------------------------------------------------------------


def marked(text: str, name: str) -> tuple[int, int]:
    """Where the body between the section's markers (which must exist) starts and ends."""
    begin, end = f"<!-- report:{name} -->", f"<!-- /report:{name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise RuntimeError(f"no {begin} … {end} markers")
    return i + len(begin), j


def splice(text: str, name: str, body: str) -> str:
    """Replaces what lies between the section's markers."""
    i, j = marked(text, name)
    return text[:i] + "\n" + body.strip() + "\n" + text[j:]


def between(text: str, name: str) -> str:
    """What lies between the section's markers."""
    i, j = marked(text, name)
    return text[i:j].strip()


def merge_summary(body: str, new_rows: list[tuple[str, str]], sections: str, stamp: str) -> str:
    """README's summary after a run of some sections: their rows replace the
    rows of the same figures (new ones are added at the end), the others
    stay, and the note after the table names the run, in place of an earlier
    run of the same sections."""
    fresh = dict(new_rows)
    rows = [fresh.pop(ln[2:].split(" | ")[0], ln) for ln in body.splitlines() if ln.startswith("|")]
    rows += list(fresh.values())
    note = body[body.rfind("\n\n") + 2:].strip() if "\n\n" in body else ""
    note = re.sub(r" The rows of " + re.escape(sections) + r": .*?(?= The rows of |\)$)", "", note)
    if note.endswith(")"):
        note = note[:-1] + f" The rows of {sections}: {stamp}.)"
    else:
        note = f"(The rows of {sections}: {stamp}.)"
    return "\n".join(rows) + "\n\n" + note


def header(info: dict[str, str], mode: Mode, place: Placement, before: Load, after: Load) -> str:
    return (f"Report of {info['date']}, `bench/report.sh --{mode.name}`, commit {info['commit']}, on "
            f"{info['cpu']}, {info['memory']}, Linux {info['kernel']}. Before the run: "
            f"{before.text()}; after: {after.text()}. Placement: {place.note}.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("build", type=Path)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="a few minutes (the default)")
    g.add_argument("--full", action="store_true", help="longer runs, more of them")
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections, comma-separated")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "performance.md",
                    help="the file whose marked tables are replaced (default docs/performance.md)")
    ap.add_argument("--readme", type=Path, default=None,
                    help="the README whose summary is replaced (default: README.md when --out "
                         "is the default)")
    ap.add_argument("--check", action="store_true",
                    help="fail unless every section produced its table (for the tests); with\n"
                         "--quick, one run per case instead of three")
    a = ap.parse_args()
    mode = Mode(quick=True, runs=3, seconds=1.0) if not a.full else Mode(False, 5, 3.0)
    if a.check and not a.full:
        # The tests' check: every table still made, its numbers not read, so
        # one run of each case is enough (the sections whose own rounds are
        # the comparison still run their three).
        mode.runs = 1
    build = a.build.resolve()
    names = [n for n in a.only.split(",") if n]
    for n in names:
        if n not in SECTIONS:
            ap.error(f"unknown section {n!r}; sections: {', '.join(SECTIONS)}")
    readme = a.readme or (REPO / "README.md" if a.out == REPO / "docs" / "performance.md" else None)
    place = Placement.choose()
    info = machine()
    before = measure_load()
    log(f"{mode.name} report of {', '.join(names)}; {place.note}; {before.text()}")
    done: dict[str, Section] = {}
    failed: list[str] = []
    for n in names:
        t = time.monotonic()
        try:
            done[n] = SECTIONS[n](build, mode, place)
            log(f"{n}: {time.monotonic() - t:.0f} s")
        except Exception as e:  # a failed section is reported, the others still run
            log(f"{n} FAILED: {e}")
            failed.append(n)
    after = measure_load()
    text = a.out.read_text() if a.out.exists() else "".join(
        f"<!-- report:{n} -->\n<!-- /report:{n} -->\n\n" for n in ["header", *SECTIONS])
    # A run of some sections (--only) leaves the header, the other sections
    # and the other summary rows as the last run wrote them, and stamps what
    # it wrote with its own date, commit and load.
    partial = set(names) != set(SECTIONS)
    stamp = (f"{info['date']}, `bench/report.sh --{mode.name} --only {','.join(done)}` at "
             f"{info['commit']}")
    if not partial:
        text = splice(text, "header", header(info, mode, place, before, after))
    for n, s in done.items():
        table = s.table
        if partial:
            table = (f"_This section: {stamp}; {place.note}; before the run {before.text()}, "
                     f"after {after.text()}._\n\n{table}")
        text = splice(text, n, table)
    a.out.write_text(text)
    log(f"wrote {a.out}")
    if readme is not None and done:
        rt = readme.read_text()
        new_rows = [(w, f"| {w} | {r} | {g} |") for s in done.values() for w, r, g in s.summary]
        if partial:
            rt = splice(rt, "summary",
                        merge_summary(between(rt, "summary"), new_rows, ", ".join(done), stamp))
        else:
            rows = ["| figure | result | goal |", "|---|---:|---|"] + [row for _, row in new_rows]
            rt = splice(rt, "summary", "\n".join(rows) + f"\n\n({info['date']}, `bench/report.sh "
                        f"--{mode.name}` at {info['commit']}; {place.note}; {before.text()}. "
                        "The tables: docs/performance.md.)")
        readme.write_text(rt)
        log(f"wrote {readme}")
    if failed:
        log(f"sections that failed: {', '.join(failed)}")
        return 1
    if a.check:
        for n, s in done.items():
            if "n/a" in s.table or "|" not in s.table:
                log(f"{n}: a figure is missing")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

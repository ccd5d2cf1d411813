"""``socket="auto"``: attach to the node's kvtierd, or start the one its workers share.

The first worker on a node that finds no kvtierd starts one, and every other
worker of that user attaches to it:

1. kvtierd at the default socket (``$KVTIER_SOCKET``, else
   ``/run/kvtier/kvtierd.sock``, where a packaged kvtierd listens) answers:
   that one, the operator's.
2. Else the on-demand daemon's socket (``$KVTIER_AUTO_SOCKET``, else
   ``/tmp/kvtier-<uid>/kvtierd.sock``, in a directory only this user may
   enter) answers: that one.
3. Else, holding an exclusive lock on ``<socket>.lock`` (so that of workers
   starting at once exactly one starts a daemon and the others wait for it
   and attach), start kvtierd there in a session of its own (it outlives the
   worker that started it and serves the others) and wait until it listens.

The daemon started this way keeps blocks in host memory only (a quarter of the
memory available to this process's cgroup, unless told otherwise), on disk
only when given a directory, never on a GPU (vLLM counts its GPU memory
before kvtier could take any), and exits once no worker has been attached for
``idle_exit_s`` (10 minutes). Its log is ``kvtierd.log`` beside its socket.

An explicit socket is never "auto": a daemon the operator named that does not
answer stays the operator's to start.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import socket as _socket
import stat
import subprocess
import time
from pathlib import Path
from typing import Optional, Union

from . import _launch
from .errors import InvalidArgumentError, UnavailableError

AUTO = "auto"
SYSTEM_SOCKET = "/run/kvtier/kvtierd.sock"
DEFAULT_IDLE_EXIT_S = 600
DEFAULT_HOST_SHARE = 0.25
_MIN_HOST_BYTES = 128 << 20

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1000**4, "tib": 1 << 40}

_logger = logging.getLogger("kvtier")


def default_socket() -> str:
    """The socket a client attaches to when given none: ``$KVTIER_SOCKET``, else
    ``/run/kvtier/kvtierd.sock``."""
    return os.environ.get("KVTIER_SOCKET") or SYSTEM_SOCKET


def auto_socket() -> str:
    """Where a daemon started on demand listens: ``$KVTIER_AUTO_SOCKET``, else
    ``/tmp/kvtier-<uid>/kvtierd.sock``."""
    return os.environ.get("KVTIER_AUTO_SOCKET") or f"/tmp/kvtier-{os.getuid()}/kvtierd.sock"


def listening(path: str) -> bool:
    """Whether a process accepts connections on the Unix socket at `path`."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def default_or_auto() -> Optional[str]:
    """What a socket left unsaid means where "auto" is the default (kvtier.vllm,
    kvtier.hf): None (the default socket) when ``$KVTIER_SOCKET`` names one or
    a daemon listens at ``/run/kvtier/kvtierd.sock``, else "auto"."""
    if os.environ.get("KVTIER_SOCKET") or listening(SYSTEM_SOCKET):
        return None
    return AUTO


def resolve(socket: Optional[str], *, default_auto: bool = False, **daemon: object) -> str:
    """The socket to attach to.

    An explicit path is returned as is. ``"auto"`` finds or starts a daemon
    (:func:`ensure_daemon`, with `daemon`'s settings). None is the default
    socket, or "auto" when `default_auto` (kvtier.vllm and kvtier.hf) and
    neither ``$KVTIER_SOCKET`` names one nor a daemon listens at
    ``/run/kvtier/kvtierd.sock``.
    """
    if not socket:
        socket = default_or_auto() if default_auto else None
        if socket is None:
            return default_socket()
    if socket != AUTO:
        return socket
    if listening(default_socket()):
        return default_socket()
    return ensure_daemon(**daemon)  # type: ignore[arg-type]


def parse_bytes(text: Union[str, int], what: str) -> int:
    """Bytes from ``"8GiB"``, ``"512MB"``, ``"1073741824"`` or an int."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if m is None or m.group(2).lower() not in _UNITS:
        raise InvalidArgumentError(f"{what}: {text!r} is not a size (e.g. '8GiB', '512MiB')")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def available_memory() -> int:
    """Bytes of memory this process could still have: the kernel's MemAvailable,
    less where a cgroup (v2) limit leaves less."""
    avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    try:
        cgroup = Path("/proc/self/cgroup").read_text().strip().split("\n")[0].split("::", 1)[1]
        base = Path("/sys/fs/cgroup") / cgroup.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit != "max":
            used = int((base / "memory.current").read_text())
            avail = min(avail, max(0, int(limit) - used))
    except (OSError, IndexError, ValueError):
        pass  # cgroup v1, or no limit readable: the kernel's figure
    return avail


def host_bytes(setting: Union[str, int, float, None]) -> int:
    """The host tier of a daemon started on demand: a size, or a share (0-1) of
    :func:`available_memory`; None is ``$KVTIER_AUTO_HOST_MEMORY``, else a quarter."""
    if setting is None:
        setting = os.environ.get("KVTIER_AUTO_HOST_MEMORY") or DEFAULT_HOST_SHARE
    share: Optional[float] = None
    if isinstance(setting, float):
        share = setting
    elif isinstance(setting, str) and re.fullmatch(r"\s*0?\.\d+\s*|\s*1(\.0*)?\s*", setting):
        share = float(setting)
    if share is not None:
        if not 0 < share <= 1:
            raise InvalidArgumentError(f"host memory share {share} is not within (0, 1]")
        n = max(_MIN_HOST_BYTES, int(available_memory() * share))
    else:
        n = parse_bytes(setting, "host memory")  # type: ignore[arg-type]
    return n - n % (1 << 20)


def kvtierd_executable() -> str:
    """kvtierd to start: ``$KVTIER_KVTIERD``, the wheel's own, else one on PATH."""
    if os.environ.get("KVTIER_KVTIERD"):
        return os.environ["KVTIER_KVTIERD"]
    try:
        return str(_launch.executable("kvtierd"))
    except FileNotFoundError as e:
        found = shutil.which("kvtierd")
        # A package installed from the source tree has a `kvtierd` entry point
        # (a Python script) that has nothing to run.
        if found is not None:
            with open(found, "rb") as f:
                if f.read(2) != b"#!":
                    return found
        raise UnavailableError(f"socket='auto' found no kvtierd to start: {e}; or set "
                               "$KVTIER_KVTIERD to a kvtierd executable") from None


def _private_dir(path: Path) -> None:
    """Creates `path` (mode 0700) or checks that it is this user's alone: the
    socket in it hands out this user's cached prompts."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise UnavailableError(f"{path} is not a directory of this user's that only it may "
                               "write; not starting kvtierd there (set $KVTIER_AUTO_SOCKET)")


def ensure_daemon(*, host_memory: Union[str, int, float, None] = None,
                  ssd_dir: Optional[str] = None, ssd_capacity: Union[str, int, None] = None,
                  idle_exit_s: Optional[int] = None, socket: Optional[str] = None,
                  start_timeout_s: float = 120,
                  logger: Optional[logging.Logger] = None) -> str:
    """The socket of the on-demand kvtierd (``socket``, else :func:`auto_socket`),
    started now if nothing listens there; returns once it listens.

    host_memory: its host tier, a size ("8GiB") or a share of the available
        memory (0.25, the default; ``$KVTIER_AUTO_HOST_MEMORY``).
    ssd_dir, ssd_capacity: its SSD tier (``$KVTIER_AUTO_SSD_DIR``,
        ``$KVTIER_AUTO_SSD_CAPACITY``); none by default.
    idle_exit_s: it exits once no worker has been attached this long
        (``$KVTIER_AUTO_IDLE_EXIT_S``, default 600; 0 = never).

    Of processes calling this at once exactly one starts the daemon (a lock
    file beside the socket); the others wait for it. Settings apply to a
    daemon this call starts, not to one already running. Raises
    kvtier.UnavailableError when the daemon cannot be started (its log's last
    lines say why).
    """
    log = logger or _logger
    path = socket or auto_socket()
    if listening(path):
        return path
    folder = Path(path).parent
    _private_dir(folder)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if listening(path):
            return path  # another worker started it while this one waited
        exe = kvtierd_executable()
        host = host_bytes(host_memory)
        ssd = ssd_dir if ssd_dir is not None else os.environ.get("KVTIER_AUTO_SSD_DIR", "")
        idle = idle_exit_s if idle_exit_s is not None else int(
            os.environ.get("KVTIER_AUTO_IDLE_EXIT_S", DEFAULT_IDLE_EXIT_S))
        args = [exe, "--socket", path, "--host-capacity", str(host), "--device", "off",
                "--ssd-dir", ssd, "--idle-exit-s", str(idle),
                "--metrics-address", "127.0.0.1:0"]
        capacity = ssd_capacity or os.environ.get("KVTIER_AUTO_SSD_CAPACITY")
        if ssd and capacity:
            args += ["--ssd-capacity", str(parse_bytes(capacity, "ssd capacity"))]
        log_path = folder / "kvtierd.log"
        pid = _spawn_detached(args, log_path)
        deadline = time.monotonic() + start_timeout_s
        while not listening(path):
            if not _alive(pid) or time.monotonic() > deadline:
                if _alive(pid):
                    os.kill(pid, 15)
                raise UnavailableError(
                    f"kvtierd (pid {pid}, started for socket='auto') did not come up on {path}; "
                    f"the end of {log_path}:\n{_tail(log_path)}")
            time.sleep(0.05)
    log.warning(
        "kvtier: started kvtierd (pid %d) for socket='auto': listening on %s, host tier %d MiB, "
        "%s, log %s. It serves every worker of this user on the node and exits after %d s "
        "without one%s; stop it sooner with `kill %d`.", pid, path, host >> 20,
        f"ssd tier in {ssd}" if ssd else "no ssd tier", log_path, idle,
        "" if idle else " (never: idle_exit_s 0)", pid)
    return path


def _spawn_detached(args: list[str], log_path: Path) -> int:
    """Starts `args` in a new session, not a child of this process (a shell
    starts it in the background and exits), so that it outlives this process,
    is never left a zombie of it, and no signal to this process's group
    reaches it. Its output is appended to `log_path`. Returns its pid."""
    sh = subprocess.run(
        ["/bin/sh", "-c", 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!', "sh",
         str(log_path), *args],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True, check=True)
    return int(sh.stdout.decode().strip())


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, which a container's init may never reap, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"

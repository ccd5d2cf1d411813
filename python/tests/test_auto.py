"""socket="auto" against the build tree's kvtierd: when it starts a daemon, when it
does not, and how a start that cannot work fails.

(python/wheel_tests runs the same from an installed wheel, with workers
starting at once and two vLLM processes.)
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

import kvtier
from kvtier import _auto

from conftest import KVTIERD

LAYOUT = kvtier.Layout(layers=1, kv_heads=1, head_dim=16, dtype="fp32", block_tokens=16)


@pytest.fixture
def auto_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An on-demand socket of this test's own, the build tree's kvtierd, nothing
    at the default socket."""
    sock = tmp_path / "auto" / "kvtierd.sock"
    monkeypatch.setenv("KVTIER_AUTO_SOCKET", str(sock))
    monkeypatch.setenv("KVTIER_KVTIERD", str(KVTIERD))
    monkeypatch.setenv("KVTIER_AUTO_HOST_MEMORY", "64MiB")
    monkeypatch.delenv("KVTIER_SOCKET", raising=False)
    monkeypatch.setattr(_auto, "SYSTEM_SOCKET", str(tmp_path / "nothing-here.sock"))
    return sock


def wait_gone(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and path.exists():
        time.sleep(0.05)
    return not path.exists()


def test_sizes_and_shares() -> None:
    assert _auto.parse_bytes("8GiB", "x") == 8 << 30
    assert _auto.parse_bytes("512MB", "x") == 512 * 1000**2
    assert _auto.parse_bytes(4096, "x") == 4096
    with pytest.raises(kvtier.InvalidArgumentError, match="not a size"):
        _auto.parse_bytes("lots", "host memory")
    assert _auto.host_bytes("1GiB") == 1 << 30
    quarter = _auto.host_bytes(0.25)
    assert quarter % (1 << 20) == 0
    assert 128 << 20 <= quarter <= max(128 << 20, _auto.available_memory() // 4)
    assert _auto.host_bytes("0.5") >= quarter
    with pytest.raises(kvtier.InvalidArgumentError, match="share"):
        _auto.host_bytes(1.5)


def test_the_default_is_auto_only_when_no_daemon_answers_at_the_default_socket(
        auto_env: Path, daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _auto.default_or_auto() == "auto"
    monkeypatch.setattr(_auto, "SYSTEM_SOCKET", daemon.socket)
    assert _auto.default_or_auto() is None  # the operator's daemon
    assert _auto.resolve(None, default_auto=True) == daemon.socket
    monkeypatch.setattr(_auto, "SYSTEM_SOCKET", str(auto_env.parent / "gone.sock"))
    monkeypatch.setenv("KVTIER_SOCKET", str(auto_env.parent / "operators.sock"))
    assert _auto.default_or_auto() is None  # named by the operator, even if silent
    assert not auto_env.parent.exists()  # nothing was started


def test_an_explicit_socket_that_does_not_answer_is_never_auto(auto_env: Path,
                                                               tmp_path: Path) -> None:
    silent = str(tmp_path / "operators.sock")
    assert _auto.resolve(silent) == silent
    assert _auto.resolve(silent, default_auto=True) == silent
    with pytest.raises(kvtier.UnavailableError):
        kvtier.Client("m", LAYOUT, socket=silent)
    assert not auto_env.parent.exists()  # no daemon, no directory for one


def test_auto_starts_one_daemon_that_serves_the_next_client_and_idles_out(
        auto_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("KVTIER_AUTO_IDLE_EXIT_S", "2")
    caplog.set_level(logging.WARNING, logger="kvtier")
    keys = None
    with kvtier.Client("m", LAYOUT, socket="auto") as c:
        started = [r.getMessage() for r in caplog.records if "started kvtierd" in r.getMessage()]
        assert len(started) == 1, caplog.text
        assert f"listening on {auto_env}" in started[0] and "host tier 64 MiB" in started[0]
        assert "no ssd tier" in started[0] and "kill " in started[0]
        assert (auto_env.parent.stat().st_mode & 0o777) == 0o700
        keys = c.block_keys(list(range(32)))
        with c.allocate(keys) as w:
            for i in w.allocated:
                np.asarray(w[i])[:] = i + 1
            w.commit()
        pid = c.stats()["pid"]
        # A second client attaches to the same daemon and starts none.
        caplog.clear()
        with kvtier.Client("m", LAYOUT, socket="auto") as c2:
            assert c2.stats()["pid"] == pid
            assert c2.lookup(keys).hits == 2
        assert not [r for r in caplog.records if "started kvtierd" in r.getMessage()]
        time.sleep(3)  # longer than idle_exit_s, with c still attached: it stays
        assert _auto.listening(str(auto_env))
    # The last client gone, it exits within idle_exit_s (+1 s check, + slack).
    assert wait_gone(auto_env, 15), "the idle daemon did not exit"
    deadline = time.monotonic() + 15
    while _auto._alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _auto._alive(pid), "the idle daemon removed its socket but did not exit"
    assert "no connection for 2 s" in (auto_env.parent / "kvtierd.log").read_text()


def test_a_daemon_that_cannot_start_fails_with_the_end_of_its_log(
        auto_env: Path, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(kvtier.UnavailableError, match="did not come up") as e:
        _auto.ensure_daemon(ssd_dir=str(not_a_dir / "ssd"), start_timeout_s=30)
    assert "kvtierd.log" in str(e.value)
    assert len(str(e.value).splitlines()) > 1  # the log's own words follow
    # The lock is free again: the next start (a sane one) goes ahead.
    sock = _auto.ensure_daemon(idle_exit_s=1)
    assert _auto.listening(sock)
    assert wait_gone(Path(sock), 15)


def test_a_socket_directory_others_may_write_is_refused(auto_env: Path) -> None:
    auto_env.parent.mkdir(mode=0o700)
    os.chmod(auto_env.parent, 0o777)
    with pytest.raises(kvtier.UnavailableError, match="only it may write"):
        _auto.ensure_daemon()
    assert not (auto_env.parent / "kvtierd.log").exists()

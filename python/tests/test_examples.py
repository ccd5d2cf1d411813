"""The README's quick start (python/examples/quickstart.py) runs as written."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_quickstart_runs_against_the_daemon(daemon):
    r = subprocess.run([sys.executable, str(REPO / "python" / "examples" / "quickstart.py"),
                        "--socket", daemon.socket], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "lookup: 2/2 blocks cached" in r.stdout
    assert "block 1 reads 1.5" in r.stdout
    assert "first request: 2020 tokens, 0 from kvtierd" in r.stdout
    assert "second request: 2020 tokens, 2000 from kvtierd" in r.stdout
    assert r.stdout.count("same tokens as without kvtier: True") == 2

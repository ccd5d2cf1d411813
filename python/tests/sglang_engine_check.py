"""The whole SGLang server with kvtierd as its HiCache storage backend: same greedy
tokens with and without it, and a second server (a new process: empty GPU and
host caches) loading the first one's pages from kvtierd.

Needs a GPU and an environment with a CUDA install of SGLang 0.5.23 and kvtier
(``pip install sglang==0.5.23 ./python``): SGLang runs its model on a GPU only, so
this never runs on the project's CPU machines; test_sglang.py runs it where
torch sees a GPU (KVTIER_SGLANG_CUDA_PYTHON names that environment's python).
By hand::

    PYTHON python/tests/sglang_engine_check.py WORKDIR [--kvtierd build-test/daemon/kvtierd]

The model is the tests' tiny Llama (hf_model.py: seeded weights, no download),
served with --skip-tokenizer-init (token ids in, token ids out). Prints one JSON
object; exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket as _socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PROMPT = 700  # tokens: 43 pages of 16, the last partial


def free_port() -> int:
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(workdir: Path, name: str, model: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """sglang.launch_server on a free port, once it answers /health_generate."""
    port = free_port()
    log = open(workdir / f"{name}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model),
         "--skip-tokenizer-init", "--port", str(port), "--page-size", "16",
         "--mem-fraction-static", "0.3", "--disable-cuda-graph", "--random-seed", "0", *extra],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{name}: sglang.launch_server exited; see {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=5):
                return proc, port
        except OSError:
            time.sleep(2)
    stop(proc)
    raise SystemExit(f"{name}: no answer in 900 s; see {log.name}")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def generate(port: int, ids: list[int]) -> dict[str, Any]:
    body = json.dumps({"input_ids": ids, "sampling_params": {"temperature": 0,
                                                              "max_new_tokens": 16}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    return {"tokens": out["output_ids"], "cached": out["meta_info"].get("cached_tokens", 0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--kvtierd", default=str(HERE.parents[1] / "build-test/daemon/kvtierd"))
    a = ap.parse_args()
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    import torch
    from hf_model import prompt, tiny_llama

    model = workdir / "tiny-llama"
    tiny_llama(torch.bfloat16).save_pretrained(model)
    ids = prompt(7, PROMPT)[0].tolist()
    sock = str(workdir / "kvtierd.sock")
    daemon = subprocess.Popen([a.kvtierd, "--socket", sock, "--ssd-dir", "", "--metrics-address",
                               "", "--host-capacity", "1GiB"],
                              stdout=open(workdir / "kvtierd.log", "wb"), stderr=subprocess.STDOUT)
    hicache = ["--enable-hierarchical-cache", "--hicache-ratio", "2",
               "--hicache-mem-layout", "page_first", "--hicache-write-policy", "write_through",
               "--hicache-storage-backend", "dynamic", "--hicache-storage-backend-extra-config",
               json.dumps({"backend_name": "kvtier", "module_path": "kvtier.sglang",
                           "class_name": "KvtierStorage", "interface_v1": 1, "socket": sock})]
    out: dict[str, Any] = {}
    try:
        for name, extra in (("plain", ["--disable-radix-cache"]), ("first", hicache),
                            ("second", hicache)):
            proc, port = serve(workdir, name, model, *extra)
            try:
                out[name] = generate(port, ids)
                if name == "first":
                    time.sleep(5)  # (its write-through to kvtierd runs behind the reply)
            finally:
                stop(proc)  # its GPU and host caches go with it; kvtierd keeps the pages
    finally:
        daemon.terminate()
        daemon.wait()
    want = out["plain"]["tokens"]
    out["checks"] = {
        "first_same_tokens": out["first"]["tokens"] == want,
        "second_same_tokens": out["second"]["tokens"] == want,
        # The second server's GPU and host caches start empty: what it had
        # cached came from kvtierd.
        "second_loaded_from_kvtierd": out["second"]["cached"] >= 16 * 32,
    }
    print(json.dumps(out, indent=1))
    return 0 if all(out["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

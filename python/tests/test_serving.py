"""Serving under faults: `vllm serve` with kvtier.vllm, started as the README
writes it, on the recorded Mooncake trace, while kvtierd is killed with SIGKILL
and restarted, a share of its SSD reads fail, and (with a remote tier) a Redis
Cluster master is killed.

The harness is bench/serving's (the benchmark's own servers, load generator
and token comparison), on the tests' tiny model and a few dozen requests:
every request completes, and every request's greedy output equals that of
vLLM alone, token for token, except where the harness shows a near-tie (the
top two log-probabilities within 1e-4 in both runs), which vLLM's batching may
break either way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.serving import run as serving  # noqa: E402


def test_faults_while_serving_lose_no_request_and_change_no_token(tmp_path, monkeypatch):
    import conftest

    monkeypatch.setenv("KVTIERD", str(conftest.KVTIERD))
    out = tmp_path / "serving"
    assert serving.main([
        "--out", str(out), "--model", "tiny", "--trace", "mooncake", "--requests", "36",
        "--time-scale", "0.03", "--configs", "vllm,kvtier-ssd,kvtier-remote", "--small-host",
        "8MiB", "--ssd", "256MiB", "--faults", "restart@9,ssd-read-errors=0.05,redis-kill@15"]) == 0
    summary = {s["config"]: s for s in json.loads((out / "summary.json").read_text())}
    assert set(summary) == {"vllm", "kvtier-ssd", "kvtier-remote"}, (out / "table.md").read_text()
    base, kv = summary["vllm"], summary["kvtier-ssd"]
    assert base["failed"] == 0 and kv["failed"] == 0, (out / "table.md").read_text()
    assert base["requests"] == kv["requests"] >= 24  # whole sessions, up to 36 requests
    cmp = kv["tokens_vs_baseline"]
    assert cmp["differ"] == 0 and cmp["not_compared"] == 0, cmp
    assert cmp["same"] + cmp["near_ties"] == kv["requests"]

    res = json.loads(next(out.glob("config-*-kvtier-ssd.json")).read_text())
    assert res["restarts"] == 1 and res["events"], res["events"]
    restart_at = res["events"][0]["t"]
    # The faults happened: SSD reads failed, and kvtier still served hits after
    # the restart (the hit rate recovers): requests sent after it found blocks.
    errors = [s["kvtierd"].get("kvtier_io_errors_total", 0) for s in res["samples"]
              if s.get("kvtierd")]
    assert max(errors) > 0, "no SSD read failed"
    after = [r for r in res["results"] if r["sent_s"] > restart_at + 2]
    assert after, "no request after the restart"
    assert sum(r["cached_tokens"] for r in after) > 0
    assert kv["hit_rate"] > base["hit_rate"]

    # vLLM's per-source counter names kvtier's tiers (host, disk), never
    # "external_unspecified"; kvtierd counts the same hits per namespace.
    vllm_last = [s["vllm0"] for s in res["samples"] if s.get("vllm0")][-1]

    def source(name: str) -> float:
        return sum(v for k, v in vllm_last.items()
                   if k.startswith("vllm:prompt_tokens_cached_by_source_total")
                   and f'source="{name}"' in k)

    assert source("host") + source("disk") > 0, vllm_last
    assert source("external_unspecified") == 0
    ns_hits = [sum(v for k, v in s["kvtierd"].items()
                   if k.startswith("kvtier_namespace_hit_tokens_total"))
               for s in res["samples"] if s.get("kvtierd")]
    assert max(ns_hits) > 0

    # With the remote tier: kvtierd killed and restarted (its host tier gone,
    # the cluster keeps what was written back), then the Redis master holding
    # most keys killed; every request completes with the baseline's tokens.
    rm = summary["kvtier-remote"]
    assert rm["failed"] == 0 and rm["requests"] == base["requests"]
    cmp = rm["tokens_vs_baseline"]
    assert cmp["differ"] == 0 and cmp["not_compared"] == 0, cmp
    res = json.loads(next(out.glob("config-*-kvtier-remote.json")).read_text())
    assert res["restarts"] == 1
    kills = [e for e in res["events"] if e["fault"] == "Redis master SIGKILL"]
    assert len(kills) == 1 and kills[0]["keys_on_it"] > 0, res["events"]
    last = [s["kvtierd"] for s in res["samples"] if s.get("kvtierd")][-1]
    remote_hits = sum(v for k, v in last.items()
                      if k.startswith("kvtier_namespace_hit_tokens_total") and 'tier="remote"' in k)
    assert remote_hits > 0, last  # counted since the restart: the cluster served it
    after = [r for r in res["results"] if r["sent_s"] > kills[0]["t"] + kills[0]["took_s"]]
    assert after and sum(r["cached_tokens"] for r in after) > 0
    assert rm["hit_rate"] > base["hit_rate"]

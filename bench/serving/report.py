"""What a serving run measured: per configuration a summary (TTFT and TPOT
percentiles, throughput, hit rate, tokens that differ from the baseline), the
table of all of them, and the plots.

    python -m bench.serving.report RESULTS_DIR   # the table and plots again
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

NEAR_TIE = 1e-4  # top-two log-probabilities this close: either token is the argmax


def percentile(xs: List[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def compare_tokens(run: List[dict], base: List[dict]) -> Dict[str, int]:
    """Request by request: same greedy tokens, or where they first differ, a near-tie
    (in both runs the top two log-probabilities within NEAR_TIE there), or a difference."""
    by_index = {r["index"]: r for r in base}
    same = ties = wrong = missing = 0
    for r in run:
        b = by_index.get(r["index"])
        if b is None or r["error"] or b["error"]:
            missing += 1
            continue
        if r["tokens"] == b["tokens"]:
            same += 1
            continue
        j = next((i for i, (x, y) in enumerate(zip(r["tokens"], b["tokens"])) if x != y),
                 min(len(r["tokens"]), len(b["tokens"])))

        def tied(x: dict) -> bool:
            t = x["top2"][j] if j < len(x["top2"]) else []
            return len(t) == 2 and t[0] - t[1] <= NEAR_TIE

        if tied(r) and tied(b):
            ties += 1
        else:
            wrong += 1
    return {"same": same, "near_ties": ties, "differ": wrong, "not_compared": missing}


def summarize(result: Dict[str, Any], base: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    rs = result["results"]
    ok = [r for r in rs if not r["error"]]
    ttft = [r["ttft_s"] for r in ok]
    hit_ttft = [r["ttft_s"] for r in ok if r["cached_tokens"] > 0]
    tpot = [r["tpot_s"] for r in ok if r["output_tokens"] > 1]
    span = max((r["sent_s"] + r["e2e_s"] for r in rs), default=0.0)
    prompt = sum(r["prompt_tokens"] for r in ok)
    out = {
        "config": result["config"]["name"], "requests": len(rs), "failed": len(rs) - len(ok),
        "ttft_p50_s": percentile(ttft, 0.5), "ttft_p90_s": percentile(ttft, 0.9),
        "ttft_p99_s": percentile(ttft, 0.99), "hit_ttft_p50_s": percentile(hit_ttft, 0.5),
        "tpot_p50_s": percentile(tpot, 0.5),
        "tpot_p90_s": percentile(tpot, 0.9),
        "throughput_tok_s": sum(r["output_tokens"] for r in ok) / span if span else 0.0,
        "requests_per_s": len(ok) / span if span else 0.0,
        "hit_rate": sum(r["cached_tokens"] for r in ok) / prompt if prompt else 0.0,
        "span_s": span,
    }
    if base is not None and base is not result:
        out["tokens_vs_baseline"] = compare_tokens(rs, base["results"])
    return out


def table(summaries: List[Dict[str, Any]], baseline: str) -> str:
    head = ("| configuration | requests (failed) | TTFT p50 / p90 / p99 (s) | TTFT p50 of hits (s) "
            "| TPOT p50 / p90 (ms) | output tok/s | hit rate | vs " + baseline +
            ": same / near-tie / differ |")
    lines = [head, "|" + "---|" * 8]
    for s in summaries:
        cmp = s.get("tokens_vs_baseline")
        cmp_s = (f"{cmp['same']} / {cmp['near_ties']} / {cmp['differ']}" if cmp else "—")
        lines.append(
            f"| {s['config']} | {s['requests']} ({s['failed']}) | {s['ttft_p50_s']:.3f} / "
            f"{s['ttft_p90_s']:.3f} / {s['ttft_p99_s']:.3f} | {s['hit_ttft_p50_s']:.3f} | "
            f"{s['tpot_p50_s'] * 1000:.1f} / {s['tpot_p90_s'] * 1000:.1f} | "
            f"{s['throughput_tok_s']:.1f} | {s['hit_rate']:.1%} | {cmp_s} |")
    return "\n".join(lines) + "\n"


def plots(results: List[Dict[str, Any]], out_dir: Path) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for res in results:
        ttft = sorted(r["ttft_s"] for r in res["results"] if not r["error"])
        if ttft:
            ax.plot(ttft, [(i + 1) / len(ttft) for i in range(len(ttft))],
                    label=res["config"]["name"])
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT CDF per configuration")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out_dir / "ttft_cdf.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    for res in results:
        name, samples = res["config"]["name"], res.get("samples", [])
        # vLLM's own hits plus the connector's, over the prompt tokens asked for,
        # since the start of the run (every replica).
        hit_t, hit_y = [], []
        base = None
        for s in samples:
            ms = [m for k, m in s.items() if k.startswith("vllm") and m]
            if not ms:
                continue
            hits = sum(v for m in ms for k, v in m.items()
                       if k.startswith(("vllm:prefix_cache_hits_total",
                                        "vllm:external_prefix_cache_hits_total")))
            q = sum(v for m in ms for k, v in m.items()
                    if k.startswith("vllm:prefix_cache_queries_total"))
            if base is None:
                base = (hits, q)
            if q - base[1] > 0:
                hit_t.append(s["t"])
                hit_y.append(min(1.0, (hits - base[0]) / (q - base[1])))
        if hit_t:
            a1.plot(hit_t, hit_y, label=name, lw=1)
        for tier in ("host", "ssd"):
            ts, ys = [], []
            for s in samples:
                m = s.get("kvtierd")
                if m:
                    v = m.get(f'kvtier_tier_used_bytes{{tier="{tier}"}}')
                    if v is not None:
                        ts.append(s["t"])
                        ys.append(v / 2**20)
            if ts and max(ys) > 0:
                a2.plot(ts, ys, label=f"{name}: {tier}", lw=1)
    a1.set_ylabel("prompt tokens cached, so far")
    a1.set_ylim(0, 1.05)
    a1.grid(True, alpha=0.3)
    a1.legend(fontsize=7)
    a2.set_ylabel("kvtierd tier used (MiB)")
    a2.set_xlabel("seconds into the run")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=7)
    fig.tight_layout()
    written.append(out_dir / "hit_rate_and_tiers.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def report(out_dir: Path, baseline: Optional[str] = None) -> str:
    results = [json.loads(p.read_text()) for p in sorted(out_dir.glob("config-*.json"))]
    results.sort(key=lambda r: r["config"].get("order", 0))
    if not results:
        raise SystemExit(f"no config-*.json in {out_dir}")
    baseline = baseline or results[0]["config"]["name"]
    base = next((r for r in results if r["config"]["name"] == baseline), results[0])
    summaries = [summarize(r, base) for r in results]
    (out_dir / "summary.json").write_text(json.dumps(summaries, indent=1))
    text = table(summaries, baseline)
    (out_dir / "table.md").write_text(text)
    plots(results, out_dir)
    return text


if __name__ == "__main__":
    print(report(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))

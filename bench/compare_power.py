"""How often `tokenload compare` flags a real TTFT slowdown, and how often it flags nothing but
chance (issue #16): synthetic runs with lognormal latencies, by CV and requests per run.

    python bench/compare_power.py [--pairs 40] [--slowdown 0.2] [--json]

Per (CV, n): the share of pairs with a planted slowdown of TTFT flagged as a ttft_ms p50
regression (detection) and the share of identical-configuration pairs with any regression
flagged (false alarm), at the default tolerance (10 %) and confidence (99 %).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenload.report.compare_math import compare_runs


def run(seed: int, n: int, median: float, cv: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    sigma = float(np.sqrt(np.log(1 + cv * cv)))
    ttft = median * rng.lognormal(0, sigma, n)
    tpot = 10.0 * rng.lognormal(0, sigma, n)
    e2e = 900.0 * rng.lognormal(0, sigma, n)
    recs = [
        {"step": 0, "phase": "measure", "status": "ok", "wall_start": float(i), "ttft_ms": float(a),
         "tpot_ms": float(t), "e2e_ms": float(e), "itl_p50_ms": float(t), "itl_p99_ms": float(3 * t)}
        for i, (a, t, e) in enumerate(zip(ttft, tpot, e2e, strict=True))
    ]  # fmt: skip

    def pcts(v: np.ndarray) -> dict[str, float]:
        return {"p50": float(np.quantile(v, 0.5)), "p99": float(np.quantile(v, 0.99))}

    step = {"index": 0, "concurrency": 32, "target_rate_rps": None, "measured_s": 60.0,
            "requests_per_s": n / 60, "output_tokens_per_s": n / 60 * 90, "ttft_ms": pcts(ttft),
            "tpot_ms": pcts(tpot), "itl_ms": pcts(tpot), "e2e_ms": pcts(e2e), "flags": []}  # fmt: skip
    return {"run_id": str(seed), "steps": [step], "config": {}}, recs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--slowdown", type=float, default=0.2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for cv in (0.3, 0.5, 1.0):
        for n in (300, 1000, 3000):
            hit = alarm = 0
            for i in range(args.pairs):
                base = 10_000 * i + int(cv * 100) * 10 + n
                a, ra = run(base, n, 200.0, cv)
                b, rb = run(base + 1, n, 200.0 * (1 + args.slowdown), cv)
                c = compare_runs(a, ra, b, rb, seed=i, rounds=500)
                hit += any(m.metric == "ttft_ms p50" for _, m in c.regressions)
                b, rb = run(base + 2, n, 200.0, cv)
                alarm += bool(compare_runs(a, ra, b, rb, seed=i, rounds=500).regressions)
            rows.append(
                {"cv": cv, "requests": n, "detection": hit / args.pairs, "false_alarm": alarm / args.pairs}
            )
    if args.json:
        print(json.dumps({"slowdown": args.slowdown, "pairs": args.pairs, "rows": rows}))
        return 0
    print(f"planted TTFT slowdown {args.slowdown:+.0%}, {args.pairs} pairs per cell")
    print(f"{'CV':>5} {'requests':>9} {'detection':>10} {'false alarm':>12}")
    for r in rows:
        print(f"{r['cv']:>5} {r['requests']:>9} {r['detection']:>10.0%} {r['false_alarm']:>12.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

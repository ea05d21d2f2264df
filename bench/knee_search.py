"""Knee search against a full staircase, side by side: where each finds saturation, and the load
time each spends. Prints JSON.

Both are ``tokenload sweep`` runs against a fresh built-in emulator (same profile, same
workload): the staircase runs every step of ``--concurrency`` (default 1:256:x2, what one runs
not knowing where the knee is); the knee search climbs with short probes and bisects. Load time
= from the first step's start (its users reached) to the last step's end, on the master's clock.
The target (issue #5): the same saturation concurrency within one geometric step (a factor of
2), in at most half the load time.

    python bench/knee_search.py [--step-duration 10] [--repeats 1] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _harness import machine, run_sweep, write_results_section  # noqa: E402


def _sweep(out: Path, args: list[str]) -> dict:
    summary, wall = run_sweep(out, args)
    steps = summary["steps"]
    knee = summary.get("knee") or {}
    return {
        "saturated_at": knee.get("concurrency"),
        "last_unsaturated": knee.get("last_unsaturated_concurrency"),
        "bottleneck": knee.get("bottleneck"),
        "steps": [
            {
                "concurrency": s["concurrency"],
                "output_tokens_per_s": round(s["output_tokens_per_s"], 1),
                "server_tokens_per_s": round(
                    ((s.get("server") or {}).get("generation_tokens") or {}).get("rate_per_s") or 0, 1
                ),
                "ttft_ms_p50": round(s["ttft_ms"]["p50"] or 0, 1),
                "bottleneck": s["verdict"]["bottleneck"],
                "client": s["client"],
            }
            for s in steps
        ],
        "load_time_s": round(steps[-1]["end"] - steps[0]["start"], 1),
        "wall_s": round(wall, 1),
        "outcome": (summary.get("search") or {}).get("outcome"),
        "stop_reason": (summary.get("search") or {}).get("stop_reason"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-duration", type=float, default=10.0)
    p.add_argument("--concurrency", default="1:256:x2", help="the full staircase")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--prompt-tokens", default="128")
    p.add_argument("--output-tokens", default="64")
    p.add_argument("--sim-args", default="", help="emulator arguments (profile, ...)")
    args = p.parse_args()
    common = [
        "--step-duration", str(args.step_duration), "--workers", str(args.workers),
        "--prompt-tokens", args.prompt_tokens, "--output-tokens", args.output_tokens,
    ]  # fmt: skip
    if args.sim_args:
        common += ["--sim-args", args.sim_args]
    runs = []
    with tempfile.TemporaryDirectory(prefix="knee-bench-") as tmp:
        for i in range(args.repeats):
            stair = _sweep(Path(tmp) / f"stair{i}", ["--concurrency", args.concurrency, *common])
            knee = _sweep(Path(tmp) / f"knee{i}", ["--shape", "knee", *common])
            a, b = stair["saturated_at"], knee["saturated_at"]
            runs.append(
                {
                    "staircase": stair,
                    "knee": knee,
                    "load_time_ratio": round(knee["load_time_s"] / stair["load_time_s"], 3),
                    "within_one_geometric_step": bool(a and b and abs(math.log2(b / a)) <= 1.0),
                }
            )
    ratios = [r["load_time_ratio"] for r in runs]
    result = {
        "bench": "knee_search",
        "config": vars(args),
        "load_time_ratio_median": statistics.median(ratios),
        "all_within_one_geometric_step": all(r["within_one_geometric_step"] for r in runs),
        "target": "same knee within a factor of 2, load time ratio <= 0.5",
        "runs": runs,
    }
    print(json.dumps(result, indent=2))
    write_results_section("knee", results_markdown(result, " ".join(sys.argv[1:])))


def results_markdown(result: dict, argv: str) -> str:
    """bench/RESULTS.md's "Knee search" section: one row per shape and repeat."""
    rows = []
    for i, r in enumerate(result["runs"]):
        for shape in ("staircase", "knee"):
            x = r[shape]
            marks = ["*" if s["bottleneck"] not in ("none", None) else "" for s in x["steps"]]
            loads = ", ".join(f"{s['concurrency']}{m}" for s, m in zip(x["steps"], marks, strict=True))
            rows.append(
                f"| {i + 1} | {shape} | {loads} | {x['last_unsaturated']} .. {x['saturated_at']} "
                f"({x['bottleneck']}) | {x['load_time_s']} |"
            )
    return "\n".join(
        [
            "## Knee search against a full staircase (issue #5)",
            "",
            f"`python bench/knee_search.py {argv}`".replace(" `", "`") + f" on {machine()}:",
            "two `tokenload sweep` runs on fresh built-in emulators (same profile and workload). Steps in",
            "the order run; `*` = judged saturated. Target: the same knee within a factor of 2, at most",
            "half the load time.",
            "",
            "| repeat | shape | steps (concurrency) | knee: last unsaturated .. saturated | load time (s) |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Load time ratio (knee / staircase), median: **{result['load_time_ratio_median']}**; same knee",
            f"within a factor of 2 in every repeat: **{result['all_within_one_geometric_step']}**.",
        ]
    )


if __name__ == "__main__":
    main()

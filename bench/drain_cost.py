"""What --drain costs and what it changes, side by side: the same staircase with and without
it. Prints JSON and writes bench/RESULTS.md's "drain" section.

Each run is a ``tokenload sweep`` against a fresh built-in emulator (same profile, workload and
steps; runs alternate plain/drain). Per run: the wall time, the load time (first step's clock
start to last step's end, master clock) and, per step, the drain (step end to nothing in
flight), the requests in flight when the step's clock started (from requests.jsonl: what the
previous step left streaming into it) and TTFT/TPOT p50 and output tokens/s. The default
staircase goes up then down with long outputs and short steps, where carry-over is largest.

    python bench/drain_cost.py [--concurrency 4,32,4] [--step-duration 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _harness import machine, run_sweep, write_results_section  # noqa: E402


def _sent(r: dict) -> float:
    return r["wall_start"] + (r.get("send_lag_ms") or 0) / 1000


def _sweep(out: Path, args: list[str]) -> dict:
    summary, wall = run_sweep(out, args)
    steps = summary["steps"]
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    spans = [
        (_sent(r), r["wall_start"] + (r.get("e2e_ms") or 0) / 1000)
        for r in records
        if r["status"] != "cancelled"
    ]
    return {
        "wall_s": round(wall, 1),
        "load_time_s": round(steps[-1]["end"] - steps[0]["start"], 1),
        "steps": [
            {
                "concurrency": s["concurrency"],
                "drain_s": round(s["drain"]["s"], 2) if s.get("drain") else None,
                "in_flight_at_start": sum(1 for a, b in spans if a < s["start"] < b),
                "ttft_ms_p50": round(s["ttft_ms"]["p50"] or 0, 1),
                "tpot_ms_p50": round(s["tpot_ms"]["p50"] or 0, 2),
                "output_tokens_per_s": round(s["output_tokens_per_s"], 1),
                "requests_ok": s["requests"]["ok"],
            }
            for s in steps
        ],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="4,32,4")
    p.add_argument("--step-duration", type=float, default=8.0)
    p.add_argument("--warmup", default="2")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--prompt-tokens", default="256")
    p.add_argument("--output-tokens", default="512")
    p.add_argument("--sim-args", default="--profile h100-llama3.1-8b")
    args = p.parse_args()
    common = [
        "--concurrency", args.concurrency, "--step-duration", str(args.step_duration),
        "--warmup", args.warmup, "--workers", str(args.workers), "--prompt-tokens", args.prompt_tokens,
        "--output-tokens", args.output_tokens, "--sim-args", args.sim_args,
    ]  # fmt: skip
    runs: dict[str, list[dict]] = {"plain": [], "drain": []}
    with tempfile.TemporaryDirectory(prefix="drain-bench-") as tmp:
        for i in range(args.repeats):
            runs["plain"].append(_sweep(Path(tmp) / f"plain{i}", common))
            runs["drain"].append(_sweep(Path(tmp) / f"drain{i}", [*common, "--drain"]))

    def med(mode: str, key: str, step: int | None = None) -> float:
        vals = [r[key] if step is None else r["steps"][step][key] for r in runs[mode]]
        return statistics.median(vals)

    n_steps = len(runs["plain"][0]["steps"])
    result = {
        "bench": "drain_cost",
        "config": vars(args),
        "wall_s_ratio_median": round(med("drain", "wall_s") / med("plain", "wall_s"), 3),
        "load_time_ratio_median": round(med("drain", "load_time_s") / med("plain", "load_time_s"), 3),
        "per_step_median": [
            {
                "concurrency": runs["plain"][0]["steps"][k]["concurrency"],
                **{
                    f"{key}_{mode}": med(mode, key, k)
                    for key in ("in_flight_at_start", "ttft_ms_p50", "tpot_ms_p50", "output_tokens_per_s")
                    for mode in ("plain", "drain")
                },
                "drain_s": med("drain", "drain_s", k),
            }
            for k in range(n_steps)
        ],
        "runs": runs,
    }
    print(json.dumps(result, indent=2))
    write_results_section("drain", results_markdown(result, " ".join(sys.argv[1:])))


def results_markdown(result: dict, argv: str) -> str:
    rows = [
        f"| {s['concurrency']} | {s['in_flight_at_start_plain']} / {s['in_flight_at_start_drain']} "
        f"| {s['drain_s']} | {s['ttft_ms_p50_plain']} / {s['ttft_ms_p50_drain']} "
        f"| {s['tpot_ms_p50_plain']} / {s['tpot_ms_p50_drain']} "
        f"| {s['output_tokens_per_s_plain']} / {s['output_tokens_per_s_drain']} |"
        for s in result["per_step_median"]
    ]
    return "\n".join(
        [
            "## What --drain costs (issue #16)",
            "",
            f"`python bench/drain_cost.py {argv}`".replace(" `", "`") + f" on {machine()}:",
            "the same staircase with and without `--drain` (fresh emulator each run, alternating),",
            f"{result['config']['repeats']} runs each; medians, plain / drain.",
            "",
            "| users | in flight at its start | drain (s) | TTFT p50 (ms) | TPOT p50 (ms) | output tok/s |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Wall time ratio (drain / plain), median: **{result['wall_s_ratio_median']}**; load time ratio:",
            f"**{result['load_time_ratio_median']}**. In flight at its start: requests streaming when the",
            "step's clock started (the previous step's, or its settle's). Going down, a plain run's",
            "stopped users first finish the request they are on; drained ones are waiting and stop at",
            "once. Output tok/s counts requests that *ended* in the measured part: with one output",
            "length and a measured part one or two requests long it moves in whole waves of users, in",
            "either mode (--drain spreads the start over half the warm-up, here shorter than one request,",
            "which does not spread completions over a whole one); the table shows that, not a throughput",
            "difference.",
        ]
    )


if __name__ == "__main__":
    main()

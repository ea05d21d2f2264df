"""The SLO capacity search against a fine rate staircase, side by side: the highest rate each
finds meeting the SLO, and the load time each spends. Prints JSON.

Both are ``tokenload sweep`` runs against a fresh built-in emulator (same profile, workload and
arrival process). The staircase climbs ``--start`` x ``--fine`` per step (10 % apart by default:
the search's own resolution) and stops once two steps in a row break the SLO (``--stop-slo``),
as one would run it by hand; its answer is the highest step of the unbroken run of passing steps
from the lowest (point estimates, report/capacity.py). The search (``--shape slo``) grows x2 and
bisects to ``--slo-resolution 0.1``, judging each probe on its 95 % intervals. Load time = from
the first step's start to the last step's end, on the master's clock. The target (issue #18):
the search's answer within 10 % of the staircase's, in at most half its load time.

    python bench/slo_search.py [--slo ttft_p90_ms=200,tpot_p90_ms=60] [--repeats 1] \
        [--search-args "--slo-repeats 0"]
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
sys.path.insert(0, str(ROOT))

from _harness import machine, run_sweep, write_results_section  # noqa: E402

from tokenload.report.capacity import find_capacity, parse_slo  # noqa: E402


def _steps(summary: dict) -> list[dict]:
    return [
        {
            "rate_rps": s["target_rate_rps"],
            "ttft_ms_p90": s["ttft_ms"]["p90"],
            "tpot_ms_p90": s["tpot_ms"]["p90"],
            "requests": (s.get("requests") or {}).get("ok"),
        }
        for s in summary["steps"]
    ]


def _probe(pr: dict, steps: list[dict]) -> dict:
    """A probe, with where its step's time went (master clock): ``gap_s`` from the previous
    step's end to this step's start (its settle, drain and ramp), ``warmup_s`` before its
    measured part."""
    step = next((s for s in steps if s["index"] == pr["step"]), None)
    before = [s for s in steps if step is not None and s["end"] <= step["start"]]
    return {
        "rate_rps": round(pr["rate_rps"], 3),
        "outcome": pr["outcome"],
        "duration_s": round(pr["duration_s"], 1),
        "screen": bool(pr.get("screen")),
        "gap_s": round(step["start"] - before[-1]["end"], 1) if step and before else None,
        "warmup_s": round(step["measure_start"] - step["start"], 1) if step else None,
    }


def _load_time(summary: dict) -> float:
    steps = summary["steps"]
    return round(steps[-1]["end"] - steps[0]["start"], 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slo", default="ttft_p90_ms=200,tpot_p90_ms=60")
    p.add_argument("--start", type=float, default=2.0, help="lowest rate of both (req/s)")
    p.add_argument("--max", type=float, default=128.0, help="highest rate of both (req/s)")
    p.add_argument("--fine", type=float, default=1.1, help="the staircase's factor per step")
    p.add_argument("--step-duration", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--prompt-tokens", default="128")
    p.add_argument("--output-tokens", default="64")
    p.add_argument("--sim-args", default="", help="emulator arguments (profile, ...)")
    p.add_argument(
        "--search-args", default="", help="more options of the search only, e.g. '--slo-repeats 0'"
    )
    args = p.parse_args()
    slo = parse_slo(args.slo)
    common = [
        "--step-duration", str(args.step_duration), "--workers", str(args.workers),
        "--prompt-tokens", args.prompt_tokens, "--output-tokens", args.output_tokens,
        "--arrival", "poisson", "--max-in-flight", "1024",
    ]  # fmt: skip
    if args.sim_args:
        common += ["--sim-args", args.sim_args]
    runs = []
    with tempfile.TemporaryDirectory(prefix="slo-bench-") as tmp:
        for i in range(args.repeats):
            stair, stair_wall = run_sweep(
                Path(tmp) / f"stair{i}",
                ["--shape", "rate", "--rate", f"{args.start:g}:{args.max:g}:x{args.fine:g}",
                 "--stop-slo", args.slo, "--stop-slo-steps", "2", *common],
            )  # fmt: skip
            search, search_wall = run_sweep(
                Path(tmp) / f"search{i}",
                ["--shape", "slo", "--slo", args.slo, "--slo-start", f"{args.start:g}",
                 "--slo-max", f"{args.max:g}", "--slo-resolution", "0.1", *args.search_args.split(),
                 *common],
            )  # fmt: skip
            cap = find_capacity(stair["steps"], slo)
            stair_rate = cap.load if cap is not None else None
            found = (search.get("search") or {}).get("slo_capacity_rps")
            runs.append(
                {
                    "staircase": {
                        "capacity_rps": stair_rate,
                        "load_time_s": _load_time(stair),
                        "wall_s": round(stair_wall, 1),
                        "steps": _steps(stair),
                    },
                    "search": {
                        "capacity_rps": found,
                        "bracket": search["search"]["bracket"],
                        "outcome": search["search"]["outcome"],
                        "load_time_s": _load_time(search),
                        "wall_s": round(search_wall, 1),
                        "probes": [_probe(pr, search["steps"]) for pr in search["search"]["probes"]],
                    },
                    "rate_ratio": (round(found / stair_rate, 3) if found and stair_rate else None),
                    "load_time_ratio": round(_load_time(search) / _load_time(stair), 3),
                }
            )
    ratios = [r["load_time_ratio"] for r in runs]
    within = [r["rate_ratio"] is not None and abs(r["rate_ratio"] - 1) <= 0.1 for r in runs]
    result = {
        "bench": "slo_search",
        "config": vars(args),
        "load_time_ratio_median": statistics.median(ratios),
        "rate_ratio_median": statistics.median([r["rate_ratio"] or 0 for r in runs]),
        "all_within_10_percent": all(within),
        "target": "search's rate within 10 % of the fine staircase's, load time ratio <= 0.5",
        "runs": runs,
    }
    print(json.dumps(result, indent=2))
    write_results_section("slo_search", results_markdown(result, " ".join(sys.argv[1:])))


#: How the results table marks each probe's outcome.
_MARK = {"pass": "", "fail": "*", "indeterminate": "?"}


def results_markdown(result: dict, argv: str) -> str:
    """bench/RESULTS.md's "SLO search" section: one row per shape and repeat."""
    rows = []
    for i, r in enumerate(result["runs"]):
        s, q = r["staircase"], r["search"]
        n = len(s["steps"])
        rows.append(f"| {i + 1} | fine staircase | {n} steps | {s['capacity_rps']} | {s['load_time_s']} |")
        probes = ", ".join(
            f"{p['rate_rps']:g}{_MARK[p['outcome']]}{' (s)' if p.get('screen') else ''}" for p in q["probes"]
        )
        rows.append(f"| {i + 1} | slo search | {probes} | {q['capacity_rps']} | {q['load_time_s']} |")
    cfg = result["config"]
    return "\n".join(
        [
            "## SLO capacity search against a fine rate staircase (issue #18)",
            "",
            f"`python bench/slo_search.py {argv}`".replace(" `", "`") + f" on {machine()}:",
            f"SLO `{cfg['slo']}`, Poisson arrivals, rates {cfg['start']:g} to {cfg['max']:g} req/s; the",
            f"staircase x{cfg['fine']:g} per step until two steps break the SLO, the search x2 then",
            "bisection to 10 %. Probes in the order run: `*` failed, `?` indeterminate (its interval",
            "lies across a limit, or too few requests bound it), `(s)` a screen (a climbing probe held",
            "for the step duration and climbed past on its point estimates).",
            "",
            "| repeat | shape | steps | highest rate meeting the SLO (req/s) | load time (s) |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Search / staircase, medians: rate **{result['rate_ratio_median']}**, load time "
            f"**{result['load_time_ratio_median']}**; within 10 % in every repeat: "
            f"**{result['all_within_10_percent']}**.",
        ]
    )


if __name__ == "__main__":
    main()

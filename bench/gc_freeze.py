"""Why the processes that send requests freeze the garbage collector (``--no-gc-freeze``
turns it off), side by side in one run: the same open-loop rate sweep against the built-in
emulator, alternately with and without the freeze, and what the client's own timing looks like
in each: send lag (an arrival's actual send after its scheduled time: what a collector pause
delays), the event loop's lag, and the worker's CPU. Prints JSON.

    python bench/gc_freeze.py [--rate 60] [--repeats 3] [--step-duration 30]
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

from _harness import machine, pct, rounded, run_sweep, write_results_section  # noqa: E402

VARIANTS = {"freeze (default)": [], "no freeze (--no-gc-freeze)": ["--no-gc-freeze"]}


def _measure(run_dir: Path, summary: dict) -> dict:
    lags = []
    with open(run_dir / "requests.jsonl") as fh:
        for line in fh:
            r = json.loads(line)
            if r.get("phase") == "measure" and r.get("send_lag_ms") is not None:
                lags.append(r["send_lag_ms"])
    client = summary["steps"][-1]["client"]
    return {
        "requests": len(lags),
        "send_lag_ms_p50": rounded(pct(lags, 0.5)),
        "send_lag_ms_p99": rounded(pct(lags, 0.99)),
        "send_lag_ms_max": rounded(max(lags) if lags else None),
        "loop_lag_ms_p99": rounded(client.get("loop_lag_ms_p99")),
        "cpu_percent_max": client.get("cpu_percent_max"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=60.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step-duration", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    common = [
        "--shape", "rate", "--rate", f"{args.rate:g}", "--arrival", "poisson",
        "--step-duration", str(args.step_duration), "--warmup", "3", "--workers", str(args.workers),
        "--prompt-tokens", "160", "--output-tokens", "13", "--max-in-flight", "512",
    ]  # fmt: skip
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="gc-bench-") as tmp:
        for i in range(args.repeats):  # alternated, so drift on the machine hits both alike
            for name, extra in VARIANTS.items():
                out = Path(tmp) / f"{i}-{'off' if extra else 'on'}"
                summary, _ = run_sweep(out, [*common, *extra])
                runs[name].append(_measure(out, summary))
    medians = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0] if rs[0][k] is not None}
        for name, rs in runs.items()
    }
    on, off = (medians[n] for n in VARIANTS)
    result = {
        "bench": "gc_freeze",
        "config": vars(args),
        "medians": medians,
        "ratio_send_lag_p99_off_over_on": rounded(off["send_lag_ms_p99"] / on["send_lag_ms_p99"], 2),
        "ratio_loop_lag_p99_off_over_on": rounded(off["loop_lag_ms_p99"] / on["loop_lag_ms_p99"], 2),
        "runs": runs,
    }
    print(json.dumps(result, indent=2))
    write_results_section("gc_freeze", results_markdown(result, " ".join(sys.argv[1:])))


def results_markdown(result: dict, argv: str) -> str:
    cfg = result["config"]
    rows = [
        f"| {name} | {m['send_lag_ms_p50']:.2f} | {m['send_lag_ms_p99']:.2f} | {m['send_lag_ms_max']:.1f} "
        f"| {m['loop_lag_ms_p99']:.2f} | {m['cpu_percent_max']:g} |"
        for name, m in result["medians"].items()
    ]
    return "\n".join(
        [
            "## The GC freeze in the sending processes (issue #20 item 6)",
            "",
            f"`python bench/gc_freeze.py {argv}`".replace(" `", "`") + f" on {machine()}: the emulator and",
            f"{cfg['workers']} workers, {cfg['rate']:g} req/s Poisson, {cfg['step_duration']:g} s steps, "
            f"{cfg['repeats']} runs of each, alternated; medians over runs.",
            "",
            "| variant | send lag p50 (ms) | p99 (ms) | max (ms) | loop lag p99 (ms) | worker CPU max (%) |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Without / with the freeze: send lag p99 x{result['ratio_send_lag_p99_off_over_on']}, "
            f"loop lag p99 x{result['ratio_loop_lag_p99_off_over_on']}.",
        ]
    )


if __name__ == "__main__":
    main()

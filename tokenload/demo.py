"""``tokenload demo`` (``make demo``): the reference experiments against the built-in emulator.

1. Prompt length at concurrency 1 (121, 511, 2041, 8191 tokens in, 64 out), next to the
   published vLLM 0.6.6 / A40 / Qwen2.5-7B measurements the emulator's default profile was
   *fitted* to: an in-sample check (that the emulator runs as fitted), not a validation.
2. A concurrency staircase with short prompts, then with long prompts, each with the per-step
   verdict (what saturated) and the run directory.

Everything runs on loopback with no GPU, in a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tokenload.cli_args import OneLineParser
from tokenload.results.rundir import DEFAULT_REPORTS_DIR, new_run_id

__all__ = ["main"]

#: Published measurements (llm-inference-lab write-up: vLLM 0.6.6.post1, Qwen2.5-7B-Instruct,
#: one A40, concurrency 1, 64 output tokens): input tokens -> (TTFT ms, TPOT ms).
REFERENCE = {121: (37.3, 29.07), 511: (73.6, 28.86), 2041: (261.8, 28.96), 8191: (1736.0, 30.70)}


def _held_out_line() -> str:
    """Each built-in profile's worst error on the public measurements held out of its fit
    (tokenload.sim.published), computed now in simulated time."""
    from tokenload.sim.published import POINTS, errors, predict

    worst: dict[str, tuple[float, str]] = {}
    for point in POINTS:
        if point.role != "held_out":
            continue
        for metric, err in errors(point, predict(point)).items():
            if abs(err) >= abs(worst.get(point.profile, (0.0, ""))[0]):
                worst[point.profile] = (err, metric)
    parts = [f"{name} {100 * e:+.0f} % ({m})" for name, (e, m) in sorted(worst.items())]
    return (
        "out of sample (public vLLM measurements at concurrency > 1, held out of every fit), the "
        "worst error per profile: " + "; ".join(parts) + " (bench/RESULTS.md)"
    )


def _findings(output: str) -> str:
    """What tokenload sweep says after the load (its step table, the knee, the report), without
    Locust's request and percentile tables before it."""
    lines = output.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.lstrip().startswith("step ") and "req/s" in line), None
    )
    return "\n".join(lines[start:]) if start is not None else ""


def _sweep(out: Path, *args: str, verbose: bool = False) -> dict | None:
    """One tokenload sweep; its findings printed (with ``verbose``, all it printed: Locust's
    tables too)."""
    cmd = [sys.executable, "-m", "tokenload", "sweep", "--workers", "0", "--out", str(out), *args]
    print("$ tokenload sweep " + " ".join(cmd[4:]), flush=True)
    if verbose:
        rc, output = subprocess.call(cmd), ""
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    path = out / "summary.json"
    if rc not in (0, 1) or not path.exists():
        print(output[-3000:], file=sys.stderr)
        print(f"tokenload demo: the sweep failed (exit {rc}); see {out}", file=sys.stderr)
        return None
    if output:
        print(_findings(proc.stdout), flush=True)
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="tokenload demo", description=__doc__)
    p.add_argument("--quick", action="store_true", help="shorter steps (a smoke run)")
    p.add_argument(
        "--verbose", action="store_true", help="show every sub-run's full output (Locust's tables)"
    )
    args = p.parse_args(argv)
    base = Path(DEFAULT_REPORTS_DIR) / f"demo-{new_run_id()}"
    step_s = "6" if args.quick else "12"

    print("== 1. Prompt length at concurrency 1 (preset v0, as the reference's vLLM 0.6.6) ==", flush=True)
    rows = []
    for n in REFERENCE:
        s = _sweep(
            base / f"context-{n}", "--concurrency", "1", "--step-duration", "8" if n < 8191 else "14",
            "--warmup", "0.25", "--prompt-tokens", str(n), "--output-tokens", "64",
            "--sim-args", "--preset v0 --max-model-len 16384",
            verbose=args.verbose,
        )  # fmt: skip
        if s is None:
            return 1
        step = s["steps"][0]
        rows.append((n, step["ttft_ms"]["p50"], step["tpot_ms"]["p50"], *REFERENCE[n]))
    print(
        f"\n{'input tokens':>12} {'TTFT p50 ms':>12} {'reference':>10} {'TPOT p50 ms':>12} {'reference':>10}"
    )
    for n, ttft, tpot, rttft, rtpot in rows:
        print(f"{n:>12} {ttft:>12.1f} {rttft:>10.1f} {tpot:>12.2f} {rtpot:>10.2f}")
    print(
        "(the A40 profile was fitted to these reference numbers: agreement here is in sample, not a "
        "validation)"
    )
    print(_held_out_line(), flush=True)

    print("\n== 2. Concurrency staircase, short prompts (128 in, 64 out) ==", flush=True)
    short = _sweep(
        base / "concurrency-short", "--concurrency", "1,4,16,64,256", "--step-duration", step_s,
        "--prompt-tokens", "128", "--output-tokens", "64", verbose=args.verbose,
    )  # fmt: skip
    print("\n== 3. Concurrency staircase, long prompts (4096 in, 64 out) ==", flush=True)
    long_step_s = "10" if args.quick else "15"
    long = _sweep(
        base / "concurrency-long", "--concurrency", "1,2,4,8", "--step-duration", long_step_s,
        "--prompt-tokens", "4096", "--output-tokens", "64", verbose=args.verbose,
    )  # fmt: skip
    if short is None or long is None:
        return 1
    print(f"\nall runs: {base}/")
    for name in ("concurrency-short", "concurrency-long"):
        html = base / name / "report.html"
        print(f"  {name}: {html if html.exists() else base / name / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

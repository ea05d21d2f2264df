"""``tokenload compare DIR_A DIR_B``: two runs step by step (matched by load): the change of each
latency percentile and rate, whether it is beyond run-to-run noise, and the verdict change.

Prints markdown (``--json``: the same as one JSON object); ``--out FILE`` also writes it (JSON
when FILE ends in .json). Exit status 1
when B regressed (latency up or throughput down by more than ``--tolerance`` and beyond noise;
the rule is in tokenload/report/compare_math.py), 0 otherwise, 2 on bad input and when no step
of A matches a step of B by load (a staircase against rate steps): nothing compared is no pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenload.cli_args import OneLineParser
from tokenload.report.compare_math import CONFIDENCE, DEFAULT_TOLERANCE, compare_runs
from tokenload.report.compare_text import render_markdown
from tokenload.report.rundir import ReportError, load_run

__all__ = ["build_parser", "main"]

PROG = "tokenload compare"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} DIR_A DIR_B [--baseline-runs DIR [DIR ...]] [options]",
    )
    # Optional here so that DIR_A DIR_B may also follow --baseline-runs' directories (main).
    p.add_argument("run_a", metavar="DIR_A", nargs="?", help="the baseline run directory")
    p.add_argument("run_b", metavar="DIR_B", nargs="?", help="the run under test")
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="relative change beyond which a worse metric is a regression (default 0.1 = 10 %%)",
    )
    p.add_argument(
        "--baseline-runs",
        nargs="+",
        default=[],
        metavar="DIR",
        help="further runs of DIR_A's configuration: how far they spread is the run-to-run noise to exceed",
    )
    p.add_argument("--out", default=None, help="write the comparison here (.json: JSON; else markdown)")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    p.add_argument(
        "--allow-workload-change",
        action="store_true",
        help="compare B though it sent other requests than A (e.g. the same workload file at another path); "
        "the differences are listed with the configuration's",
    )
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default 0)")
    p.add_argument(
        "--confidence", type=float, default=CONFIDENCE, help="noise interval coverage (default 0.99)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Intermixed: DIR_A and DIR_B may sit on either side of any option (`A --seed 1 B`).
    args = parser.parse_intermixed_args(argv)
    if args.run_b is None:
        # --baseline-runs took every directory after it: the last ones are A (if missing) and B.
        missing = 1 if args.run_a else 2
        if len(args.baseline_runs) < missing + 1:
            parser.error(f"the following arguments are required: {'DIR_B' if args.run_a else 'DIR_A, DIR_B'}")
        *args.baseline_runs, last = args.baseline_runs
        if args.run_a is None:
            *args.baseline_runs, args.run_a = args.baseline_runs
        args.run_b = last
        # Said, not silent: `A --baseline-runs C D` may mean D as a repeat with B missing.
        print(f"{PROG}: DIR_A {args.run_a}, DIR_B {last} (the last directory given)", file=sys.stderr)
    try:
        if not 0 < args.confidence < 1:
            raise ValueError(f"--confidence: expected a share between 0 and 1, got {args.confidence:g}")
        a, b = load_run(Path(args.run_a)), load_run(Path(args.run_b))
        extra = [load_run(Path(d)).summary for d in args.baseline_runs]
        comparison = compare_runs(
            a.summary,
            a.requests,
            b.summary,
            b.requests,
            tolerance=args.tolerance,
            confidence=args.confidence,
            seed=args.seed,
            baselines=extra,
            allow_workload_change=args.allow_workload_change,
        )
    except (ReportError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    # Run ids are often a directory's last part ("run"); the paths say which is which.
    comparison.run_a, comparison.run_b = str(a.path), str(b.path)
    text = render_markdown(comparison)
    as_json = json.dumps(comparison.to_dict(), indent=2)
    if args.out:  # before the verdict is printed: a comparison that could not be kept says only that
        out = Path(args.out)
        body = as_json + "\n" if out.suffix == ".json" else text
        try:
            out.write_text(body, encoding="utf-8")
        except OSError as exc:
            print(f"{PROG}: --out: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print(as_json if args.json else text)
    if not comparison.steps:
        print(f"{PROG}: no step of A matches a step of B by load: nothing was compared", file=sys.stderr)
        return 2
    return 1 if comparison.regressions else 0


if __name__ == "__main__":
    sys.exit(main())

"""``tokenload report DIR``: rebuild a run directory's report.md, report.html and parquet files,
re-running the diagnosis from summary.json's steps (``--threshold NAME=VALUE`` to change one),
and print the per-step verdicts. ``--slo`` judges each step; ``--target-rps`` or
``--target-users`` with ``--headroom`` sizes the replicas. Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenload.analysis.thresholds import Thresholds
from tokenload.cli_args import OneLineParser
from tokenload.report.capacity import SLOError, add_capacity_options, capacity_options
from tokenload.report.markdown import capacity_lines
from tokenload.report.rundir import ReportError
from tokenload.report.search_text import search_lines
from tokenload.report.tables import COLUMNS, prediction_sentence, step_cells, text_table
from tokenload.report.workload_text import fit_lines, one_length_line
from tokenload.report.writer import load_and_model, write_model

__all__ = ["build_parser", "main", "parse_thresholds"]

PROG = "tokenload report"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="DIR", help="a run directory (with summary.json)")
    add_capacity_options(p)
    p.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a diagnosis threshold (repeatable), e.g. kv_full_ratio=0.95",
    )
    return p


def parse_thresholds(items: list[str]) -> Thresholds:
    overrides: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            overrides[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--threshold: {item!r}: expected NAME=NUMBER") from None
    return Thresholds.with_overrides(overrides)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        slo, target, headroom = capacity_options(args)
        thresholds = parse_thresholds(args.threshold)
        run, model = load_and_model(
            Path(args.run_dir), slo=slo, thresholds=thresholds, target=target, headroom=headroom
        )
        paths = write_model(run, model)
    except (ReportError, SLOError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: cannot write the report: {exc}", file=sys.stderr)
        return 2
    if (line := prediction_sentence(model.summary)) is not None:
        print(line)
    print(text_table(COLUMNS, [step_cells(s) for s in model.steps]))
    print()
    print(model.knee_sentence())
    for line in search_lines(model.summary) + fit_lines(model.summary):  # as sweep's console says them
        print(line)
    if (line := one_length_line(model.summary)) is not None:
        print(line)
    for line in capacity_lines(model) if (slo or target) else []:
        print(line)
    if run.skipped_lines:
        print(f"note: {run.skipped_lines} unreadable line(s) in the run's JSON-lines files were skipped")
    print(f"\nreport: {paths.report_html}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

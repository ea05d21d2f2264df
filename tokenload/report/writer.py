"""Writing a run directory's report files: requests.parquet, server_metrics.parquet, report.md
and report.html. The file output of this package; everything it writes is computed elsewhere."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from tokenload.analysis.thresholds import Thresholds
from tokenload.report.capacity import DEFAULT_HEADROOM, SLO, Target
from tokenload.report.frames import requests_table, server_metrics_table
from tokenload.report.html import render_html
from tokenload.report.markdown import render_markdown
from tokenload.report.model import ReportModel, build_model
from tokenload.report.rundir import RunData, load_run

__all__ = ["ReportPaths", "write_model", "write_reports"]


@dataclass(frozen=True, slots=True)
class ReportPaths:
    requests_parquet: Path
    server_metrics_parquet: Path
    report_md: Path
    report_html: Path


def _atomic_text(path: Path, text: str) -> None:
    # A report being rewritten is never seen half-written (a browser may have it open).
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _parquet(path: Path, frame: pd.DataFrame, schema: pa.Schema) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, engine="pyarrow", schema=schema, index=False)
    os.replace(tmp, path)


def write_model(run: RunData, model: ReportModel) -> ReportPaths:
    """Write the four files for an already built model."""
    d = run.path
    paths = ReportPaths(
        d / "requests.parquet", d / "server_metrics.parquet", d / "report.md", d / "report.html"
    )
    _parquet(paths.requests_parquet, *requests_table(run.requests))
    _parquet(paths.server_metrics_parquet, *server_metrics_table(run.points))
    _atomic_text(paths.report_md, render_markdown(model))
    _atomic_text(paths.report_html, render_html(model))
    return paths


def load_and_model(
    run_dir: Path,
    *,
    slo: SLO | None = None,
    thresholds: Thresholds | None = None,
    target: Target | None = None,
    headroom: float = DEFAULT_HEADROOM,
) -> tuple[RunData, ReportModel]:
    """A run directory's files and everything its report says. Raises rundir.ReportError on
    bad input."""
    run = load_run(Path(run_dir))
    opts = {"slo": slo, "thresholds": thresholds, "target": target, "headroom": headroom}
    return run, build_model(run.summary, run.requests, run.points, **opts)


def write_reports(
    run_dir: Path,
    *,
    slo: SLO | None = None,
    thresholds: Thresholds | None = None,
    target: Target | None = None,
    headroom: float = DEFAULT_HEADROOM,
) -> ReportPaths:
    """(Re)build a run directory's report files from its summary.json and records. Raises
    rundir.ReportError on bad input."""
    run, model = load_and_model(run_dir, slo=slo, thresholds=thresholds, target=target, headroom=headroom)
    return write_model(run, model)

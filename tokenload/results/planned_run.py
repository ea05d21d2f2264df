"""A plan's run directory (``tokenload plan --out``): the predicted steps as ``summary.json``
(labelled a prediction), the simulated requests and scrapes, in the files ``tokenload report``
reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenload import __version__
from tokenload.metrics.definitions import FORMULAS
from tokenload.results.summary import SCHEMA_VERSION

__all__ = ["write_planned_run"]


def write_planned_run(run_dir: Path, out: dict[str, Any], sweep: Any) -> None:
    """A run directory that ``tokenload report`` reads: summary.json, requests.jsonl,
    server_metrics.jsonl, with the prediction label in the summary."""
    summary = {
        "schema_version": SCHEMA_VERSION,
        "tokenload_version": __version__,
        "run_id": run_dir.name,
        "host": None,
        "started_at": 0.0,
        "ended_at": sweep.windows[-1].end,
        "config": {},
        "formulas": FORMULAS,
        "steps": out["steps"],
        "knee": out["knee"],
        "gpu_peaks": None,
        "server_max_num_seqs": out["prediction"]["engine"]["max_num_seqs"],
        "totals": None,
        "workers": ["virtual"],
        "workers_lost": [],
        "search": None,
        "scrape_failures": None,
        "prediction": out["prediction"],
    }
    for key in ("what_if", "draws", "trace"):  # what the report shows of the plan, and the other draws
        if out.get(key):
            summary[key] = out[key]
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    with open(run_dir / "requests.jsonl", "w", encoding="utf-8") as fh:
        for rec in sweep.records:
            fh.write(json.dumps(rec) + "\n")
    with open(run_dir / "server_metrics.jsonl", "w", encoding="utf-8") as fh:
        for p in sweep.points:
            hist = {k: {"b": h.buckets, "s": h.sum, "c": h.count} for k, h in p.histograms.items()}
            fh.write(json.dumps({"t": p.t, "target": p.target, "ok": True, "ms": 0.0, "scalars": p.scalars,
                                 "histograms": hist}) + "\n")  # fmt: skip

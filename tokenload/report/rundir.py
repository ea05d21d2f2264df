"""Reading a run directory for reports: summary.json (checked against the schema version this
package understands), requests.jsonl and server_metrics.jsonl. The only file input here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenload.results.summary import READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION

__all__ = ["ReportError", "RunData", "load_run", "read_jsonl"]


class ReportError(Exception):
    """Bad input (no such directory, no or unreadable summary.json, another schema): one line."""


@dataclass(slots=True)
class RunData:
    path: Path
    summary: dict[str, Any]
    requests: list[dict[str, Any]]
    points: list[dict[str, Any]]
    #: Lines that were not JSON objects (a run killed mid-write leaves a partial last line).
    skipped_lines: int = 0


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file (none if it is absent) and how many lines were not."""
    if not path.exists():
        return [], 0
    out, bad = [], 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(obj, dict):
                out.append(obj)
            else:
                bad += 1
    return out, bad


def load_summary(run_dir: Path) -> dict[str, Any]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such run directory")
    path = run_dir / "summary.json"
    if not path.is_file():
        raise ReportError(f"{path}: not found (is {run_dir} a tokenload run directory?)")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not readable JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(summary, dict):
        raise ReportError(f"{path}: expected a JSON object")
    version = summary.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise ReportError(
            f"{path}: schema_version {version!r}, this tokenload reads "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))} (writes {SCHEMA_VERSION})"
        )
    steps = summary.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ReportError(f"{path}: 'steps' is not a list of steps")
    return summary


def load_run(run_dir: Path) -> RunData:
    """Everything a report reads. Raises ReportError on bad input."""
    run_dir = Path(run_dir)
    summary = load_summary(run_dir)
    try:
        requests, bad_r = read_jsonl(run_dir / "requests.jsonl")
        points, bad_p = read_jsonl(run_dir / "server_metrics.jsonl")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{run_dir}: cannot read the run's records: {exc}") from None
    return RunData(run_dir, summary, requests, points, bad_r + bad_p)

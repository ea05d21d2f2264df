"""Run ids and run directories."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

__all__ = ["DEFAULT_REPORTS_DIR", "RUN_MARKERS", "check_new_run_dir", "make_run_dir", "new_run_id"]

DEFAULT_REPORTS_DIR = "reports"

#: A run directory's own files: a directory holding one of them holds a run.
RUN_MARKERS = ("summary.json", "requests.jsonl", "server_metrics.jsonl")


def new_run_id(now: float | None = None) -> str:
    """Sortable and unique enough for parallel runs: ``20261129-183005-3fa2``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(2)}"


def make_run_dir(run_dir: str | os.PathLike[str] | None, flag: str = "--run-dir") -> Path:
    """The run directory, created (ValueError, one line naming ``flag``, when it cannot be)."""
    path = Path(run_dir) if run_dir else Path(DEFAULT_REPORTS_DIR) / new_run_id()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag}: cannot create {path}: {exc.strerror or exc}") from None
    return path


def check_new_run_dir(path: str | os.PathLike[str], flag: str) -> None:
    """ValueError (one line naming ``flag``) unless ``path`` can become a new run directory: a
    run's files already there would be overwritten or appended to, mixing two runs. Creates
    nothing (:func:`make_run_dir` does, once the run starts)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag}: {p} is a file, expected a directory for the run")
    held = [name for name in RUN_MARKERS if (p / name).exists()]
    if held:
        raise ValueError(f"{flag}: {p} already holds a run ({held[0]}); give a new directory")

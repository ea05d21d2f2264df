"""Run ids and run directories."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

__all__ = ["DEFAULT_REPORTS_DIR", "make_run_dir", "new_run_id"]

DEFAULT_REPORTS_DIR = "reports"


def new_run_id(now: float | None = None) -> str:
    """Sortable and unique enough for parallel runs: ``20261129-183005-3fa2``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(2)}"


def make_run_dir(run_dir: str | os.PathLike[str] | None) -> Path:
    path = Path(run_dir) if run_dir else Path(DEFAULT_REPORTS_DIR) / new_run_id()
    path.mkdir(parents=True, exist_ok=True)
    return path

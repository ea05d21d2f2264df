"""The run directory's files the web UI offers for download (``/tokenload/files/NAME``). Pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["RUN_FILES", "run_files"]

#: The run-directory files offered for download, in the order shown (none holds a secret:
#: the configuration keeps only the API key's variable name).
RUN_FILES = (
    "report.html",
    "report.md",
    "summary.json",
    "steps.csv",
    "llm_stats.json",
    "requests.jsonl",
    "server_metrics.jsonl",
    "requests.parquet",
    "server_metrics.parquet",
)


def run_files(run_dir: Path | None) -> list[dict[str, Any]]:
    """The :data:`RUN_FILES` present in ``run_dir``: name, bytes and when last written."""
    out = []
    for name in RUN_FILES if run_dir is not None else ():
        try:
            st = (run_dir / name).stat()
        except OSError:
            continue
        out.append({"name": name, "bytes": st.st_size, "written_at": st.st_mtime})
    return out

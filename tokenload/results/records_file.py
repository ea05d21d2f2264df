"""Incremental writer of per-request records (``requests.jsonl``): each batch is appended and
flushed at once, so a crash loses at most the batch in flight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["RecordsFile", "read_records"]

FILENAME = "requests.jsonl"


class RecordsFile:
    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / FILENAME
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open for the run
        self.written = 0

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records or self._fh.closed:
            return
        self._fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
        self._fh.flush()
        self.written += len(records)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / FILENAME
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]

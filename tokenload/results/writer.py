"""What gets written where: every file of a run directory, written here and nowhere else.

* ``run.json`` (the options without secrets, the host) when the directory is opened;
* ``requests.jsonl``, a batch at a time as records arrive (results/records_file.py);
* ``server_metrics.jsonl``: the scraper's points as they come (servermetrics/scraper.py), or,
  for a ``--prometheus-url`` run, the series read back from Prometheus before the results;
* at the end: ``summary.json`` and ``steps.csv`` (when the run had steps), ``llm_stats.json``
  (the whole run's LLM table and the server's figures), then ``report.md``, ``report.html`` and
  the parquet files (report/writer.py); and, when Locust was asked for ``--csv``, the LLM table
  in ``PREFIX_llm_stats.csv`` (the LLM table in ``--html``'s page: loadgen/webui.py).

A report that cannot be written loses nothing measured: the directory keeps summary.json and
the records.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tokenload.metrics.table import to_csv
from tokenload.results.records_file import RecordsFile
from tokenload.results.rundir import make_run_dir
from tokenload.results.summary import steps_csv

__all__ = ["RunWriter"]

log = logging.getLogger("tokenload")


class RunWriter:
    """One run directory and its files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.records = RecordsFile(run_dir)

    @classmethod
    def open(cls, wanted: str | None, config: dict[str, Any], host: str | None) -> RunWriter:
        """The run directory ``wanted`` (or a new one under reports/), with its ``run.json``."""
        writer = cls(make_run_dir(wanted or None))
        (writer.run_dir / "run.json").write_text(json.dumps({"config": config, "host": host}, indent=2))
        return writer

    @property
    def scrape_file(self) -> Path:
        return self.run_dir / "server_metrics.jsonl"

    def write_server_series(self, points: list[dict[str, Any]]) -> None:
        """``server_metrics.jsonl`` whole, from points read elsewhere than by scraping (a
        ``--prometheus-url`` run's series); replaced, never appended to, each time."""
        tmp = self.scrape_file.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(p, separators=(",", ":")) + "\n" for p in points)
        tmp.replace(self.scrape_file)

    def write_records(self, batch: list[dict[str, Any]]) -> None:
        self.records.write(batch)

    def results(self, summary: dict[str, Any] | None, llm_stats: dict[str, Any]) -> None:
        """``summary.json``, ``steps.csv``, ``llm_stats.json`` and the reports as of now (the
        records are on disk already: each batch is flushed as it is written). At the end of a run,
        and in the web UI each time a test stops (the process and its run go on). ``summary`` is
        None for a run without steps (no reports then)."""
        if summary is not None:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
            (self.run_dir / "steps.csv").write_text(steps_csv(summary))
        (self.run_dir / "llm_stats.json").write_text(json.dumps(llm_stats, indent=2))
        if summary is not None:
            self._write_reports()

    def finish(
        self,
        summary: dict[str, Any] | None,
        llm_stats: dict[str, Any],
        rows: list[dict[str, Any]],
        csv_prefix: str | None = None,
    ) -> None:
        """The end-of-run files: the results, the records closed, Locust's ``--csv`` LLM table."""
        self.records.close()
        self.results(summary, llm_stats)
        if csv_prefix:
            Path(f"{csv_prefix}_llm_stats.csv").write_text(to_csv(rows))

    def _write_reports(self) -> None:
        from tokenload.report.rundir import ReportError
        from tokenload.report.writer import write_reports

        try:
            write_reports(self.run_dir)
        except (ReportError, OSError, ValueError) as exc:
            log.warning("tokenload: the report could not be written: %s", exc)

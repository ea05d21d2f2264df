"""Output-length conformance: a target that drops ``ignore_eos`` (the mock told to stop every
stream after 4 tokens) produces a lighter load than asked; every step says so, in summary.json,
steps.csv and both reports. A conforming target (the emulator, which honours ignore_eos) gets
no flag, only the note that one output length makes the TTFT depend on the users' line-up."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_records

pytestmark = pytest.mark.slow


def _sweep(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenload", "sweep", "--step-duration", "3", "--warmup", "0.5",
         "--workers", "0", "--concurrency", "2,4", "--prompt-tokens", "16", "--output-tokens", "16",
         "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_a_target_that_drops_ignore_eos_is_flagged_everywhere(start_mock, tmp_path: Path) -> None:
    mock = start_mock("--ttft-ms", "5", "--itl-ms", "2", "--eos-after", "4")
    run_dir = tmp_path / "run"
    proc = _sweep(run_dir, "--host", mock.url)  # the mock has no /tokenize: estimated lengths
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [r for r in read_records(run_dir) if r["status"] == "ok"]
    assert records and all(r["requested_output_tokens"] == 16 and r["ignore_eos"] is True for r in records)
    assert all(r["output_tokens"] == 4 for r in records)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 2
    for step in summary["steps"]:
        assert "short_output" in step["flags"] and step["short_output_share"] == 1.0, step["flags"]
    rows = list(csv.DictReader((run_dir / "steps.csv").read_text().splitlines()))
    assert [float(r["short_output_share"]) for r in rows] == [1.0, 1.0]
    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    for text in (md, html):
        assert "Load not as asked" in text
        assert text.count("stopped before max_tokens (flagged short_output)") == 2


def test_a_conforming_target_is_not_flagged(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _sweep(run_dir, "--sim-args", "--profile h100-llama3.1-8b")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    for step in summary["steps"]:
        assert "short_output" not in step["flags"] and step["short_output_share"] == 0.0
        assert "turned_away" not in step["flags"] and step["backoff_share"] == 0.0
    md = (run_dir / "report.md").read_text()
    assert "Load not as asked" not in md
    # One output length in a closed loop is said apart, in the console and both reports: how
    # the users line up is not a load other than the one asked for.
    said = "One output length: every request asked for 16 tokens out"
    for text in (proc.stdout, md, (run_dir / "report.html").read_text()):
        assert text.count(said) == 1, text[-3000:]


def test_a_server_that_turns_requests_away_is_flagged_everywhere(tmp_path: Path) -> None:
    # The emulator answers 30 % of requests 429 at once: each such user pauses 50 ms (doubling
    # while it lasts) before its next request, so fewer users send than the step names.
    run_dir = tmp_path / "run"
    proc = _sweep(run_dir, "--sim-args", "--profile h100-llama3.1-8b --http-429-rate 0.3 --seed 3")
    # Failed requests: exit status 1 (Locust's), the run complete.
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = sorted(read_records(run_dir), key=lambda r: r["start_monotonic_s"])
    turned = [r for r in records if r["failure_class"] == "http_429"]
    paused = [r for r in records if r["backoff_ms"] is not None]
    assert turned and paused and all(r["backoff_ms"] >= 50.0 for r in paused)
    assert len(paused) <= len(turned)  # a pause follows a turn-away, one a request
    summary = json.loads((run_dir / "summary.json").read_text())
    for step in summary["steps"]:
        assert step["backoff_share"] > 0.01 and "turned_away" in step["flags"], step["backoff_share"]
    rows = list(csv.DictReader((run_dir / "steps.csv").read_text().splitlines()))
    assert all(float(r["backoff_share"]) > 0.01 for r in rows)
    for text in ((run_dir / "report.md").read_text(), (run_dir / "report.html").read_text()):
        assert text.count("waiting out turn-aways (flagged turned_away)") == 2

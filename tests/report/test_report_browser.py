"""report.html of a real sweep, opened in headless Chromium: every chart has data, the page logs
nothing to the console and requests nothing but itself; a screenshot is kept in the run directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.browser import console_lines, page_requests, run_chromium
from tests.conftest import ROOT


def test_report_html_in_headless_chromium(chromium: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable, "-m", "tokenload", "sweep", "--concurrency", "2,16", "--step-duration", "6",
            "--warmup", "2", "--prompt-tokens", "80", "--output-tokens", "64", "--workers", "0",
            "--out", str(run_dir), "--metrics-interval", "0.5",
            "--sim-args", "--profile h100-llama3.1-8b --max-num-seqs 4",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    html = run_dir / "report.html"
    assert f"report: {html}" in proc.stdout
    url = html.resolve().as_uri()
    net_log = tmp_path / "net.json"
    dom, err = run_chromium(
        chromium, tmp_path / "p1", f"--log-net-log={net_log}", "--window-size=1400,1000",
        "--virtual-time-budget=3000", "--dump-dom", url,
    )  # fmt: skip
    charts = re.findall(r'data-chart="([^"]+)"[^>]*data-points="(\d+)"', dom)
    assert len(charts) >= 6, dom[:2000]
    assert all(int(n) > 0 for _, n in charts), charts
    assert "scheduler_limit" in dom or "scheduler" in dom.lower()
    assert not console_lines(err), console_lines(err)
    requests = page_requests(net_log)
    assert all(u.startswith("file://") for u in requests), requests  # nothing fetched from anywhere
    shot = run_dir / "report.png"
    run_chromium(
        chromium, tmp_path / "p2", "--window-size=1400,2400", "--hide-scrollbars",
        "--virtual-time-budget=3000", f"--screenshot={shot}", url,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

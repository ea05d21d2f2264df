"""Locust master + 2 worker processes: exact merging of counts, histograms and records."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

from tests.conftest import BIN, ROOT, locust_request_count, read_records


def test_master_and_two_workers(start_mock, tmp_path: Path) -> None:
    mock = start_mock("--ttft-ms", "30", "--itl-ms", "3")
    port = 25557 + os.getpid() % 1000
    run_dir = tmp_path / "run"
    common = [str(BIN / "locust"), "-f", str(ROOT / "locustfiles/completions.py"), "--output-tokens", "16"]
    master = subprocess.Popen(
        [
            *common, "--master", "--headless", "--host", mock.url, "--master-bind-host", "127.0.0.1",
            "--master-bind-port", str(port), "--expect-workers", "2", "-u", "6", "-r", "20", "-t", "5s",
            "--stop-timeout", "10", "--run-dir", str(run_dir),
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    workers = [
        subprocess.Popen(
            [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        output, _ = master.communicate(timeout=90)
    finally:
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                w.kill()
    records = read_records(run_dir)
    assert len({r["worker"] for r in records}) == 2
    assert len(records) == locust_request_count(output) == mock.stats()["requests_seen"] > 20, output[-2000:]
    summary = json.loads((run_dir / "llm_stats.json").read_text())
    total = summary["stats"]["total"]
    assert total["ok"] == len(records)
    # Merged histogram percentiles equal the exact ones from all records, within the stated 1 %.
    agg = summary["rows"][-1]
    ttft = sorted(r["ttft_ms"] for r in records)
    for q, key in ((0.5, "ttft_ms_p50"), (0.99, "ttft_ms_p99")):
        exact = ttft[max(1, math.ceil(q * len(ttft))) - 1]
        assert abs(agg[key] - exact) <= 0.01 * exact + 1e-9
    # No load shape: the 6 users, once spawned, are one step, judged and reported as a sweep's.
    s = json.loads((run_dir / "summary.json").read_text())
    [step] = s["steps"]
    # "client": the step was flagged client_bound, which the host decides (a busy CI machine).
    assert step["concurrency"] == 6 and step["verdict"]["bottleneck"] in ("none", "unknown", "client")
    measured = [r for r in records if r["step"] == 0 and r["phase"] == "measure" and r["status"] == "ok"]
    assert step["requests"]["ok"] == len(measured) > 10
    for name in ("report.md", "report.html", "requests.parquet", "server_metrics.parquet", "steps.csv"):
        assert (run_dir / name).exists(), name


def test_a_plain_locust_run_gets_steps_and_reports(tmp_path: Path) -> None:
    # What the Kubernetes Job runs: plain Locust, no tokenload sweep, no load shape: the user
    # count it settles at is a step (each count a web UI user sets would be one more).
    from tokenload.serving.process import ServerProcess

    sim = ServerProcess(["-m", "tokenload.sim", "--port", "0", "--profile", "h100-llama3.1-8b"])
    url = sim.start()
    run_dir = tmp_path / "run"
    try:
        proc = subprocess.run(
            [
                str(BIN / "locust"), "-f", str(ROOT / "locustfiles/completions.py"), "--headless",
                "--host", url, "-u", "4", "-r", "4", "-t", "6s", "--stop-timeout", "10",
                "--prompt-tokens", "64", "--output-tokens", "16", "--metrics-url", url + "/metrics",
                "--run-dir", str(run_dir),
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    finally:
        sim.stop()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    s = json.loads((run_dir / "summary.json").read_text())
    [step] = s["steps"]
    assert step["concurrency"] == 4 and step["requests"]["ok"] > 20
    # "client": the step was flagged client_bound, which the host decides (a busy CI machine).
    assert step["server"] is not None and step["verdict"]["bottleneck"] in ("none", "client")
    md = (run_dir / "report.md").read_text()
    assert "## Steps" in md and "4 users" in md
    assert (run_dir / "report.html").exists() and (run_dir / "requests.parquet").exists()

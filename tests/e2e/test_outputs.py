"""What a run leaves behind and shows: --csv/--html outputs, the web UI tab, secrets, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.conftest import BIN, ROOT, read_records, run_locust

SECRET = "sk-tokenload-test-secret-4f1c9b"


def test_csv_html_and_no_secret_anywhere(start_mock, tmp_path: Path) -> None:
    mock = start_mock("--ttft-ms", "5", "--itl-ms", "1")
    out = tmp_path / "out"
    run = run_locust(
        "locustfiles/chat.py", mock.url, tmp_path / "run",
        "-u", "2", "-t", "2s", "--csv", str(out / "locust"), "--html", str(out / "report.html"),
        env={"OPENAI_API_KEY": SECRET},
    )  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    csv_text = (out / "locust_llm_stats.csv").read_text()
    assert csv_text.splitlines()[0].startswith("Name,Requests,Failures")
    assert "Aggregated" in csv_text
    html = (out / "report.html").read_text()
    assert 'id="tokenload-llm"' in html and "TPOT = (E2E - TTFT)" in html
    stats = json.loads((run.run_dir / "llm_stats.json").read_text())
    assert stats["records_written"] == len(read_records(run.run_dir)) > 0
    # The key reached the server (it was used) but nothing tokenload wrote or printed holds it.
    assert mock.stats()["auth_seen"] > 0
    assert SECRET not in run.output
    for path in [*run.run_dir.iterdir(), *out.iterdir()]:
        assert SECRET not in path.read_text(errors="replace"), path
    assert json.loads((run.run_dir / "run.json").read_text())["config"]["api_key_set"] is True


def test_bad_option_is_one_clear_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(BIN / "locust"), "-f", "locustfiles/chat.py", "--headless", "--host", "http://127.0.0.1:9",
         "--prompt-tokens", "-5"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--prompt-tokens: expected an integer >= 1, got -5" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_web_ui_llm_tab(start_mock, tmp_path: Path) -> None:
    mock = start_mock("--ttft-ms", "5", "--itl-ms", "1")
    port = 18089 + os.getpid() % 500
    proc = subprocess.Popen(
        [
            str(BIN / "locust"), "-f", "locustfiles/chat.py", "--host", mock.url, "--web-host", "127.0.0.1",
            "--web-port", str(port), "--autostart", "-u", "2", "-r", "2", "-t", "20s",
            "--run-dir", str(tmp_path / "run"),
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        rows = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=2) as r:
                    body = json.load(r)
            except OSError:
                continue
            ext = {e["key"]: e["data"] for e in body.get("extended_stats", [])}
            rows = ext.get("llm", [])
            if rows and rows[-1]["requests"] > 3:
                break
        assert rows and rows[-1]["name"] == "Aggregated" and rows[-1]["ttft_ms_p50"] > 0, rows
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            page = r.read().decode()
        assert '"extended_tabs"' in page or "extendedTabs" in page or "LLM" in page
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/tokenload/llm_stats.csv", timeout=5) as r:
            assert r.read().decode().startswith("Name,Requests")
    finally:
        proc.terminate()
        proc.wait(timeout=20)

"""The web UI writes the run directory's results each time a test stops and offers them for
download (issue #19 item 1): a Locust master with its web UI and one worker (processes, loopback,
stopped by PID) against the emulator, two tests started and stopped through Locust's own HTTP API
as a user's clicks would. The files come from ``/tokenload/files/NAME`` as attachments and hold
every record the worker sent, the last report's too."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.browser import console_lines, run_chromium
from tests.conftest import BIN, ROOT
from tokenload.serving.process import ServerProcess

pytestmark = pytest.mark.slow

SECRET = "sk-tokenload-download-secret-91c2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _post(url: str, form: dict[str, Any] | None = None) -> int:
    data = urllib.parse.urlencode(form or {}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST"), timeout=10) as r:
        return r.status


def _status(base: str) -> dict[str, Any]:
    return json.loads(_get(f"{base}/tokenload/api/series")[2])["status"]


def _until(check: Any, timeout_s: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"{what} not within {timeout_s:g} s\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _served(url: str) -> int:
    """Requests the emulator finished, from its own /metrics (vllm:request_success_total)."""
    page = _get(url + "/metrics")[2].decode()
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
                     if line.startswith("vllm:request_success_total{")))  # fmt: skip


def _one_test(base: str, users: int, seconds: float, log: Path) -> dict[str, Any]:
    """Start a test, let it run, stop it; the status once its results are written."""
    # After a stop, Locust's master drops the worker until it says it is ready again (~5 s).
    _until(lambda: _status(base)["workers"] == 1, 60, "the worker ready", log)
    before = _status(base).get("results_written_at") or 0
    assert _post(f"{base}/swarm", {"user_count": users, "spawn_rate": users}) == 200
    _until(lambda: _status(base)["state"] == "running", 30, "running", log)
    time.sleep(seconds)
    assert _post(f"{base}/stop") == 200
    return _until(
        lambda: (st := _status(base)).get("results_written_at") and st["results_written_at"] > before and st,
        45,
        "results written after the stop",
        log,
    )


def test_each_stop_writes_the_results_and_the_page_offers_them(chromium: str, tmp_path: Path) -> None:
    web, master_port = _free_port(), _free_port()
    base = f"http://127.0.0.1:{web}"
    run_dir = tmp_path / "run"
    log = tmp_path / "master.log"
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONUNBUFFERED": "1"}
    common = ["-f", "locustfiles/chat.py", "--prompt-tokens", "64", "--output-tokens", "16"]
    with ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp_path / "sim.log") as sim:
        with open(log, "wb") as out, open(tmp_path / "worker.log", "wb") as wout:
            master = subprocess.Popen(
                [str(BIN / "locust"), *common, "--master", "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(master_port), "--web-host", "127.0.0.1", "--web-port", str(web),
                 # Relative, as a user types it (Flask resolved one against its own root: 404s).
                 "--host", sim.url, "--run-dir", os.path.relpath(run_dir, ROOT), "--stop-timeout", "5",
                 "--metrics-interval", "0.5"],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
            worker = subprocess.Popen(
                [str(BIN / "locust"), *common, "--worker", "--master-host", "127.0.0.1",
                 "--master-port", str(master_port)],
                cwd=ROOT, stdout=wout, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        try:
            first = _one_test(base, 4, 6, log)
            names = [f["name"] for f in first["files"]]
            for name in ("report.html", "report.md", "summary.json", "steps.csv", "requests.jsonl"):
                assert name in names, names
            status, headers, body = _get(f"{base}/tokenload/files/summary.json")
            assert status == 200 and "attachment" in headers["Content-Disposition"]
            summary = json.loads(body)
            _, _, records = _get(f"{base}/tokenload/files/requests.jsonl")
            kept = len(records.splitlines())
            # Every request the test made is in the files: the worker's last report came in.
            stats = json.loads(_get(f"{base}/tokenload/files/llm_stats.json")[2])
            done = sum(r["requests"] for r in stats["rows"] if r["name"] == "Aggregated")
            assert kept == done > 0, (kept, done)
            # ... and every request the server finished: the worker's last report, sent as it
            # stopped (Locust's master ignores its reports from then until it is ready again).
            assert kept == _served(sim.url), (kept, _served(sim.url))
            assert summary["steps"] and summary["steps"][0]["concurrency"] == 4
            _, _, md = _get(f"{base}/tokenload/files/report.md")
            _, headers, html = _get(f"{base}/tokenload/files/report.html")
            assert md.startswith(b"# tokenload report") and b"<html" in html[:500].lower()
            assert "attachment" in headers["Content-Disposition"]
            for blob in (md, html, body):
                assert SECRET.encode() not in blob
            # Only the run directory's result files, by name.
            for bad in ("run.json", "..%2Frun.json", "locustfile.py"):
                assert _get(f"{base}/tokenload/files/{bad}")[0] == 404, bad
            # The LLM page links them, as downloads (headless Chromium, no console message).
            dom, err = run_chromium(
                chromium, tmp_path / "chromium", "--virtual-time-budget=5000", "--dump-dom",
                f"{base}/tokenload/llm",
            )  # fmt: skip
            links = re.findall(r'<a class="run-file" href="files/([^"]+)" download="([^"]+)"', dom)
            assert ("report.html", "report.html") in links and ("summary.json", "summary.json") in links, dom[
                :3000
            ]
            assert not console_lines(err), console_lines(err)
            # A second test: written again, with both tests' requests.
            second = _one_test(base, 2, 4, log)
            assert second["results_written_at"] > first["results_written_at"]
            again = len(_get(f"{base}/tokenload/files/requests.jsonl")[2].splitlines())
            assert again > kept
        finally:
            _stop(master)
            _stop(worker)
    assert master.returncode == 0, log.read_text()[-3000:]
    assert (run_dir / "report.html").exists()

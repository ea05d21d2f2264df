"""Every failure class, driven by a server that really misbehaves; the run goes on."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from tests.conftest import locust_request_count, read_records, run_locust

CASES = [
    # (mock fault, expected class, extra locust args, partial timings expected)
    ("http_500", "http_5xx", [], False),
    ("http_429", "http_429", [], False),
    ("http_400", "http_4xx", [], False),
    ("disconnect", "truncated", [], True),
    ("garbage", "malformed_stream", [], True),
    ("bad_utf8", "malformed_stream", [], True),
    ("error_event", "error_event", [], True),
    ("stall", "stall_timeout", ["--stall-timeout", "0.4"], True),
    ("no_first_token", "ttft_timeout", ["--ttft-timeout", "0.4"], False),
    ("empty", "empty_output", [], False),
]


@pytest.mark.parametrize(("fault", "klass", "args", "partial"), CASES, ids=[c[0] for c in CASES])
def test_failure_class(
    start_mock, tmp_path: Path, fault: str, klass: str, args: list[str], partial: bool
) -> None:
    mock = start_mock("--ttft-ms", "10", "--itl-ms", "2", "--faults", f"ok,{fault}", "--stall-s", "2")
    run = run_locust(
        "locustfiles/completions.py", mock.url, tmp_path / "run",
        "-u", "2", "-r", "10", "-t", "3s", "--output-tokens", "16", *args,
    )  # fmt: skip
    records = read_records(run.run_dir)
    failed = [r for r in records if r["status"] == "failed"]
    ok = [r for r in records if r["status"] == "ok"]
    assert failed and ok, run.output[-3000:]
    assert {r["failure_class"] for r in failed} == {klass}
    # The run continued past failures: successes came after the first failure.
    first_fail = min(r["wall_start"] for r in failed)
    assert any(r["wall_start"] > first_fail for r in ok)
    assert locust_request_count(run.output) == len(records)
    assert klass in run.output  # Locust's failure table names the class
    # ... in one row per cause, whatever varied between the requests (token counts, ids, text)
    report = run.output.split("Error report", 1)[1] if "Error report" in run.output else ""
    rows = {
        line.split(None, 1)[1].strip() for line in report.splitlines() if re.search(f"[('\"]{klass}:", line)
    }
    assert len(rows) == 1, report
    if partial:
        assert all(r["ttft_ms"] is not None and r["content_chunks"] > 0 for r in failed)
    assert all(r["e2e_ms"] is not None for r in failed)


def test_connect_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    run = run_locust(
        "locustfiles/chat.py",
        f"http://127.0.0.1:{port}",
        tmp_path / "run",
        "-u",
        "1",
        "-t",
        "1s",
        "--model",
        "m",
    )
    records = read_records(run.run_dir)
    assert records and {r["failure_class"] for r in records} == {"connect_error"}
    assert "Traceback" not in run.output


def test_a_target_that_refuses_connections_is_not_a_busy_loop_and_is_judged_errors(tmp_path: Path) -> None:
    """Closed-loop users against a closed port (helper's walkthrough, 2026-12-05: two users sent
    ~2,100 failing requests a second, the discovery warning printed ~10,000 times, the client's
    CPU passed its limit and the step was judged `client`, "headroom"). Each user now waits
    (0.05 s, doubling to 1 s) after a request that could not reach the target; the warning is
    given once; the staircase's step is judged `errors`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    run = run_locust(
        "locustfiles/chat.py,locustfiles/staircase.py", f"http://127.0.0.1:{port}", tmp_path / "run",
        "--concurrency", "2", "--step-duration", "5", "--warmup", "1",
    )  # fmt: skip
    records = read_records(run.run_dir)
    assert records and {r["failure_class"] for r in records} == {"connect_error"}
    # Per user: 0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1 + 1 ... s of waiting in ~6 s: about 10 each.
    assert len(records) <= 2 * 15, len(records)
    assert run.output.count("model discovery failed") == 1
    summary = json.loads((run.run_dir / "summary.json").read_text())
    verdict = summary["steps"][0]["verdict"]
    assert verdict["bottleneck"] == "errors" and "connect_error" in verdict["evidence"][0]["rule"]
    assert "Failing from step 0" in (run.run_dir / "report.md").read_text()

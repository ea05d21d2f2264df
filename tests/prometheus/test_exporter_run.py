"""tokenload's own /metrics during a real distributed run: a Locust master (web UI, autostart, a
two-step staircase, ``--exporter-port``) and one worker as processes, against the fixed-schedule
mock with injected failures, all on loopback and stopped by PID. Scraped during the run and
after it, parsed with prometheus_client's parser: the step gauge moves, requests are in flight,
the worker reports its health, every count equals requests.jsonl at the same moment, each
failure class that happened is there, and the API key never shows."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BIN, ROOT
from tests.prometheus.conftest import free_port
from tokenload.serving.process import ServerProcess

pytestmark = pytest.mark.slow

SECRET = "sk-tokenload-exporter-secret-91c4"
FAULTS = "ok,ok,ok,http_500,ok,ok,http_429,ok"


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _parse(text: bytes) -> dict[str, dict[tuple[str, tuple], float]]:
    """family -> {(sample name, sorted labels): value}"""
    return {
        f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
        for f in text_string_to_metric_families(text.decode())
    }


def _one(fams: dict[str, Any], family: str) -> float:
    [value] = fams[family].values()
    return value


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "requests.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


@dataclass
class Run:
    exporter: str  # http://127.0.0.1:PORT/metrics
    web: str  # the web UI, http://127.0.0.1:PORT
    run_dir: Path
    log: Path
    procs: list[subprocess.Popen[bytes]]
    during: list[dict[str, Any]] = field(default_factory=list)

    def state(self) -> str:
        return json.loads(_get(self.web + "/stats/requests"))["state"]


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def exporter_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("exporter")
    mock = ServerProcess(
        ["-m", "tokenload.mock", "--port", "0", "--ttft-ms", "150", "--itl-ms", "20", "--faults", FAULTS],
        log_path=tmp / "mock.log",
    )
    url = mock.start()
    master_port, web_port, exporter_port = free_port(), free_port(), free_port()
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONUNBUFFERED": "1"}
    locustfiles = "locustfiles/chat.py,locustfiles/staircase.py"
    log = tmp / "master.log"
    run = Run(
        f"http://127.0.0.1:{exporter_port}/metrics", f"http://127.0.0.1:{web_port}", tmp / "run", log, []
    )
    master_cmd = [
        str(BIN / "locust"), "-f", locustfiles, "--master", "--host", url,
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
        "--expect-workers", "1", "--autostart", "--autoquit", "60",
        "--web-host", "127.0.0.1", "--web-port", str(web_port),
        "--exporter-port", str(exporter_port), "--exporter-host", "127.0.0.1",
        "--concurrency", "2,4", "--step-duration", "5", "--warmup", "1",
        "--output-tokens", "16", "--stop-timeout", "10", "--no-server-metrics",
        "--run-dir", str(run.run_dir),
    ]  # fmt: skip
    worker_cmd = [
        str(BIN / "locust"), "-f", locustfiles, "--worker", "--master-host", "127.0.0.1",
        "--master-port", str(master_port),
    ]  # fmt: skip
    try:
        with open(log, "wb") as out:
            run.procs.append(
                subprocess.Popen(master_cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
            )
        run.procs.append(
            subprocess.Popen(
                worker_cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
            )
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert run.procs[0].poll() is None, log.read_text()[-3000:]
            time.sleep(0.3)
            try:
                fams = _parse(_get(run.exporter))
                state = run.state()
            except OSError:
                continue
            run.during.append(fams)
            steps_seen = {_one(f, "tokenload_step_index") for f in run.during}
            if state == "stopped" and {0.0, 1.0} <= steps_seen:
                break
        else:
            pytest.fail(f"the run did not finish within 90 s:\n{log.read_text()[-3000:]}")
        yield run
    finally:
        for proc in run.procs:  # the master first: it writes its results as it quits
            _stop(proc)
        mock.stop()


def test_metrics_move_during_the_run(exporter_run: Run) -> None:
    during = exporter_run.during
    assert len(during) >= 10
    steps = [_one(f, "tokenload_step_index") for f in during]
    assert {0.0, 1.0} <= set(steps) and steps.index(1.0) > steps.index(0.0)
    targets = {
        _one(f, "tokenload_target_concurrency") for f in during if _one(f, "tokenload_step_index") == 1
    }
    assert targets == {4.0}
    assert max(_one(f, "tokenload_requests_in_flight") for f in during) >= 1
    assert max(_one(f, "tokenload_step_measuring") for f in during) == 1
    assert max(_one(f, "tokenload_workers") for f in during) == 1
    cpu = during[-1]["tokenload_process_cpu_percent"]
    workers = {dict(labels)["worker"] for _, labels in cpu}
    assert workers == {"master", "w0"}, workers
    counts = [f["tokenload_ttft_seconds"][("tokenload_ttft_seconds_count", ())] for f in during]
    assert counts == sorted(counts) and counts[-1] > counts[0]
    # Tokens as they arrived (in-flight streams included) never fall behind the tokens of the
    # requests that ended: each worker report carries both (the mock's usage is its chunk count).
    arrived = [_one(f, "tokenload_output_tokens_arrived") for f in during]
    ended = [_one(f, "tokenload_output_tokens") for f in during]
    assert arrived == sorted(arrived) and arrived[-1] > 0
    assert all(a >= e for a, e in zip(arrived, ended, strict=True)), list(zip(arrived, ended, strict=True))


def test_counts_equal_the_records_at_the_same_moment(exporter_run: Run) -> None:
    for _ in range(40):  # records and stats move together on each worker report: catch a still moment
        before = _records(exporter_run.run_dir)
        fams = _parse(_get(exporter_run.exporter))
        after = _records(exporter_run.run_dir)
        if len(before) == len(after):
            break
        time.sleep(0.25)
    else:
        pytest.fail("requests.jsonl never held still")
    records = after
    ok = [r for r in records if r["status"] == "ok"]
    assert len(ok) > 20
    assert fams["tokenload_ttft_seconds"][("tokenload_ttft_seconds_count", ())] == len(ok)
    assert fams["tokenload_e2e_seconds"][("tokenload_e2e_seconds_count", ())] == len(ok)
    e2e_sum = fams["tokenload_e2e_seconds"][("tokenload_e2e_seconds_sum", ())]
    assert e2e_sum == pytest.approx(sum(r["e2e_ms"] for r in ok) / 1000, rel=1e-6)
    itl_count = fams["tokenload_itl_seconds"][("tokenload_itl_seconds_count", ())]
    assert itl_count == sum(r["itl_count"] for r in ok)
    buckets = [v for (name, _), v in fams["tokenload_ttft_seconds"].items() if name.endswith("_bucket")]
    assert max(buckets) == len(ok)
    by_class = Counter((r["status"], r["failure_class"] or "") for r in records)
    exported = {
        (dict(labels)["status"], dict(labels)["failure_class"]): v
        for (_, labels), v in fams["tokenload_requests"].items()
        if v
    }
    assert exported == dict(by_class)
    assert by_class[("failed", "http_5xx")] > 0 and by_class[("failed", "http_429")] > 0
    tokens = sum(r["output_tokens"] or 0 for r in records if r["status"] != "cancelled")
    assert _one(fams, "tokenload_output_tokens") == tokens


def test_the_web_ui_serves_the_same_metrics_and_no_secret(exporter_run: Run) -> None:
    web = _get(exporter_run.web + "/metrics")
    port = _get(exporter_run.exporter)
    assert set(_parse(web)) == set(_parse(port))
    assert "tokenload_target_rate_rps" not in _parse(web)
    for body in (web, port):
        assert SECRET.encode() not in body
    run_id = exporter_run.run_dir.name
    [((_, labels), _)] = _parse(port)["tokenload_run_info"].items()
    assert dict(labels)["run_id"] == run_id
    assert SECRET not in exporter_run.log.read_text()

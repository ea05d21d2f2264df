"""Fixtures for the Prometheus tests: a real Prometheus server (Debian's ``prometheus`` package,
``make prometheus``) scraping the emulator every second, on loopback, with a temporary config
and TSDB; every process is stopped by its PID.

Without the binary (``prometheus`` on the PATH or ``$PROMETHEUS``) the tests that need it skip
with the reason, unless ``$CI`` is set, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tokenload.serving.process import ServerProcess

#: The emulator's batch and KV cache are kept small so that a short run fills them.
SIM_ARGS = ("--max-num-seqs", "4", "--num-gpu-blocks", "200", "--max-model-len", "2048")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 10) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def find_prometheus() -> str | None:
    return os.environ.get("PROMETHEUS") or shutil.which("prometheus")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    path = find_prometheus()
    if path is None:
        msg = "no Prometheus binary (prometheus on the PATH or $PROMETHEUS): `make prometheus` installs it"
        if os.environ.get("CI"):
            pytest.fail(msg + "; CI is set, so the Prometheus tests must run")
        pytest.skip(msg)
    return path


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        status, body = get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}")
        assert status == 200 and body["status"] == "success", body
        return body["data"]["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_prometheus(binary: str, tmp: Path, targets: dict[str, str], timeout_s: float = 60) -> Prometheus:
    """Prometheus on 127.0.0.1 scraping ``targets`` (job -> host:port) every second, once every
    target is up."""
    jobs = [
        {
            "job_name": job,
            "static_configs": [{"targets": [target], "labels": {"namespace": "tokenload-test"}}],
        }
        for job, target in targets.items()
    ]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": jobs}
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = tmp / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
            ],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                up = prom.query("up")
            except (OSError, AssertionError, ValueError):
                # Not up yet; until its storage is ready Prometheus answers HTTP 503 in plain text
                # (a ValueError from the JSON parse): one clean-clone CI hit that on a busy host.
                time.sleep(0.2)
                continue
            if len(up) == len(targets) and all(r["value"][1] == "1" for r in up):
                return prom
            time.sleep(0.2)
        raise RuntimeError(
            f"prometheus did not scrape {targets} within {timeout_s} s: {log.read_text()[-2000:]}"
        )
    except BaseException:
        prom.stop()
        raise


@dataclass
class SimUnderPrometheus:
    sim_url: str
    trace: Path
    prometheus: Prometheus

    def traces(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.trace.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="package")
def sim_under_prometheus(
    prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimUnderPrometheus]:
    tmp = tmp_path_factory.mktemp("prometheus")
    trace = tmp / "sim_trace.jsonl"
    sim = ServerProcess(
        ["-m", "tokenload.sim", "--port", "0", "--trace", str(trace), *SIM_ARGS], log_path=tmp / "sim.log"
    )
    sim.start()
    try:
        prom = start_prometheus(prometheus_bin, tmp, {"sim": urllib.parse.urlsplit(sim.url).netloc})
        try:
            yield SimUnderPrometheus(sim.url, trace, prom)
        finally:
            prom.stop()
    finally:
        sim.stop()

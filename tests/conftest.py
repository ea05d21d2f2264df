"""Shared fixtures: real processes over loopback (the mock server, Locust masters and workers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.browser import find_chromium
from tokenload.serving.process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@dataclass
class Mock:
    url: str
    trace: Path

    def traces(self) -> list[dict]:
        return [json.loads(line) for line in self.trace.read_text().splitlines() if line.strip()]

    def stats(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(self.url + "/mock/stats", timeout=5) as r:
            return json.load(r)


@pytest.fixture
def start_mock(tmp_path: Path) -> Iterator:
    servers: list[ServerProcess] = []

    def start(*args: str) -> Mock:
        trace = tmp_path / f"trace{len(servers)}.jsonl"
        srv = ServerProcess(["-m", "tokenload.mock", "--port", "0", "--trace", str(trace), *args])
        servers.append(srv)
        return Mock(srv.start(), trace)

    yield start
    for s in servers:
        s.stop()


@dataclass
class LocustRun:
    returncode: int
    output: str
    run_dir: Path


def run_locust(
    locustfile: str,
    host: str,
    run_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 120,
) -> LocustRun:
    """One headless Locust process (bounded in time), as a user would run it."""
    cmd = [
        str(BIN / "locust"), "-f", str(ROOT / locustfile), "--host", host, "--headless",
        "--run-dir", str(run_dir), "--stop-timeout", "10", *args,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})}
    )
    return LocustRun(proc.returncode, proc.stdout + proc.stderr, run_dir)


def read_records(run_dir: Path) -> list[dict]:
    return [
        json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()
    ]


def locust_request_count(output: str) -> int:
    """Requests in Locust's final Aggregated row."""
    rows = [line for line in output.splitlines() if line.strip().startswith("Aggregated") and "|" in line]
    return int(rows[-1].split()[1])


@pytest.fixture(scope="session")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        msg = "no Chromium binary (chromium, chromium-browser, google-chrome or $CHROMIUM) to load the page"
        if os.environ.get("CI"):
            pytest.fail(msg + "; CI is set, so the browser test must run")
        pytest.skip(msg)
    return path

"""Fixtures for driving `tokenload sim` over HTTP: a real emulator process on loopback."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tokenload.serving.process import ServerProcess


def http_json(url: str, body: dict | None = None, timeout: float = 30) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Samples of /metrics keyed by (sample name, sorted labels without model/engine)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine")))
            out[(s.name, labels)] = s.value
    return out


@dataclass
class Sim:
    url: str
    trace: Path
    samples: list[dict] = field(default_factory=list)

    def traces(self) -> list[dict]:
        return [json.loads(x) for x in self.trace.read_text().splitlines() if x.strip()]

    def get(self, name: str, **labels: str) -> float:
        return scrape(self.url).get((name, tuple(sorted(labels.items()))), 0.0)


class Sampler:
    """Scrapes /metrics every interval in a thread while a load runs (bounded by stop())."""

    def __init__(self, url: str, interval_s: float = 0.25) -> None:
        self.url, self.interval_s = url, interval_s
        self.samples: list[dict] = []
        self.times: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sample = scrape(self.url)
            except OSError:
                pass
            else:
                self.samples.append(sample)
                self.times.append(time.monotonic())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)

    def steady_rate(self, name: str, skip_s: float, window_s: float) -> float:
        """Counter rate between ``skip_s`` and ``skip_s + window_s`` after the first sample."""
        t0 = self.times[0] + skip_s
        pts = [
            (t, s.get((name, ()), 0.0))
            for t, s in zip(self.times, self.samples, strict=True)
            if t0 <= t <= t0 + window_s
        ]
        assert len(pts) >= 2, "too few samples in the window"
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def series(self, name: str, **labels: str) -> list[float]:
        key = (name, tuple(sorted(labels.items())))
        return [s.get(key, 0.0) for s in self.samples]


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator:
    procs: list[ServerProcess] = []

    def start(*args: str) -> Sim:
        trace = tmp_path / f"sim_trace{len(procs)}.jsonl"
        srv = ServerProcess(["-m", "tokenload.sim", "--port", "0", "--trace", str(trace), *args])
        procs.append(srv)
        url = srv.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        return Sim(url, trace)

    yield start
    for p in procs:
        p.stop()

"""tokenload's own /metrics: log histograms re-bucketed for Prometheus, the collector read from a
run context, streams in flight counted from the users' greenlets, the process's health, and
serving (a Flask route, prometheus_client's WSGI app on a gevent server), all over loopback."""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.runners import MasterRunner

import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from tokenload.loadgen.exporter import (
    BUCKETS_S,
    Exporter,
    log_histogram_buckets,
    note_worker,
)
from tokenload.loadgen.fleet import Fleet
from tokenload.loadgen.health import HealthMonitor
from tokenload.loadgen.phases import StepTracker
from tokenload.loadgen.plugin import ProcessCache
from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.failures import FAILURE_CLASSES
from tokenload.metrics.histogram import LogHistogram


def test_log_histogram_buckets_are_cumulative_with_an_exact_count() -> None:
    h = LogHistogram()
    for v in (0.0, 0.5, 3.0, 3.0, 80.0, 4000.0, 900_000.0):  # ms
        h.add(v)
    counts = log_histogram_buckets(h, BUCKETS_S, scale=0.001)
    at = dict(zip(BUCKETS_S, counts, strict=False))
    assert len(counts) == len(BUCKETS_S) + 1 and counts[-1] == 7
    assert counts == sorted(counts)
    assert at[0.001] == 2 and at[0.0025] == 2 and at[0.005] == 4 and at[0.1] == 5 and at[5.0] == 6
    assert at[600.0] == 6  # 15 minutes: only in +Inf
    assert log_histogram_buckets(LogHistogram(), (1.0,)) == [0.0, 0.0]


def _record(ttft: float, e2e: float, out: int = 11, failure: str | None = None) -> dict[str, Any]:
    return {
        "name": "/v1/chat/completions",
        "failure_class": failure,
        "input_tokens": 100,
        "output_tokens": out,
        "token_count_diff": 0,
        "ttft_ms": ttft,
        "tpot_ms": None if failure else (e2e - ttft) / (out - 1),
        "e2e_ms": e2e,
    }


class _Local:
    user_count = 3
    target_user_count = 4
    user_greenlets = ()


class _Master(MasterRunner):
    # Class attributes instead of a live master: the collector only reads these.
    user_count = 12
    target_user_count = 16
    greenlet = None


def _ctx(runner: Any) -> SimpleNamespace:
    stats = LLMStats()
    stats.record(_record(100.0, 600.0), [(50.0, 1)] * 10)
    stats.record(_record(300.0, 1300.0), [(100.0, 2)] * 5)
    stats.record(_record(30.0, 30.0, out=0, failure="http_5xx"), [])
    stats.record(_record(40.0, 40.0, out=0, failure="http_429"), [])
    stats.cancelled = 1
    return SimpleNamespace(
        stats=stats,
        steps=StepTracker(),
        environment=SimpleNamespace(runner=runner),
        run_dir=Path("/r/run-7"),
        fleet=Fleet(),
    )


class _Stream:
    chunk_tokens = 0


def _health(cpu: float = 12.5, lag: float = 0.004) -> Any:
    return SimpleNamespace(cpu_percent=cpu, loop_lag_s=lag)


def _scrape(exporter: Exporter) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(exporter.text().decode())}


def _samples(family: Any) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def test_the_collector_reads_the_run_context() -> None:
    ctx = _ctx(_Local())
    exporter = Exporter(ctx, _health())
    fams = _scrape(exporter)
    ttft = _samples(fams["tokenload_ttft_seconds"])
    assert ttft[("tokenload_ttft_seconds_count", ())] == 2  # successes only
    assert ttft[("tokenload_ttft_seconds_sum", ())] == pytest.approx(0.4)
    assert ttft[("tokenload_ttft_seconds_bucket", (("le", "0.2"),))] == 1
    itl = _samples(fams["tokenload_itl_seconds"])
    assert itl[("tokenload_itl_seconds_count", ())] == 20  # once per token
    assert _samples(fams["tokenload_e2e_seconds"])[("tokenload_e2e_seconds_count", ())] == 2
    req = _samples(fams["tokenload_requests"])
    assert req[("tokenload_requests_total", (("failure_class", ""), ("status", "ok")))] == 2
    assert req[("tokenload_requests_total", (("failure_class", "http_5xx"), ("status", "failed")))] == 1
    assert req[("tokenload_requests_total", (("failure_class", "http_429"), ("status", "failed")))] == 1
    assert req[("tokenload_requests_total", (("failure_class", ""), ("status", "cancelled")))] == 1
    failed = {dict(k[1])["failure_class"] for k in req if dict(k[1])["status"] == "failed"}
    assert failed == set(FAILURE_CLASSES)  # every class, 0 until it happens: rate() works from the start
    assert fams["tokenload_output_tokens"].samples[0].value == 22
    assert fams["tokenload_output_tokens_arrived"].samples[0].value == 0  # no stream went through the fleet
    stream = _Stream()
    stream.chunk_tokens = 7
    ctx.fleet.started(None, stream)  # in progress: counted already
    ctx.fleet.note_report("w0", {"arrived_tokens": 30})
    arrived = _scrape(exporter)["tokenload_output_tokens_arrived"]
    assert arrived.samples[0].value == 37
    ctx.fleet.ended(None, stream)
    assert fams["tokenload_input_tokens"].samples[0].value == 400
    assert fams["tokenload_requests_in_flight"].samples[0].value == 0
    assert _samples(fams["tokenload_process_cpu_percent"]) == {
        ("tokenload_process_cpu_percent", (("worker", "local"),)): 12.5
    }
    assert fams["tokenload_workers"].samples[0].value == 0
    assert fams["tokenload_run_info"].samples[0].labels["run_id"] == "run-7"
    # Between steps: no step, Locust's own target.
    assert fams["tokenload_step_index"].samples[0].value == -1
    assert fams["tokenload_target_concurrency"].samples[0].value == 4
    assert fams["tokenload_users"].samples[0].value == 3
    assert "tokenload_target_rate_rps" not in fams


def test_the_step_gauges_follow_the_tracker() -> None:
    ctx = _ctx(_Local())
    exporter = Exporter(ctx, _health())
    ctx.steps.begin(0, 8, None, time.time())
    fams = _scrape(exporter)
    assert fams["tokenload_step_index"].samples[0].value == 0
    assert fams["tokenload_step_measuring"].samples[0].value == 0
    assert fams["tokenload_target_concurrency"].samples[0].value == 8
    ctx.steps.measure(0, time.time())
    assert _scrape(exporter)["tokenload_step_measuring"].samples[0].value == 1
    ctx.steps.end(0, time.time())
    ctx.steps.begin(1, None, 2.5, time.time())  # a rate step: its target is a rate
    fams = _scrape(exporter)
    assert fams["tokenload_step_index"].samples[0].value == 1
    assert fams["tokenload_target_rate_rps"].samples[0].value == 2.5
    assert "tokenload_target_concurrency" not in fams


def test_the_master_sums_what_its_workers_report() -> None:
    runner = object.__new__(_Master)
    ctx = _ctx(runner)
    ctx.cache = ProcessCache()
    exporter = ctx.cache.exporter = Exporter(ctx, _health(cpu=5.0))
    note_worker(ctx, "host_a", {"worker": "w0", "in_flight": 3, "cpu_percent": 40.0, "loop_lag_s": 0.002})
    note_worker(ctx, "host_b", {"worker": "w1", "in_flight": 4, "cpu_percent": 95.0, "loop_lag_s": 0.05})
    note_worker(ctx, "host_b", {"worker": "w1", "in_flight": 5, "cpu_percent": 90.0, "loop_lag_s": 0.02})
    note_worker(ctx, "host_c", None)  # a report without the block changes nothing
    fams = _scrape(exporter)
    assert fams["tokenload_requests_in_flight"].samples[0].value == 8
    assert fams["tokenload_workers"].samples[0].value == 2
    cpu = {s.labels["worker"]: s.value for s in fams["tokenload_process_cpu_percent"].samples}
    assert cpu == {"master": 5.0, "w0": 40.0, "w1": 90.0}
    lag = {s.labels["worker"]: s.value for s in fams["tokenload_loop_lag_seconds"].samples}
    assert lag["w1"] == pytest.approx(0.02)
    assert fams["tokenload_users"].samples[0].value == 12


def test_process_health_sees_a_blocked_loop() -> None:
    health = HealthMonitor(lambda: (None, None))
    health.start()
    try:
        gevent.sleep(0.3)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.6:  # the loop is blocked: no greenlet runs
            pass
        deadline = time.monotonic() + 10
        cpu_seen = 0.0
        while health.loop_lag_s < 0.3 and time.monotonic() < deadline:
            gevent.sleep(0.1)
            cpu_seen = max(cpu_seen, health.cpu_percent)
        assert health.loop_lag_s >= 0.3
        # The busy loop burnt CPU; how much per second depends on the machine's other load.
        while cpu_seen <= 0 and time.monotonic() < deadline:
            gevent.sleep(0.1)
            cpu_seen = max(cpu_seen, health.cpu_percent)
        assert cpu_seen > 0
    finally:
        health.stop()


def test_served_on_a_flask_route_and_on_a_port() -> None:
    exporter = Exporter(_ctx(_Local()), _health())
    app = Flask(__name__)
    guarded: list[str] = []

    def auth(view: Any) -> Any:
        guarded.append(view.__name__)
        return view

    exporter.add_web_route(SimpleNamespace(app=app, auth_required_if_enabled=auth), "/base")
    resp = app.test_client().get("/base/metrics")
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain")
    assert b"tokenload_ttft_seconds_bucket" in resp.data and guarded == ["metrics"]

    exporter.serve("127.0.0.1", 0)
    try:
        assert exporter.server is not None
        port = exporter.server.server_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        names = {f.name for f in text_string_to_metric_families(body)}
        assert {"tokenload_ttft_seconds", "tokenload_requests", "tokenload_step_index"} <= names
    finally:
        exporter.stop()

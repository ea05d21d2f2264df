"""A Prometheus that is down, silent or answers garbage: the source counts each failure by
reason, warns once per reason, rests after a connection failure and never raises. Loopback only:
a closed port, a socket that accepts and never answers, a server that answers garbage."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest
from gevent.pywsgi import WSGIServer

from tokenload.servermetrics.prometheus_source import PrometheusSource


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """Accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.fixture
def garbage_port() -> Iterator[int]:
    def app(_environ: dict, start_response: object) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])  # type: ignore[operator]
        return [b"<html>not prometheus</html>"]

    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    yield server.server_port
    server.stop(timeout=1)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tokenload.prometheus"]


def test_down_counts_once_then_rests(closed_port: int, caplog: pytest.LogCaptureFixture) -> None:
    source = PrometheusSource(f"http://127.0.0.1:{closed_port}", backoff_s=300)
    with caplog.at_level(logging.WARNING):
        assert source.probe() is False
        out = source.window(100.0, 110.0)
    assert set(out) == {"source", "queries", "failed_queries"}
    assert out["failed_queries"] == out["queries"]
    assert source.failures["down"] == 1 and source.failures["skipped"] == out["queries"] + 1
    assert source.queries == 1  # nothing is sent while resting
    assert len(_warnings(caplog)) == 2  # down, skipped


def test_silence_is_a_timeout(silent_port: int, caplog: pytest.LogCaptureFixture) -> None:
    source = PrometheusSource(f"http://127.0.0.1:{silent_port}", timeout_s=0.3, backoff_s=300)
    with caplog.at_level(logging.WARNING):
        out = source.window(100.0, 110.0)
    assert out["failed_queries"] == out["queries"]
    assert source.failures["timeout"] == 1 and source.failures["skipped"] == out["queries"]
    assert any("timeout" in m for m in _warnings(caplog))


def test_garbage_is_a_bad_answer(garbage_port: int, caplog: pytest.LogCaptureFixture) -> None:
    source = PrometheusSource(f"http://127.0.0.1:{garbage_port}/prefix")
    with caplog.at_level(logging.WARNING):
        out = source.window(100.0, 110.0)
        source.window(100.0, 110.0)  # not cached: it failed
    assert out["failed_queries"] == out["queries"] > 20
    assert source.failures == {"bad_answer": 2 * (out["queries"] + 1)}  # + each freshness query
    [warning] = _warnings(caplog)
    assert "not JSON" in warning


def test_each_replicas_figures_reuse_the_windows_answers_even_when_not_kept(closed_port: int) -> None:
    """A window that was not kept (a failure here; a step in progress, a freshness wait that ran
    out) is not asked again for its replicas: the same answers, the failures counted once."""
    source = PrometheusSource(f"http://127.0.0.1:{closed_port}", backoff_s=300)
    out = source.window(100.0, 110.0)
    failures, queries = dict(source.failures), source.queries
    assert out["failed_queries"] == out["queries"] > 20
    assert source.replicas(100.0, 110.0) is None
    assert source.failures == failures and source.queries == queries
    # Another window is asked (and, Prometheus resting, skipped).
    source.replicas(110.0, 120.0)
    assert source.failures["skipped"] > failures["skipped"]


def test_the_reports_series_failing_never_make_the_steps_rest(
    silent_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    source = PrometheusSource(f"http://127.0.0.1:{silent_port}", timeout_s=0.3, backoff_s=300)
    with caplog.at_level(logging.WARNING):
        assert source.series(100.0, 110.0) == []
        assert source.failures == {}  # the steps' tally is untouched ...
        assert source.series_failures["timeout"] >= 1 and source.series_failures.get("skipped", 0) >= 1
        asked = source.queries
        source.probe()  # ... and the steps' queries are not resting: this one is sent
        assert source.queries == asked + 1 and source.failures == {"timeout": 1}
    assert any("report's server charts" in m for m in _warnings(caplog))

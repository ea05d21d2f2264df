"""The scraper against targets that fail in each way: a marked gap, counted, warned once."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import gevent

from tokenload.servermetrics.scraper import Scraper
from tokenload.serving.http import HTTPServer

GOLDEN = (Path(__file__).resolve().parent.parent / "goldens" / "vllm-0.32-cpu-metrics.txt").read_bytes()


def _server() -> HTTPServer:
    http = HTTPServer("127.0.0.1", 0)
    http.route("GET", "/good")(lambda req, conn: conn.respond(200, GOLDEN, content_type="text/plain"))
    http.route("GET", "/e500")(lambda req, conn: conn.respond(500, b"boom", content_type="text/plain"))
    http.route("GET", "/garbage")(
        lambda req, conn: conn.respond(200, b'vllm:num_requests_running{model_name="x" 1\n')
    )
    http.route("GET", "/empty")(lambda req, conn: conn.respond(200, b"<html>hello</html>"))

    def slow(req, conn):
        gevent.sleep(2.0)
        conn.respond(200, GOLDEN)

    http.route("GET", "/slow")(slow)
    http.start()
    return http


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_failure_is_a_counted_gap(caplog, tmp_path: Path) -> None:
    http = _server()
    try:
        base = "http://127.0.0.1:%d" % http.address[1]
        urls = [
            f"{base}/good",
            f"{base}/e500",
            f"{base}/garbage",
            f"{base}/empty",
            f"{base}/slow",
            f"http://127.0.0.1:{_closed_port()}/metrics",
        ]
        # One unchecked round first: after other in-process gevent tests, the first round can
        # stall on the hub's start-up work (the stuck round is then a counted gap, see below).
        Scraper(urls, interval_s=0.5).scrape_once()
        caplog.clear()
        scraper = Scraper(urls, interval_s=0.5, out_file=tmp_path / "s.jsonl")
        with caplog.at_level(logging.WARNING, logger="tokenload.scraper"):
            for _ in range(3):
                scraper.scrape_once()
        scraper.stop()
    finally:
        http.stop()
    f = scraper.failures
    assert f[urls[0]] == {}
    assert f[urls[1]] == {"http_error": 3}
    assert f[urls[2]] == {"garbage": 3}
    assert f[urls[3]] == {"no_known_metrics": 3}
    assert f[urls[4]] == {"timeout": 3}
    assert f[urls[5]] == {"down": 3}
    good = [p for p in scraper.points if p.target == urls[0]]
    assert len(good) == 3 and all(p.ok for p in good)
    assert good[0].scalars["preemptions"] == 164.0
    gaps = [p for p in scraper.points if not p.ok]
    assert len(gaps) == 15 and all(p.error for p in gaps)
    # Warned once per target and reason, not once per scrape; an error answer's first line is
    # kept (walkthrough: the emulator router's "scrape each replica's /metrics" was lost).
    assert len([r for r in caplog.records if "scraping" in r.getMessage()]) == 5
    assert next(p.error for p in gaps if p.target == urls[1]) == "HTTP 500: boom"
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 18


def test_a_stuck_scrape_is_a_gap_not_a_silent_loss(monkeypatch) -> None:
    scraper = Scraper(["http://127.0.0.1:1/metrics"], interval_s=0.2, timeout_s=0.1)
    monkeypatch.setattr(scraper, "_scrape", lambda target: gevent.sleep(5))
    points = scraper.scrape_once()
    assert len(points) == 1 and not points[0].ok
    assert scraper.failures["http://127.0.0.1:1/metrics"] == {"timeout": 1}


def test_bad_interval_is_rejected() -> None:
    import pytest

    with pytest.raises(ValueError, match="--metrics-interval"):
        Scraper(["http://127.0.0.1:1/metrics"], interval_s=0)
    with pytest.raises(ValueError, match="--metrics-url"):
        Scraper(["ftp://x/metrics"])

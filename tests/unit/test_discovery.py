"""Replica discovery during the run (``--metrics-discover``, issue #19 item 5): the spec's two
forms, the lookup, and the scraper following the replicas as they come and go, each change a
line of server_metrics.jsonl. Kubernetes' DNS cannot run here: the headless Service's answers
come from a resolver given in its place; the file form and the scraped servers are real."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from tokenload.servermetrics.discovery import parse_spec
from tokenload.servermetrics.scraper import Scraper
from tokenload.serving.http import HTTPServer

GOLDEN = (Path(__file__).resolve().parent.parent / "goldens" / "vllm-0.32-cpu-metrics.txt").read_bytes()


class Dns:
    """A headless Service's name: the addresses of its ready pods, changed by the test."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int, type: int = 0) -> list[tuple]:
        assert type == socket.SOCK_STREAM
        self.asked.append((host, port))
        if not self.addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, type, 6, "", (a, port)) for a in self.addresses
        ]


def test_a_headless_service_gives_one_url_per_replica() -> None:
    dns = Dns("10.0.0.12", "10.0.0.3", "10.0.0.12", "fd00::5")
    assert parse_spec("vllm-metrics:8000").find(dns) == [
        "http://10.0.0.12:8000/metrics",
        "http://10.0.0.3:8000/metrics",
        "http://[fd00::5]:8000/metrics",
    ]
    assert dns.asked == [("vllm-metrics", 8000)]
    assert parse_spec("vllm-metrics:8000/v1/metrics").find(Dns("10.0.0.1")) == [
        "http://10.0.0.1:8000/v1/metrics"
    ]


@pytest.mark.parametrize(
    "spec", ["vllm-metrics", ":8000", "vllm-metrics:http", "host:0", "file:", "http://a:80/m"]
)
def test_a_malformed_spec_names_the_forms(spec: str) -> None:
    with pytest.raises(ValueError, match=r"--metrics-discover: expected HOST:PORT\[/PATH\] .* or file:PATH"):
        parse_spec(spec)


def test_a_discovery_file_lists_urls_and_a_bad_line_is_named(tmp_path: Path) -> None:
    f = tmp_path / "replicas.txt"
    f.write_text("# replicas\nhttp://10.0.0.2:8000/metrics\n\n  http://10.0.0.1:8000/metrics  # a comment\n")
    assert parse_spec(f"file:{f}").find() == ["http://10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics"]
    f.write_text("http://10.0.0.1:8000/metrics\n10.0.0.2:8000\n")
    with pytest.raises(ValueError, match=r"replicas.txt:2: expected an http\(s\) URL, got '10.0.0.2:8000'"):
        parse_spec(f"file:{f}").find()


def _server() -> HTTPServer:
    http = HTTPServer("127.0.0.1", 0)
    http.route("GET", "/metrics")(lambda req, conn: conn.respond(200, GOLDEN, content_type="text/plain"))
    http.start()
    return http


def test_the_scraper_follows_replicas_that_come_and_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _server(), _server()
    try:
        url_a = f"http://127.0.0.1:{a.address[1]}/metrics"
        url_b = f"http://127.0.0.1:{b.address[1]}/metrics"
        listing = tmp_path / "replicas.txt"
        listing.write_text(url_a + "\n")
        out = tmp_path / "server_metrics.jsonl"
        # Which targets each tick scraped is the claim, not whether each answered in time (the
        # first round in a process can stall on gevent's start-up: a gap, still a point).
        scraper = Scraper([], interval_s=2.0, out_file=out, discover=parse_spec(f"file:{listing}"))
        assert [t.url for t in scraper.targets] == [url_a]  # found at start: not an event
        scraper.scrape_once()
        listing.write_text(f"{url_a}\n{url_b}\n")  # an autoscaler adds a replica
        assert scraper.refresh_targets()
        scraper.scrape_once()
        listing.write_text(url_b + "\n")  # and takes the first one away
        assert scraper.refresh_targets()
        scraper.scrape_once()
        listing.unlink()  # the lookup fails: the targets stay, warned once, counted each time
        with caplog.at_level(logging.WARNING, logger="tokenload.scraper"):
            assert not scraper.refresh_targets() and not scraper.refresh_targets()
        scraper.scrape_once()
        summary = scraper.targets_summary()
        scraper.stop()
    finally:
        a.stop()
        b.stop()
    removed_at = scraper.events[1]["t"]
    scraped = [p.target for p in scraper.points]
    assert sorted(scraped) == sorted([url_a, url_a, url_b, url_b, url_b])
    assert not [p for p in scraper.points if p.target == url_a and p.t >= removed_at]
    assert [(e["event"], e["target"]) for e in scraper.events] == [
        ("target_added", url_b),
        ("target_removed", url_a),
    ]
    assert len([r for r in caplog.records if "lookup failed" in r.getMessage()]) == 1
    assert summary is not None
    assert summary["at_start"] == [url_a] and summary["at_end"] == [url_b]
    assert summary["lookup_failures"] == {"down": 2}
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    events = [x for x in lines if "event" in x]
    assert [(e["event"], e["target"], e["via"]) for e in events] == [
        ("target_added", url_b, f"file:{listing}"),
        ("target_removed", url_a, f"file:{listing}"),
    ]
    assert len(lines) - len(events) == 5  # the scrapes, in between


def test_fixed_urls_stay_and_a_failed_first_lookup_starts_with_them() -> None:
    dns = Dns()
    scraper = Scraper(
        ["http://extra:9000/metrics"], interval_s=1.0, discover=parse_spec("vllm:8000"), resolve=dns
    )
    assert [t.url for t in scraper.targets] == ["http://extra:9000/metrics"]
    assert scraper.discovery_failures == {"down": 1}
    dns.addresses = ["10.0.0.7"]
    assert scraper.refresh_targets()
    assert [t.url for t in scraper.targets] == ["http://extra:9000/metrics", "http://10.0.0.7:8000/metrics"]
    assert [e["target"] for e in scraper.events] == ["http://10.0.0.7:8000/metrics"]

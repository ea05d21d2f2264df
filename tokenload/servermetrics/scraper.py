"""The master-side scraper: a greenlet that GETs every target's /metrics each interval.

A target that is down, slow (the timeout is below the interval), answers an error or garbage
leaves a marked gap in the series, is counted by reason and warned about once per target and
reason, and never stops the load.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import gevent

from tokenload.client.http_stream import StreamTarget, Timeouts
from tokenload.servermetrics.parse import HistogramState, ParseError, parse_page
from tokenload.servermetrics.summary import tick_series

__all__ = ["ScrapePoint", "Scraper"]

log = logging.getLogger("tokenload.scraper")


@dataclass(slots=True)
class ScrapePoint:
    t: float  # Unix time the scrape started
    target: str
    ok: bool
    scalars: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, HistogramState] = field(default_factory=dict)
    error: str | None = None
    duration_ms: float = 0.0


class _Target:
    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--metrics-url: expected an http(s) URL, got {url!r}")
        self.url = url
        self.path = parts.path or "/metrics"
        if parts.query:
            self.path += "?" + parts.query
        self.client = StreamTarget(f"{parts.scheme}://{parts.netloc}", timeouts=Timeouts(connect_s=timeout_s))
        self.warned: set[str] = set()


class Scraper:
    def __init__(
        self,
        urls: list[str],
        *,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        out_file: Path | None = None,
        max_points: int = 100_000,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"--metrics-interval: expected a positive number of seconds, got {interval_s}")
        self.interval_s = interval_s
        self.timeout_s = timeout_s if timeout_s is not None else max(0.1, 0.8 * interval_s)
        self.targets = [_Target(u, self.timeout_s) for u in urls]
        self.points: list[ScrapePoint] = []
        self.failures: dict[str, dict[str, int]] = {t.url: {} for t in self.targets}
        self._max_points = max_points
        self._out: IO[str] | None = open(out_file, "a", encoding="utf-8") if out_file else None  # noqa: SIM115
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    @property
    def running(self) -> bool:
        return self._greenlet is not None

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=2)
            self._greenlet = None
        if self._out is not None and not self._out.closed:
            self._out.close()

    def scrape_once(self) -> list[ScrapePoint]:
        jobs = [gevent.spawn(self._scrape, t) for t in self.targets]
        gevent.joinall(jobs, timeout=self.timeout_s + 1.0)
        points = []
        for job, target in zip(jobs, self.targets, strict=True):
            if job.value is not None:
                points.append(job.value)
                continue
            # Stuck beyond its own timeout (or crashed): still a marked, counted gap.
            job.kill(block=False)
            points.append(
                self._gap(target, time.time(), "timeout", f"no answer within {self.timeout_s + 1.0:g} s")
            )

        self._keep(points)
        return points

    def _run(self) -> None:
        next_t = time.monotonic()
        while True:
            self.scrape_once()
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (a slow target): skip ticks rather than burst
                next_t = time.monotonic()
                delay = 0
            gevent.sleep(delay)

    def _scrape(self, target: _Target) -> ScrapePoint:
        t0 = time.time()
        m0 = time.perf_counter()
        point = ScrapePoint(t=t0, target=target.url, ok=False)
        reason = None
        try:
            with gevent.Timeout(self.timeout_s, TimeoutError):
                status, body = target.client.get(target.path, timeout_s=self.timeout_s)
            if status != 200:
                reason, point.error = "http_error", f"HTTP {status}"
            else:
                values = parse_page(body.decode("utf-8", "replace"))
                if not values.families_seen:
                    reason, point.error = "no_known_metrics", "no vLLM/SGLang families on the page"
                else:
                    point.ok = True
                    point.scalars, point.histograms = values.scalars, values.histograms
        except TimeoutError:
            reason, point.error = "timeout", f"no complete answer within {self.timeout_s:g} s"
        except ParseError as exc:
            reason, point.error = "garbage", str(exc)[:200]
        except (OSError, ValueError) as exc:
            reason, point.error = "down", f"{type(exc).__name__}: {exc}"[:200]
        point.duration_ms = (time.perf_counter() - m0) * 1000
        if reason is not None:
            self._count(target, reason, point.error)
        return point

    def _gap(self, target: _Target, t: float, reason: str, error: str) -> ScrapePoint:
        self._count(target, reason, error)
        return ScrapePoint(t=t, target=target.url, ok=False, error=error)

    def _count(self, target: _Target, reason: str, error: str | None) -> None:
        counts = self.failures[target.url]
        counts[reason] = counts.get(reason, 0) + 1
        if reason not in target.warned:
            target.warned.add(reason)
            log.warning(
                "tokenload: scraping %s failed (%s): %s; the gap is marked, the load goes on",
                target.url,
                reason,
                error,
            )

    def _keep(self, points: list[ScrapePoint]) -> None:
        self.points.extend(points)
        if len(self.points) > self._max_points:
            del self.points[: len(self.points) - self._max_points]
        if self._out is not None and not self._out.closed:
            self._out.write("".join(json.dumps(_point_json(p), separators=(",", ":")) + "\n" for p in points))
            self._out.flush()

    # -- reading the series ---------------------------------------------------------------
    def series(
        self, quantity: str, t0: float = float("-inf"), t1: float = float("inf"), target: str | None = None
    ) -> list[tuple[float, float]]:
        """(t, value) of a scalar quantity across targets scraped in the same tick: ratios are
        averaged over replicas, counts and counters summed."""
        return tick_series(self.points, quantity, t0, t1, target)


def _point_json(p: ScrapePoint) -> dict[str, Any]:
    d: dict[str, Any] = {"t": p.t, "target": p.target, "ok": p.ok, "ms": round(p.duration_ms, 3)}
    if p.ok:
        d["scalars"] = p.scalars
        d["histograms"] = {k: {"b": h.buckets, "s": h.sum, "c": h.count} for k, h in p.histograms.items()}
    else:
        d["error"] = p.error
    return d

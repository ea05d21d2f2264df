"""The master-side scraper: a greenlet that GETs every target's /metrics each interval.

A target that is down, slow (the timeout is below the interval), answers an error or garbage
leaves a marked gap in the series, is counted by reason and warned about once per target and
reason, and never stops the load.

With a discovery spec (``--metrics-discover``, servermetrics/discovery.py) the targets are looked
up again every ``discover_every_s``: a replica that appears is scraped from the next tick, one
that vanishes is no longer scraped, and each change is a line of ``server_metrics.jsonl``
(``{"t", "event": "target_added" | "target_removed", "target", "via"}``) and an entry of
:attr:`Scraper.events`. A failed lookup keeps the targets as they were.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import gevent

from tokenload.client.http_stream import StreamTarget, Timeouts
from tokenload.servermetrics.discovery import DiscoverySpec, Resolver, is_metrics_url
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
        if not is_metrics_url(url):
            raise ValueError(f"--metrics-url: expected an http(s) URL, got {url!r}")
        parts = urlsplit(url)
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
        discover: DiscoverySpec | None = None,
        discover_every_s: float = 5.0,
        resolve: Resolver = socket.getaddrinfo,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"--metrics-interval: expected a positive number of seconds, got {interval_s}")
        if discover_every_s <= 0:
            raise ValueError(
                f"--metrics-discover-every: expected a positive number of seconds, got {discover_every_s}"
            )
        self.interval_s = interval_s
        self.timeout_s = timeout_s if timeout_s is not None else max(0.1, 0.8 * interval_s)
        self.targets = [_Target(u, self.timeout_s) for u in dict.fromkeys(urls)]
        self.points: list[ScrapePoint] = []
        self.failures: dict[str, dict[str, int]] = {t.url: {} for t in self.targets}
        #: Replicas that appeared or vanished after the first lookup (server_metrics.jsonl's events).
        self.events: list[dict[str, Any]] = []
        #: Failed lookups by reason ("down": the name or file was not there, "malformed").
        self.discovery_failures: dict[str, int] = {}
        self._fixed = [t.url for t in self.targets]
        self._discover = discover
        self._discover_every_s = discover_every_s
        self._resolve = resolve
        self._last_lookup = float("-inf")
        self._discovery_warned: set[str] = set()
        self._max_points = max_points
        self._out: IO[str] | None = open(out_file, "a", encoding="utf-8") if out_file else None  # noqa: SIM115
        self._greenlet: gevent.Greenlet | None = None
        if discover is not None:
            self.refresh_targets(record=False)  # the replicas at start are the targets, not events
        self._initial = [t.url for t in self.targets]

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
        targets = list(self.targets)
        jobs = [gevent.spawn(self._scrape, t) for t in targets]
        gevent.joinall(jobs, timeout=self.timeout_s + 1.0)
        points = []
        for job, target in zip(jobs, targets, strict=True):
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

    def refresh_targets(self, *, record: bool = True) -> bool:
        """Look the replicas up again and scrape what is there now: the fixed URLs first, then
        the ones found. Returns False (targets unchanged) when the lookup failed."""
        if self._discover is None:
            return True
        self._last_lookup = time.monotonic()
        try:
            found = self._discover.find(self._resolve)
        except (OSError, UnicodeError, ValueError) as exc:
            reason = "malformed" if isinstance(exc, ValueError | UnicodeError) else "down"
            self.discovery_failures[reason] = self.discovery_failures.get(reason, 0) + 1
            if reason not in self._discovery_warned:
                self._discovery_warned.add(reason)
                log.warning(
                    "tokenload: --metrics-discover %s: lookup failed (%s: %s); scraping the %d target(s) "
                    "found before, looking again every %g s",
                    self._discover.text,
                    type(exc).__name__,
                    str(exc)[:200],
                    len(self.targets),
                    self._discover_every_s,
                )
            return False
        wanted = list(dict.fromkeys([*self._fixed, *found]))
        have = {t.url: t for t in self.targets}
        now = time.time()
        changes = [("target_removed", u) for u in have if u not in wanted]
        changes += [("target_added", u) for u in wanted if u not in have]
        self.targets = [have.get(u) or _Target(u, self.timeout_s) for u in wanted]
        for url in wanted:
            self.failures.setdefault(url, {})
        if record and changes:
            events = [{"t": now, "event": e, "target": u, "via": self._discover.text} for e, u in changes]
            self.events.extend(events)
            if self._out is not None and not self._out.closed:
                self._out.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
                self._out.flush()
            for e, u in changes:
                log.info(
                    "tokenload: %s %s (through %s)",
                    "scraping" if e == "target_added" else "no longer scraping",
                    u,
                    self._discover.text,
                )
        return True

    def targets_summary(self) -> dict[str, Any] | None:
        """summary.json's ``scrape_targets`` (with --metrics-discover; None without): the spec,
        the targets at start and at the end, every change and the failed lookups."""
        if self._discover is None:
            return None
        return {
            "discover": self._discover.text,
            "every_s": self._discover_every_s,
            "at_start": list(self._initial),
            "at_end": [t.url for t in self.targets],
            "events": [dict(e) for e in self.events],
            "lookup_failures": dict(self.discovery_failures),
        }

    def _run(self) -> None:
        next_t = time.monotonic()
        while True:
            if self._discover is not None and time.monotonic() - self._last_lookup >= self._discover_every_s:
                self.refresh_targets()
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
                # The answer's first line says why (the emulator's router names the replicas'
                # own /metrics to scrape instead), kept short.
                said = body[:300].decode("utf-8", "replace").strip().splitlines()[:1]
                reason, point.error = "http_error", f"HTTP {status}" + (f": {said[0][:160]}" if said else "")
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

"""A Prometheus server as the source of the server's figures (``--prometheus-url``), for fleets
whose pods cannot be scraped one by one: the master asks Prometheus, over HTTP, for each step's
window (the PromQL is built in :mod:`tokenload.servermetrics.promql`).

Queries run on gevent (geventhttpclient), a few at a time, each bounded by a timeout. A
Prometheus that is down, slow, answers an error or garbage is counted by reason and warned about
once per reason; its figures are then missing, and nothing here ever stops the load. After a
connection failure or a timeout the source rests ``backoff_s`` (queries meanwhile are counted as
``skipped``), so a run's end never waits on a dead server for long.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)

import copy
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit

import gevent
import gevent.pool
from geventhttpclient import HTTPClient

from tokenload.servermetrics.promql import (
    PromQuery,
    check_prometheus_url,
    freshness_query,
    gauge_step_s,
    live_queries,
    series_queries,
    window_queries,
)
from tokenload.servermetrics.promql_answers import (
    fleet_answers,
    live_row,
    series_points,
    summarize_answers,
    summarize_by,
)

__all__ = ["PrometheusSource"]

log = logging.getLogger("tokenload.prometheus")

#: The live page's queries give up sooner than the steps' (their point is simply missed).
LIVE_TIMEOUT_S = 3.0

#: A window's figures: the fleet's (``window``'s answer) and each replica's (``replicas``').
_Figures = tuple[dict[str, Any], dict[str, dict[str, Any]]]

#: Who asked a query: its failures are counted and warned about apart.
Side = Literal["steps", "live", "series"]
_MISSING = {
    "steps": "those server figures are missing, the load goes on",
    "live": "the live page's server charts miss a point",
    "series": "the report's server charts miss those series",
}


class PrometheusSource:
    """``window(t0, t1)`` -> the dict ``summarize_window`` returns, from Prometheus' answers."""

    def __init__(
        self,
        url: str,
        selector: tuple[str, ...] = (),
        *,
        replica_label: str = "instance",
        resolution_s: float = 1.0,
        timeout_s: float = 10.0,
        concurrency: int = 4,
        max_wait_s: float = 20.0,
        backoff_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = check_prometheus_url(url)
        self.selector = selector
        self.replica_label = replica_label
        self.resolution_s = resolution_s
        self.timeout_s = timeout_s
        self.max_wait_s = max_wait_s
        self.backoff_s = backoff_s
        self.clock = clock
        self.queries = 0
        #: reason -> count: down, timeout, http_error, bad_answer, skipped (the steps' figures)
        self.failures: dict[str, int] = {}
        #: The live page's own failed queries (reason -> count), apart from the steps' figures.
        self.live_failures: dict[str, int] = {}
        #: The report's series' own failed queries (reason -> count), read at the end of a run.
        self.series_failures: dict[str, int] = {}
        self._tallies = {"steps": self.failures, "live": self.live_failures, "series": self.series_failures}
        self._warned: set[tuple[str, str]] = set()
        self._resting_until = {"steps": 0.0, "series": 0.0}
        #: Settled windows: (the fleet's figures, each replica's).
        self._cache: dict[tuple[float, float], _Figures] = {}
        #: The last window asked, kept or not (``replicas`` reads it after ``window``).
        self._last: tuple[tuple[float, float] | None, _Figures | None] = (None, None)
        self._path = urlsplit(self.url).path
        self._concurrency = concurrency
        self._client = HTTPClient.from_url(
            self.url, concurrency=concurrency, connection_timeout=timeout_s, network_timeout=timeout_s
        )

    def close(self) -> None:
        self._client.close()

    # -- HTTP -----------------------------------------------------------------------------------
    def _get(
        self, endpoint: str, params: Mapping[str, Any], *, side: Side = "steps"
    ) -> Mapping[str, Any] | None:
        """The ``data`` of one API answer, or None (counted in ``side``'s tally, warned about once
        per side and reason). The steps' figures, the live page's (``live``: a shorter timeout)
        and the report's series (``series``) keep tallies of their own; after a connection
        failure or a timeout the steps' and the series' queries rest ``backoff_s`` (each side on
        its own; the series rest while the steps do too), the live page's never do."""
        if side != "live" and self.clock() < max(self._resting_until["steps"], self._resting_until[side]):
            return self._fail("skipped", f"resting {self.backoff_s:g} s after a connection failure", side)
        timeout_s = min(self.timeout_s, LIVE_TIMEOUT_S) if side == "live" else self.timeout_s
        self.queries += 1
        uri = f"{self._path}/api/v1/{endpoint}?{urlencode(params)}"
        try:
            with gevent.Timeout(timeout_s, TimeoutError):
                resp = self._client.get(uri, headers={"Accept": "application/json"})
                try:
                    status, body = resp.status_code, resp.read()
                finally:
                    resp.release()
        except TimeoutError:
            self._rest(side)
            return self._fail("timeout", f"no complete answer within {timeout_s:g} s", side)
        except (OSError, ValueError) as exc:  # refused, reset, unresolvable, an HTTP parse error
            self._rest(side)
            return self._fail("down", f"{type(exc).__name__}: {exc}"[:200], side)
        try:
            answer = json.loads(body)
        except ValueError:
            return self._fail("bad_answer", f"HTTP {status}, not JSON: {body[:80]!r}", side)
        if not isinstance(answer, dict):
            return self._fail("bad_answer", f"HTTP {status}: not a JSON object", side)
        if status != 200 or answer.get("status") != "success":
            error = f"{answer.get('errorType', '')}: {answer.get('error', '')}".strip(": ")
            return self._fail("http_error", f"HTTP {status} {error}"[:300], side)
        data = answer.get("data")
        if not isinstance(data, dict):
            return self._fail("bad_answer", "no 'data' object in the answer", side)
        return data

    def _rest(self, side: Side) -> None:
        if side != "live":
            self._resting_until[side] = self.clock() + self.backoff_s

    def _fail(self, reason: str, error: str, side: Side = "steps") -> None:
        tally = self._tallies[side]
        tally[reason] = tally.get(reason, 0) + 1
        if (side, reason) not in self._warned:
            self._warned.add((side, reason))
            log.warning("tokenload: Prometheus at %s: %s (%s); %s", self.url, error, reason, _MISSING[side])
        return None

    # -- what the run asks ------------------------------------------------------------------------
    def probe(self) -> bool:
        """One cheap query at the start of a run, so that a wrong URL is warned about early."""
        return self._get("query", {"query": "time()"}) is not None

    def start(self) -> None:
        gevent.spawn(self.probe)

    def _wait_fresh(self, t1: float) -> bool:
        """Wait (at most ``max_wait_s``) until Prometheus holds a sample at or after ``t1``: it
        ingests a scrape one scrape interval or so after the moment it describes."""
        deadline = time.monotonic() + self.max_wait_s
        query = freshness_query(self.selector, self.replica_label)
        while True:
            data = self._get("query", {"query": query})
            if data is None or not data.get("result"):
                return False  # no answer, or no series at all: waiting would not help
            try:
                newest = float(data["result"][0]["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                return False
            if newest >= t1:
                return True
            if time.monotonic() >= deadline:
                return False
            gevent.sleep(min(1.0, max(0.05, self.resolution_s / 2)))

    def _ask(self, q: PromQuery, t0: float, t1: float, side: Side = "steps") -> Mapping[str, Any] | None:
        if q.range:
            step = gauge_step_s(t0, t1, self.resolution_s)
            return self._get(
                "query_range",
                {"query": q.expr, "start": f"{t0:.3f}", "end": f"{t1:.3f}", "step": f"{step:.3f}"},
                side=side,
            )
        return self._get("query", {"query": q.expr, "time": f"{t1:.3f}"}, side=side)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Per canonical quantity over ``[t0, t1]`` (absent when nothing matched), with
        ``source``, ``queries`` and ``failed_queries``. Settled windows are cached (the live web
        page recomputes finished steps)."""
        key = (round(t0, 3), round(t1, 3))
        cached = self._cache.get(key)
        if cached is None:
            # A window that ends now is a step in progress (the live page's summary): no waiting.
            fresh = t1 < self.clock() - 0.05 and self._wait_fresh(t1)
            cached = self._figures(t0, t1, keep=fresh)
            if len(cached[0]) == 3 and not cached[0]["failed_queries"]:  # no figure, no failure
                sel = ",".join(self.selector)
                self._fail("no_match", f"no vLLM/SGLang series match {{{sel}}} between {t0:.0f} and {t1:.0f}")
        return copy.deepcopy(cached[0])

    def replicas(self, t0: float, t1: float) -> dict[str, dict[str, Any]] | None:
        """Each replica's own figures over ``[t0, t1]`` (as :meth:`window` gives the fleet's),
        keyed ``label=value`` by ``replica_label`` (``instance``: a scrape target), when at least
        two replicas had series in the window; None otherwise, or when ``replica_label`` is empty.
        From the same answers as the fleet's (asked once, grouped by that label)."""
        if not self.replica_label:
            return None
        key = (round(t0, 3), round(t1, 3))
        cached = self._cache.get(key)
        if cached is None:
            # window() asked a moment ago without keeping the answers (a step in progress, a
            # failure, a freshness wait that ran out): the same answers, not the queries again.
            last_key, last = self._last
            cached = last if last_key == key and last is not None else self._figures(t0, t1, keep=False)
        return copy.deepcopy(cached[1]) if len(cached[1]) >= 2 else None

    def _figures(self, t0: float, t1: float, keep: bool) -> _Figures:
        """The fleet's figures (``window``'s answer) and each replica's, from one set of queries:
        grouped by ``replica_label`` when there is one (the fleet's answer then adds the
        replicas' up, :func:`fleet_answers`). Kept when ``keep`` and nothing failed."""
        by = self.replica_label
        queries = window_queries(self.selector, t0, t1, by=by)
        failed_before = sum(self.failures.values())
        answers = gevent.pool.Pool(self._concurrency).map(lambda q: self._ask(q, t0, t1), queries)
        failed = sum(self.failures.values()) - failed_before
        out: dict[str, Any] = {"source": "prometheus", "queries": len(queries), "failed_queries": failed}
        fleet = fleet_answers(queries, answers, by) if by else answers
        out.update(summarize_answers(queries, fleet, t0, t1))
        # Kept as is: window() and replicas() hand out copies.
        result = (out, summarize_by(queries, answers, t0, t1, by) if by else {})
        key = (round(t0, 3), round(t1, 3))
        self._last = (key, result)
        if keep and not failed:
            self._cache[key] = result
        return result

    def series(self, t0: float, t1: float) -> list[dict[str, Any]]:
        """The server's time series over ``[t0, t1]`` as ``server_metrics.jsonl`` lines (each
        replica's by ``replica_label``), for the report's charts: a sample every
        ``resolution_s`` (coarser for a long run). What a failed query would have given is
        missing; its failure is counted in ``series_failures`` and never makes the steps'
        queries rest."""
        queries = series_queries(self.selector, self.replica_label)
        answers = gevent.pool.Pool(self._concurrency).map(lambda q: self._ask(q, t0, t1, "series"), queries)
        return series_points(queries, answers, self.replica_label)

    def live(self, now: float, since: float) -> dict[str, Any]:
        """The server's figures at ``now`` for the live page (tokenload.web.live's server row):
        gauges, the fullest replica's KV usage, rates, and the preemptions since ``since``."""
        queries = live_queries(self.selector, self.replica_label, max(1.0, now - since))
        keys = list(queries)
        answers = gevent.pool.Pool(self._concurrency).map(
            lambda k: self._get("query", {"query": queries[k], "time": f"{now:.3f}"}, side="live"), keys
        )
        return live_row(dict(zip(keys, answers, strict=True)))

    def summary(self, t0: float, t1: float) -> dict[str, Any]:
        """The run's server summary (``llm_stats.json["server"]``): the window and the failures."""
        out = self.window(t0, t1)
        out["prometheus_url"] = self.url
        out["query_failures"] = dict(self.failures)
        return out

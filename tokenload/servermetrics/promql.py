"""PromQL for the canonical server quantities over a time window, the live page and the run's
series, and the options that choose them. Pure; the answers are read in
:mod:`tokenload.servermetrics.promql_answers`.

For fleets whose pods cannot be scraped one by one, a Prometheus server that scrapes them is the
source (``--prometheus-url`` and ``--prometheus-selector``). Per canonical quantity and window
``[t0, t1]``, aggregated over every series the selector matches (replicas, engines):

* gauges: one ``query_range`` of ``sum(family{sel})`` (``avg`` for ``_ratio`` quantities, as
  direct scraping averages ratios over replicas) from ``t0`` to ``t1``, then the same
  time-weighted mean/max/p95 as direct scraping (:func:`~tokenload.servermetrics.window.gauge_summary`);
* counters: an instant query at ``t1`` of ``sum(increase(family_total{sel}[W]))``, W = t1 - t0
  (Prometheus handles resets and extrapolates to the window's edges, so the increase is not an
  integer: direct scraping counts between the first and the last scrape inside the window);
* histograms: instant queries at ``t1`` of ``sum by (le) (increase(family_bucket{sel}[W]))`` and
  of ``_sum``; count, mean and quantiles are then computed from them, by the same interpolation as
  Prometheus' ``histogram_quantile`` (one query for every quantile).

A quantity has one family per server generation (vLLM V1, V0, SGLang): the alternatives are
joined so that the first one with data wins (``a or b`` for label-less aggregates,
``a or (b unless on() a)`` for ``by (le)``). A quantity nothing matched is absent, as it is when
a scraped server does not export it. Asked with ``by`` (the replica label), each replica's
figures come back apart, and the fleet's are theirs added up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from tokenload.servermetrics.vocabulary import CANONICAL, FAMILY_INDEX, Quantity

__all__ = [
    "MAX_RANGE_POINTS",
    "PromQLError",
    "PromQuery",
    "check_prometheus_url",
    "freshness_query",
    "gauge_step_s",
    "live_queries",
    "parse_selector",
    "series_queries",
    "window_queries",
]

#: Prometheus refuses a query_range of more than 11,000 points per series.
MAX_RANGE_POINTS = 10_000

Part = Literal["gauge", "counter", "buckets", "sum"]


class PromQLError(ValueError):
    """A Prometheus URL or selector that cannot be used; the message names the option."""


# -- options ------------------------------------------------------------------------------------

_LABEL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_STRING = r'"(?:[^"\\\n]|\\.)*"' + r"|'(?:[^'\\\n]|\\.)*'" + r"|`[^`]*`"
_MATCHER = re.compile(rf"\s*({_LABEL_NAME})\s*(=~|!~|!=|=)\s*({_STRING})\s*(?:,|$)")


def parse_selector(text: str, option: str = "--prometheus-selector") -> tuple[str, ...]:
    """``{namespace="x",job="vllm"}`` (braces optional) -> the label matchers, normalised
    (``namespace="x"``); empty text -> no matcher. Anything else is an error naming ``option``."""
    body = text.strip()
    if body.startswith("{") or body.endswith("}"):
        if not (body.startswith("{") and body.endswith("}")):
            raise PromQLError(f"{option}: unbalanced braces in {text!r}")
        body = body[1:-1].strip()
    matchers: list[str] = []
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None or m.end() == pos:
            raise PromQLError(
                f'{option}: expected label matchers like {{namespace="x",job="vllm"}}, '
                f"got {text!r} (stuck at {body[pos : pos + 20]!r})"
            )
        name, op, value = m.group(1), m.group(2), m.group(3)
        if name == "__name__":
            raise PromQLError(
                f"{option}: the metric name is chosen by tokenload; drop __name__ from {text!r}"
            )
        matchers.append(f"{name}{op}{value}")
        pos = m.end()
    return tuple(matchers)


def check_prometheus_url(text: str, option: str = "--prometheus-url") -> str:
    """An http(s) base URL of a Prometheus server (a path prefix is kept) without credentials,
    query or fragment; returned without a trailing slash."""
    raw = text.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PromQLError(
            f"{option}: expected an http:// or https:// URL like http://prometheus:9090, got {raw!r}"
        )
    if parts.username is not None or parts.password is not None:
        # Options are shown in the web UI and saved in run.json: no secret may be one.
        raise PromQLError(f"{option}: credentials in the URL are not accepted, got {_no_userinfo(parts)!r}")
    if parts.query or parts.fragment:
        raise PromQLError(f"{option}: expected a base URL without ?query or #fragment, got {raw!r}")
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError:
        raise PromQLError(f"{option}: bad port in {raw!r}") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _no_userinfo(parts: Any) -> str:
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


# -- queries ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromQuery:
    """One PromQL query of a window: ``range`` ones go to ``/api/v1/query_range`` over the
    window, the others to ``/api/v1/query`` at the window's end."""

    quantity: str
    part: Part
    expr: str
    range: bool = False


def _alternatives(q: Quantity) -> list[tuple[str, dict[str, str]]]:
    """(family, required labels) of a quantity in the vocabulary's order: V1, V0, SGLang, aliases."""
    out: list[tuple[str, dict[str, str]]] = []
    for family, entries in FAMILY_INDEX.items():
        for quantity, labels in entries:
            if quantity.name == q.name and (family, labels) not in out:
                out.append((family, labels))
    return out


def _series(name: str, selector: tuple[str, ...], labels: Mapping[str, str]) -> str:
    matchers = [*selector, *(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))]
    return f"{name}{{{','.join(matchers)}}}" if matchers else name


def _first_of(exprs: list[str], grouped: bool, by: str = "") -> str:
    """The first expression with data (per replica with ``by``). Aggregates with no label but
    ``by``'s need only ``or`` (it matches on every label: one replica's first generation wins);
    ``by (le)`` vectors are guarded so that two generations' buckets never mix (within a replica
    with ``by``: ``unless on(by)``)."""
    if not grouped:
        return " or ".join(exprs)
    out = exprs[0]
    for i, expr in enumerate(exprs[1:], start=1):
        guarded = expr
        for prev in exprs[:i]:
            guarded = f"({guarded} unless on({by}) {prev})"
        out = f"{out} or {guarded}"
    return out


def _aggregated(q: Quantity, selector: tuple[str, ...], grp: str, suffix: str = "") -> str:
    """A quantity's series aggregated (``grp``: `` by (label)`` or nothing), its first generation
    with data: ratios averaged, as direct scraping averages them over replicas; the rest summed."""
    agg = "avg" if q.name.endswith("_ratio") else "sum"
    return _first_of(
        [f"{agg}{grp}({_series(f + suffix, selector, lab)})" for f, lab in _alternatives(q)], False
    )


def _duration(seconds: float) -> str:
    # Prometheus 2.x durations are integers with a unit: whole milliseconds.
    return f"{max(1, round(seconds * 1000))}ms"


def window_queries(selector: tuple[str, ...], t0: float, t1: float, by: str = "") -> list[PromQuery]:
    """Every query that :func:`summarize_answers` needs for the window ``[t0, t1]``: aggregated
    over every matched series, or with ``by`` (a label such as ``instance``) one result per value
    of that label (each replica's own figures, :func:`summarize_by`)."""
    w = _duration(t1 - t0)
    grp = f" by ({by})" if by else ""
    le = f" by (le, {by})" if by else " by (le)"
    out: list[PromQuery] = []
    for q in CANONICAL.values():
        alts = _alternatives(q)
        if not alts:
            continue
        if q.kind == "gauge":
            out.append(PromQuery(q.name, "gauge", _aggregated(q, selector, grp), range=True))
        elif q.kind == "counter":
            exprs = [f"sum{grp}(increase({_series(f + '_total', selector, lab)}[{w}]))" for f, lab in alts]
            out.append(PromQuery(q.name, "counter", _first_of(exprs, False)))
        else:
            buckets = [f"sum{le} (increase({_series(f + '_bucket', selector, lab)}[{w}]))" for f, lab in alts]
            sums = [f"sum{grp}(increase({_series(f + '_sum', selector, lab)}[{w}]))" for f, lab in alts]
            out.append(PromQuery(q.name, "buckets", _first_of(buckets, True, by)))
            out.append(PromQuery(q.name, "sum", _first_of(sums, False)))
    return out


#: The live page's rates: ``irate`` over the last two samples within this range, whatever the
#: scrape interval (Prometheus' default is 1 m; 15-30 s is usual for vLLM's pods).
LIVE_RATE_RANGE = "2m"


def live_queries(selector: tuple[str, ...], by: str, since_s: float) -> dict[str, str]:
    """The live page's server figures now (tokenload.web.live's server series), as instant
    queries: the fleet's gauges (ratios averaged), each replica's KV usage (by ``by``, for the
    fullest), counter rates by ``irate`` and the preemptions of the last ``since_s`` seconds."""

    def first(name: str, fmt: str, suffix: str = "") -> str:
        return _first_of(
            [fmt.format(_series(f + suffix, selector, lab)) for f, lab in _alternatives(CANONICAL[name])],
            False,
        )

    out = {
        "kv_cache_usage_ratio": first("kv_cache_usage_ratio", "avg({})"),
        "requests_running": first("requests_running", "sum({})"),
        "requests_waiting": first("requests_waiting", "sum({})"),
        "generation_tokens_per_s": first(
            "generation_tokens", f"sum(irate({{}}[{LIVE_RATE_RANGE}]))", "_total"
        ),
        "preemptions_per_s": first("preemptions", f"sum(irate({{}}[{LIVE_RATE_RANGE}]))", "_total"),
        "preemptions_increase": first("preemptions", f"sum(increase({{}}[{_duration(since_s)}]))", "_total"),
    }
    if by:
        out["kv_by_replica"] = first("kv_cache_usage_ratio", f"avg by ({by})({{}})")
    return out


def series_queries(selector: tuple[str, ...], by: str = "") -> list[PromQuery]:
    """The run's server time series (the report's charts, ``server_metrics.jsonl`` of a
    ``--prometheus-url`` run): one ``query_range`` per canonical gauge and counter, per value of
    ``by`` (each replica's own series), counters as their raw cumulative values (what a scrape
    reads). Histograms are left out: their buckets are a query each."""
    grp = f" by ({by})" if by else ""
    out: list[PromQuery] = []
    for q in CANONICAL.values():
        if q.kind == "histogram" or not _alternatives(q):
            continue
        part: Part = "counter" if q.kind == "counter" else "gauge"
        suffix = "_total" if q.kind == "counter" else ""
        out.append(PromQuery(q.name, part, _aggregated(q, selector, grp, suffix), range=True))
    return out


def gauge_step_s(t0: float, t1: float, resolution_s: float) -> float:
    """The query_range step: ``resolution_s``, coarser when the window would exceed the point limit."""
    return max(resolution_s, (t1 - t0) / MAX_RANGE_POINTS, 0.001)


def freshness_query(selector: tuple[str, ...], by: str = "") -> str:
    """The time of the newest sample of the servers' running-requests gauge (with ``by``, of
    the replica whose newest is oldest): a window is only queried once Prometheus has ingested a
    scrape at or after its end (every replica's; a replica that is down has no fresh series)."""
    alts = _alternatives(CANONICAL["requests_running"])
    if by:
        per = _first_of([f"max by ({by}) (timestamp({_series(f, selector, lab)}))" for f, lab in alts], False)
        return f"min({per})"
    return _first_of([f"max(timestamp({_series(f, selector, lab)}))" for f, lab in alts], False)

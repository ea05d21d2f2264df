"""PromQL for the canonical server quantities over a time window, and Prometheus' JSON answers
mapped onto the dict :func:`tokenload.servermetrics.summary.summarize_window` returns. Pure.

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
  of ``_sum``; count, mean and quantiles are then computed here, by the same interpolation as
  Prometheus' ``histogram_quantile`` (one query for every quantile).

A quantity has one family per server generation (vLLM V1, V0, SGLang): the alternatives are
joined so that the first one with data wins (``a or b`` for label-less aggregates,
``a or (b unless on() a)`` for ``by (le)``). A quantity nothing matched is absent, as it is when
a scraped server does not export it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from tokenload.servermetrics.parse import HistogramState
from tokenload.servermetrics.vocabulary import CANONICAL, FAMILY_INDEX, Quantity
from tokenload.servermetrics.window import gauge_summary, histogram_summary

__all__ = [
    "FLEET_TARGET",
    "MAX_RANGE_POINTS",
    "PromQLError",
    "PromQuery",
    "check_prometheus_url",
    "fleet_answer",
    "freshness_query",
    "gauge_step_s",
    "live_queries",
    "live_row",
    "parse_selector",
    "series_points",
    "series_queries",
    "summarize_answers",
    "summarize_by",
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
            agg = "avg" if q.name.endswith("_ratio") else "sum"
            exprs = [f"{agg}{grp}({_series(f, selector, lab)})" for f, lab in alts]
            out.append(PromQuery(q.name, "gauge", _first_of(exprs, False), range=True))
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


def live_row(answers: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Any]:
    """The answers to :func:`live_queries` (``data`` objects, None for a failed query) as one
    row of the live server series: ``ok`` when any query found a series (a selector that
    matches nothing is a gap, as a failed scrape is)."""
    row: dict[str, Any] = {"ok": any(a is not None and a.get("result") for a in answers.values())}
    for key, data in answers.items():
        if key != "kv_by_replica":
            row[key] = _scalar(data)
    per = answers.get("kv_by_replica")
    values = [v for x in (per or {}).get("result") or () if (v := _number(x["value"][1])) is not None]
    row["kv_cache_usage_ratio_fullest"] = max(values) if len(values) >= 2 else None
    return row


#: Where a series of :func:`series_queries` lacks the replica label (or none is given), it is
#: the fleet's, under this target name.
FLEET_TARGET = "prometheus"


def series_queries(selector: tuple[str, ...], by: str = "") -> list[PromQuery]:
    """The run's server time series (the report's charts, ``server_metrics.jsonl`` of a
    ``--prometheus-url`` run): one ``query_range`` per canonical gauge and counter, per value of
    ``by`` (each replica's own series), counters as their raw cumulative values (what a scrape
    reads). Histograms are left out: their buckets are a query each."""
    grp = f" by ({by})" if by else ""
    out: list[PromQuery] = []
    for q in CANONICAL.values():
        alts = _alternatives(q)
        if not alts or q.kind == "histogram":
            continue
        agg = "avg" if q.name.endswith("_ratio") else "sum"
        suffix = "_total" if q.kind == "counter" else ""
        exprs = [f"{agg}{grp}({_series(f + suffix, selector, lab)})" for f, lab in alts]
        part: Part = "counter" if q.kind == "counter" else "gauge"
        out.append(PromQuery(q.name, part, _first_of(exprs, False), range=True))
    return out


def series_points(
    queries: list[PromQuery], answers: list[Mapping[str, Any] | None], by: str = ""
) -> list[dict[str, Any]]:
    """The answers to :func:`series_queries` as ``server_metrics.jsonl`` lines, one per sample
    time and replica (target ``by=value``, or :data:`FLEET_TARGET`): ``{"t", "target", "ok",
    "source": "prometheus", "scalars"}``, in time order."""
    rows: dict[tuple[float, str], dict[str, float]] = {}
    for q, data in zip(queries, answers, strict=True):
        if not data or data.get("resultType") != "matrix":
            continue
        for item in data.get("result") or ():
            if not isinstance(item, dict):
                continue
            value = item.get("metric", {}).get(by) if by else None
            target = f"{by}={value}" if isinstance(value, str) else FLEET_TARGET
            for t, v in item.get("values") or ():
                x = _number(v)
                if x is not None and not math.isinf(x):
                    rows.setdefault((float(t), target), {})[q.quantity] = x
    return [
        {"t": t, "target": target, "ok": True, "source": "prometheus", "scalars": scalars}
        for (t, target), scalars in sorted(rows.items())
    ]


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


# -- answers ------------------------------------------------------------------------------------


def _number(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _scalar(data: Mapping[str, Any] | None) -> float | None:
    """The value of a one-element instant vector (an aggregate); None when empty."""
    if not data or data.get("resultType") != "vector" or not data.get("result"):
        return None
    return _number(data["result"][0]["value"][1])


def _matrix_points(data: Mapping[str, Any] | None) -> list[tuple[float, float]]:
    if not data or data.get("resultType") != "matrix" or not data.get("result"):
        return []
    pts = []
    for t, v in data["result"][0]["values"]:
        value = _number(v)
        if value is not None and not math.isinf(value):
            pts.append((float(t), value))
    return sorted(pts)


def _buckets(data: Mapping[str, Any] | None) -> list[tuple[float, float]] | None:
    """Cumulative (le, count) ascending, made monotonic as histogram_quantile does (each bucket's
    increase is extrapolated on its own, so neighbours can disagree by a little)."""
    if not data or data.get("resultType") != "vector" or not data.get("result"):
        return None
    raw = []
    for item in data["result"]:
        le, v = _number(item.get("metric", {}).get("le")), _number(item["value"][1])
        if le is not None and v is not None:
            raw.append((le, v))
    raw.sort()
    if not raw or not math.isinf(raw[-1][0]):
        return None  # without the +Inf bucket there is no count
    out, top = [], 0.0
    for le, v in raw:
        top = max(top, v)
        out.append((le, top))
    return out


def summarize_answers(
    queries: list[PromQuery], answers: list[Mapping[str, Any] | None], t0: float, t1: float
) -> dict[str, Any]:
    """The ``data`` objects of Prometheus' answers (None for a failed query), one per query of
    :func:`window_queries`, as per-quantity figures: gauges {mean,max,p95}, counters
    {increase,rate_per_s}, histograms {count,mean,p50..p99} (ms for the ``_s`` ones)."""
    by: dict[tuple[str, str], Mapping[str, Any] | None] = {
        (q.quantity, q.part): a for q, a in zip(queries, answers, strict=True)
    }
    span = max(t1 - t0, 1e-9)
    out: dict[str, Any] = {}
    for q in CANONICAL.values():
        if q.kind == "gauge":
            s = gauge_summary(_matrix_points(by.get((q.name, "gauge"))), t_end=t1)
            if s is not None:
                out[q.name] = s
        elif q.kind == "counter":
            inc = _scalar(by.get((q.name, "counter")))
            if inc is not None:
                out[q.name] = {"increase": inc, "rate_per_s": inc / span}
        else:
            buckets = _buckets(by.get((q.name, "buckets")))
            if buckets is None:
                continue
            total = _scalar(by.get((q.name, "sum")))
            h = HistogramState(buckets, total if total is not None else math.nan, buckets[-1][1])
            scale = 1000.0 if q.name.endswith("_s") else 1.0
            key = q.name[:-2] + "_ms" if q.name.endswith("_s") else q.name
            summary = histogram_summary(h, scale)
            if total is None or summary["mean"] is None or math.isnan(summary["mean"]):
                summary["mean"] = None
            out[key] = summary
    return out


def summarize_by(
    queries: list[PromQuery], answers: list[Mapping[str, Any] | None], t0: float, t1: float, by: str
) -> dict[str, dict[str, Any]]:
    """The answers to :func:`window_queries` with ``by`` as each value of that label's own
    figures (as :func:`summarize_answers` gives them), keyed ``label=value``; series without
    the label are left out."""
    values: set[str] = set()
    for data in answers:
        for item in (data or {}).get("result") or ():
            value = item.get("metric", {}).get(by) if isinstance(item, dict) else None
            if isinstance(value, str):
                values.add(value)
    out = {}
    for value in sorted(values):
        own = [_only(data, by, value) for data in answers]
        figures = summarize_answers(queries, own, t0, t1)
        if figures:
            out[f"{by}={value}"] = figures
    return out


def fleet_answer(query: PromQuery, data: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """An answer to a query of :func:`window_queries` with ``by`` as the fleet's (the answer
    without ``by``): every replica's series added up (``_ratio`` gauges averaged over the
    replicas that have a sample at that time), per ``le`` for buckets. A replica's figures and
    the fleet's then come from one set of queries; series without the label count too."""
    if not data or not isinstance(data.get("result"), list):
        return data
    items = [x for x in data["result"] if isinstance(x, dict)]
    if data.get("resultType") == "matrix":
        acc: dict[float, list[float]] = {}
        for item in items:
            for t, v in item.get("values") or ():
                x = _number(v)
                if x is not None:
                    acc.setdefault(float(t), []).append(x)
        mean = query.quantity.endswith("_ratio")
        values = [[t, repr(sum(xs) / len(xs) if mean else sum(xs))] for t, xs in sorted(acc.items())]
        return {"resultType": "matrix", "result": [{"metric": {}, "values": values}] if values else []}
    if data.get("resultType") != "vector":
        return data
    sums: dict[str | None, float] = {}
    for item in items:
        x = _number(item["value"][1]) if len(item.get("value") or ()) == 2 else None
        if x is not None:
            le = item.get("metric", {}).get("le") if query.part == "buckets" else None
            sums[le] = sums.get(le, 0.0) + x
    result = [
        {"metric": {"le": le} if le is not None else {}, "value": [0, repr(v)]} for le, v in sums.items()
    ]
    return {"resultType": "vector", "result": result}


def _only(data: Mapping[str, Any] | None, by: str, value: str) -> Mapping[str, Any] | None:
    """An answer's ``data`` with only the series whose label ``by`` is ``value``."""
    if not data or not isinstance(data.get("result"), list):
        return data
    kept = [x for x in data["result"] if isinstance(x, dict) and x.get("metric", {}).get(by) == value]
    return {**data, "result": kept}

"""Prometheus' JSON answers to :mod:`tokenload.servermetrics.promql`'s queries, mapped onto the
dict :func:`tokenload.servermetrics.summary.summarize_window` returns (a step's figures, the
fleet's and each replica's), onto the live page's server row, and onto ``server_metrics.jsonl``
lines (the report's series). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tokenload.servermetrics.parse import HistogramState
from tokenload.servermetrics.promql import PromQuery
from tokenload.servermetrics.vocabulary import CANONICAL
from tokenload.servermetrics.window import gauge_summary, histogram_summary

__all__ = [
    "FLEET_TARGET",
    "fleet_answers",
    "live_row",
    "series_points",
    "summarize_answers",
    "summarize_by",
]


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


def fleet_answers(
    queries: list[PromQuery], answers: list[Mapping[str, Any] | None], by: str
) -> list[Mapping[str, Any] | None]:
    """The answers to :func:`window_queries` with ``by`` as the fleet's (the answers without
    ``by``): every replica's series added up (``_ratio`` gauges averaged over the replicas that
    have a sample at that time), per ``le`` for buckets, series without the label included. A
    replica's figures and the fleet's then come from one set of queries. Replicas whose
    histogram has other bucket bounds than most replicas' (two server generations, a rolling
    upgrade) cannot be added up exactly: that histogram's buckets and sum keep only the replicas
    with the commonest bounds, as direct scraping keeps one layout."""
    out = [_added_up(q, a) for q, a in zip(queries, answers, strict=True)]
    for i, q in enumerate(queries):
        if q.part != "buckets":
            continue
        layouts: dict[Any, set[str]] = {}
        for item in (answers[i] or {}).get("result") or ():
            if isinstance(item, dict):
                metric = item.get("metric", {})
                layouts.setdefault(metric.get(by), set()).add(str(metric.get("le")))
        shapes = [frozenset(v) for v in layouts.values()]
        if len(set(shapes)) <= 1:
            continue
        commonest = max(set(shapes), key=lambda b: (shapes.count(b), sorted(b)))
        keep = {value for value, bounds in layouts.items() if frozenset(bounds) == commonest}
        for j, other in enumerate(queries):
            if other.quantity == q.quantity and other.part in ("buckets", "sum"):
                out[j] = _added_up(other, _only_values(answers[j], by, keep))
    return out


def _added_up(query: PromQuery, data: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """One answer's series added up (see :func:`fleet_answers`)."""
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


def _only_values(data: Mapping[str, Any] | None, by: str, values: set[Any]) -> Mapping[str, Any] | None:
    """An answer's ``data`` with only the series whose label ``by`` is one of ``values``."""
    if not data or not isinstance(data.get("result"), list):
        return data
    kept = [x for x in data["result"] if isinstance(x, dict) and x.get("metric", {}).get(by) in values]
    return {**data, "result": kept}


def _only(data: Mapping[str, Any] | None, by: str, value: str) -> Mapping[str, Any] | None:
    """An answer's ``data`` with only the series whose label ``by`` is ``value``."""
    if not data or not isinstance(data.get("result"), list):
        return data
    kept = [x for x in data["result"] if isinstance(x, dict) and x.get("metric", {}).get(by) == value]
    return {**data, "result": kept}


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

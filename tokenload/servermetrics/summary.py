"""Server-side summary of a time window, from scrape points of one or many replicas. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from tokenload.servermetrics.parse import HistogramState
from tokenload.servermetrics.vocabulary import CANONICAL
from tokenload.servermetrics.window import counter_increase, gauge_summary, histogram_delta, histogram_summary

__all__ = ["summarize_window", "tick_series"]


class _Point(Protocol):
    t: float
    target: str
    ok: bool
    scalars: dict[str, float]
    histograms: dict[str, HistogramState]


def tick_series(
    points: Iterable[_Point],
    quantity: str,
    t0: float = float("-inf"),
    t1: float = float("inf"),
    target: str | None = None,
) -> list[tuple[float, float]]:
    """One value per scrape tick: ratios averaged over replicas, everything else summed. Targets
    scraped in one tick start within milliseconds; two scrapes of one target in the same tenth
    of a second (the extra scrape at a step's end) count once, the later one."""
    acc: dict[float, dict[str, float]] = {}
    for p in points:
        if p.ok and t0 <= p.t <= t1 and (target is None or p.target == target) and quantity in p.scalars:
            acc.setdefault(round(p.t, 1), {})[p.target] = p.scalars[quantity]
    mean = quantity.endswith("_ratio")
    return sorted((t, sum(v.values()) / len(v) if mean else sum(v.values())) for t, v in acc.items())


def _merge(hists: list[HistogramState]) -> HistogramState | None:
    if not hists:
        return None
    bounds = [b for b, _ in hists[0].buckets]
    if any([b for b, _ in h.buckets] != bounds for h in hists):
        return hists[0]  # replicas with different buckets cannot be merged exactly; keep one
    buckets = [(b, sum(h.buckets[i][1] for h in hists)) for i, b in enumerate(bounds)]
    return HistogramState(buckets, sum(h.sum for h in hists), sum(h.count for h in hists))


def summarize_window(points: list[_Point], t0: float, t1: float) -> dict[str, Any]:
    """Per canonical quantity: gauges {mean,max,p95}, counters {increase,rate_per_s}, histograms
    {count,mean,p50..p99} in ms for the ``_s`` ones. Quantities the server did not export are absent."""
    inside = [p for p in points if t0 <= p.t <= t1]
    out: dict[str, Any] = {"scrapes": len(inside), "failed_scrapes": sum(not p.ok for p in inside)}
    span = max(t1 - t0, 1e-9)
    for q in CANONICAL.values():
        if q.kind == "gauge":
            s = gauge_summary(tick_series(inside, q.name), t_end=t1)
            if s is not None:
                out[q.name] = s
        elif q.kind == "counter":
            per_target = []
            for target in {p.target for p in inside}:
                inc = counter_increase(tick_series(inside, q.name, target=target))
                if inc is not None:
                    per_target.append(inc)
            if per_target:
                out[q.name] = {"increase": sum(per_target), "rate_per_s": sum(per_target) / span}
        else:
            deltas = []
            for target in {p.target for p in inside}:
                own = [p for p in inside if p.target == target and p.ok and q.name in p.histograms]
                if len(own) >= 2:
                    deltas.append(histogram_delta(own[0].histograms[q.name], own[-1].histograms[q.name]))
            merged = _merge(deltas)
            if merged is not None:
                scale = 1000.0 if q.name.endswith("_s") else 1.0
                key = q.name[:-2] + "_ms" if q.name.endswith("_s") else q.name
                out[key] = histogram_summary(merged, scale)
    return out

"""Window maths over scraped series. Pure.

* counters -> increase and rate, with resets (a server restart) handled as Prometheus'
  ``increase()`` does: a drop means the counter restarted from zero;
* gauges -> time-weighted mean, max and p95 (each sample holds until the next one);
* histograms -> bucket deltas over the window -> count, mean and quantiles interpolated linearly
  within the bucket, as Prometheus' ``histogram_quantile`` does, and at most ``mean / (1 - q)``
  (Markov's inequality: a wide bucket's interpolation cannot contradict the mean).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tokenload.servermetrics.parse import HistogramState

__all__ = ["counter_increase", "gauge_summary", "histogram_delta", "histogram_quantile", "histogram_summary"]


def counter_increase(points: Sequence[tuple[float, float]]) -> float | None:
    """Increase over ``(t, value)`` points in time order; None with fewer than two."""
    if len(points) < 2:
        return None
    total = 0.0
    prev = points[0][1]
    for _, v in points[1:]:
        total += v - prev if v >= prev else v
        prev = v
    return total


def gauge_summary(
    points: Sequence[tuple[float, float]], t_end: float | None = None
) -> dict[str, float] | None:
    """Time-weighted mean, max and p95 of a step function sampled at ``points``."""
    if not points:
        return None
    end = t_end if t_end is not None else points[-1][0]
    weighted: list[tuple[float, float]] = []
    for i, (t, v) in enumerate(points):
        nxt = points[i + 1][0] if i + 1 < len(points) else end
        weighted.append((v, max(nxt - t, 0.0)))
    total_w = sum(w for _, w in weighted)
    if total_w <= 0:
        vals = [v for _, v in points]
        return {"mean": sum(vals) / len(vals), "max": max(vals), "p95": max(vals)}
    mean = sum(v * w for v, w in weighted) / total_w
    acc = 0.0
    p95 = weighted[-1][0]
    for v, w in sorted(weighted):
        acc += w
        if acc >= 0.95 * total_w:
            p95 = v
            break
    return {"mean": mean, "max": max(v for _, v in points), "p95": p95}


def histogram_delta(first: HistogramState, last: HistogramState) -> HistogramState:
    """What was observed between two scrapes; after a reset, everything since the reset."""
    if last.count < first.count or [b for b, _ in first.buckets] != [b for b, _ in last.buckets]:
        return last
    buckets = [(le, c1 - c0) for (le, c1), (_, c0) in zip(last.buckets, first.buckets, strict=True)]
    return HistogramState(buckets, last.sum - first.sum, last.count - first.count)


def histogram_quantile(q: float, h: HistogramState) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets."""
    if not h.buckets or h.count <= 0:
        return None
    total = h.buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in h.buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le  # in the +Inf bucket: the highest finite bound, as Prometheus does
            if c == prev_c:
                return le
            lower = prev_le if prev_le < le else 0.0
            return lower + (le - lower) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return prev_le


def histogram_summary(h: HistogramState, scale: float = 1.0) -> dict[str, float | None]:
    """count, mean and p50/p90/p95/p99, values multiplied by ``scale`` (1000 for seconds -> ms).

    A quantile interpolated within a wide bucket can contradict the mean the same histogram
    gives (every queue time 0 s, all in vLLM's first bucket of 0-0.3 s: p50 0.15 s, mean 0). Every
    vLLM histogram holds values >= 0, so Markov's inequality bounds the q-quantile by
    ``mean / (1 - q)`` (P(X >= x) <= mean / x): each quantile is the smaller of the two."""
    mean = (h.sum / h.count) if h.count else None
    out: dict[str, float | None] = {"count": h.count, "mean": None if mean is None else mean * scale}
    for q, key in ((0.5, "p50"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99")):
        v = histogram_quantile(q, h)
        if v is not None and mean is not None and mean >= 0:
            v = min(v, mean / (1.0 - q))
        out[key] = None if v is None else v * scale
    return out

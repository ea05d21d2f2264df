"""Server-side summary of a time window, from scrape points of one or many replicas. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from tokenload.servermetrics.parse import HistogramState
from tokenload.servermetrics.vocabulary import CANONICAL
from tokenload.servermetrics.window import counter_increase, gauge_summary, histogram_delta, histogram_summary

__all__ = ["END_SCRAPE_GRACE_S", "summarize_window", "tick_series"]


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


def _tick_times(points: Iterable[_Point], quantity: str, target: str) -> list[float]:
    """The scrape times behind :func:`tick_series`' values for one target (its keys are rounded
    to the tenth of a second; of two scrapes in one tenth, the later)."""
    last: dict[float, float] = {}
    for p in points:
        if p.ok and p.target == target and quantity in p.scalars:
            k = round(p.t, 1)
            last[k] = max(last.get(k, p.t), p.t)
    return list(last.values())


def _merge(hists: list[HistogramState]) -> HistogramState | None:
    if not hists:
        return None
    bounds = [b for b, _ in hists[0].buckets]
    if any([b for b, _ in h.buckets] != bounds for h in hists):
        return hists[0]  # replicas with different buckets cannot be merged exactly; keep one
    buckets = [(b, sum(h.buckets[i][1] for h in hists)) for i, b in enumerate(bounds)]
    return HistogramState(buckets, sum(h.sum for h in hists), sum(h.count for h in hists))


#: A scrape dated this little after a window's end is the one taken as the window closed (the
#: master scrapes when a step ends; the scrape is dated when its request goes out, a fraction of a
#: millisecond later): it belongs to the window, or its last second would go uncounted. Well
#: under any scrape interval, so no regular tick of the next second is taken.
END_SCRAPE_GRACE_S = 0.1


def summarize_window(points: list[_Point], t0: float, t1: float) -> dict[str, Any]:
    """Per canonical quantity: gauges {mean,max,p95}, counters {increase,rate_per_s}, histograms
    {count,mean,p50..p99} in ms for the ``_s`` ones. Quantities the server did not export are absent."""
    inside = [p for p in points if t0 <= p.t <= t1 + END_SCRAPE_GRACE_S]
    out: dict[str, Any] = {"scrapes": len(inside), "failed_scrapes": sum(not p.ok for p in inside)}
    ok_t = [p.t for p in inside if p.ok]
    if len(ok_t) >= 2:
        # The seconds the window's scrapes cover: what its counters' increases and histograms'
        # counts are over (a scrape lands up to one interval after the window opens).
        out["scraped_s"] = max(ok_t) - min(ok_t)
    span = max(t1 - t0, 1e-9)
    for q in CANONICAL.values():
        if q.kind == "gauge":
            s = gauge_summary(tick_series(inside, q.name), t_end=t1)
            if s is not None:
                out[q.name] = s
        elif q.kind == "counter":
            # A counter's increase between the first and last scrape inside the window, and its
            # rate over the seconds those scrapes cover (not the window's: a window whose first
            # scrape came a tick after it began would read a tick's share low).
            incs, rates = [], []
            for target in {p.target for p in inside}:
                inc = counter_increase(tick_series(inside, q.name, target=target))
                if inc is not None:
                    incs.append(inc)
                    ts = _tick_times(inside, q.name, target)
                    covered = max(ts) - min(ts)
                    rates.append(inc / covered if covered > 0 else inc / span)
            if incs:
                out[q.name] = {"increase": sum(incs), "rate_per_s": sum(rates)}
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

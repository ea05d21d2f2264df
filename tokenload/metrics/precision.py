"""A step's precision target (``--target-moe ttft_p95=0.05``): how far a figure's 95 % interval
reaches from it, relative to it, and whether every target is met. Pure.

The margin of error of a figure ``v`` with interval ``[lo, hi]`` is ``max(hi - v, v - lo) / v``
(the wider side: percentile intervals are not symmetric); a side the data cannot bound yet (too
few requests) leaves the target unmet.
"""

from __future__ import annotations

import math

from tokenload.metrics.histogram import LogHistogram
from tokenload.metrics.intervals import mean_interval, quantile_interval

__all__ = ["MOE_FORM", "MoeError", "margin_of_error", "parse_target_moe", "targets_met"]

_METRICS = ("ttft", "tpot", "itl", "e2e")
_STATS = ("mean", "p50", "p90", "p95", "p99")
MOE_FORM = (
    f"expected NAME=SHARE with NAME as METRIC_STAT, METRIC one of {', '.join(_METRICS)} and STAT one "
    f"of {', '.join(_STATS)}, SHARE in (0, 1) (e.g. ttft_p95=0.05)"
)


class MoeError(ValueError):
    """A bad --target-moe; the message names the option and the item."""


def parse_target_moe(text: str, option: str = "--target-moe") -> dict[str, float]:
    """``ttft_p95=0.05,tpot_p50=0.02`` -> ``{"ttft_p95": 0.05, "tpot_p50": 0.02}`` ('' -> {})."""
    out: dict[str, float] = {}
    for raw in str(text).split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        metric, _, stat = name.partition("_")
        if not sep or metric not in _METRICS or stat not in _STATS:
            raise MoeError(f"{option}: {item!r}: {MOE_FORM}")
        try:
            share = float(value)
        except ValueError:
            raise MoeError(f"{option}: {item!r}: {value.strip()!r} is not a share") from None
        if not (math.isfinite(share) and 0 < share < 1):
            raise MoeError(f"{option}: {item!r}: {MOE_FORM}")
        if name in out:
            raise MoeError(f"{option}: {item!r}: {name} is given twice")
        out[name] = share
    return out


def margin_of_error(h: LogHistogram, stat: str) -> float | None:
    """The relative margin of error of ``stat`` (mean or pQ) of the values in ``h``; None while a
    side of its interval cannot be bounded or the figure is 0."""
    if not h.count:
        return None
    if stat == "mean":
        value, interval = h.mean, mean_interval(h)
    else:
        value, interval = h.quantile(int(stat[1:]) / 100.0), quantile_interval(h, int(stat[1:]) / 100.0)
    if not value or interval is None or None in interval:
        return None
    lo, hi = interval
    return max(hi - value, value - lo) / value  # type: ignore[operator]


def targets_met(
    hists: dict[str, LogHistogram], targets: dict[str, float]
) -> tuple[bool, dict[str, float | None]]:
    """Whether every target is met by the histograms (``{"ttft_ms": ...}``), and each margin."""
    margins = {
        name: margin_of_error(hists[f"{name.split('_')[0]}_ms"], name.split("_")[1]) for name in targets
    }
    met = bool(targets) and all(m is not None and m <= targets[name] for name, m in margins.items())
    return met, margins

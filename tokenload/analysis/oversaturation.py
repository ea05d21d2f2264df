"""Over-saturation: the server's waiting queue grew through a step instead of settling. Pure.

Below capacity a queue settles at some level, whatever the load; above it (open-loop arrivals
faster than the server completes them) it grows without bound, and every later request waits
longer than the one before. The test is the least-squares trend of ``requests_waiting`` over
the step's measured window: growth (slope x window) above ``min_growth`` requests, and the queue
at the end over twice the one at the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["waiting_trend"]


def waiting_trend(series: Sequence[tuple[float, float]], min_growth: float = 4.0) -> dict[str, Any] | None:
    """``{"growth", "per_s", "first", "last", "oversaturated"}`` over ``(t, waiting)`` samples;
    None with fewer than four samples."""
    if len(series) < 4:
        return None
    n = len(series)
    t_mean = sum(t for t, _ in series) / n
    v_mean = sum(v for _, v in series) / n
    var = sum((t - t_mean) ** 2 for t, _ in series)
    if var <= 0:
        return None
    slope = sum((t - t_mean) * (v - v_mean) for t, v in series) / var
    span = series[-1][0] - series[0][0]
    growth = slope * span
    # The ends as the mean of the first and last quarter: one scrape is too noisy.
    q = max(1, n // 4)
    first = sum(v for _, v in series[:q]) / q
    last = sum(v for _, v in series[-q:]) / q
    return {
        "growth": round(growth, 2),
        "per_s": round(slope, 3),
        "first": round(first, 2),
        "last": round(last, 2),
        "oversaturated": growth > min_growth and last > 2 * first + 1,
    }

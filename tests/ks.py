"""The two-sample Kolmogorov-Smirnov test, for checking that measured inter-arrival times follow
the requested distribution (against a large sample drawn from it)."""

from __future__ import annotations

import bisect
import math

__all__ = ["ks_critical", "ks_statistic"]


def ks_statistic(a: list[float], b: list[float]) -> float:
    """sup |F_a(x) - F_b(x)| over the pooled sample points."""
    a, b = sorted(a), sorted(b)
    d = 0.0
    for x in a + b:
        fa = bisect.bisect_right(a, x) / len(a)
        fb = bisect.bisect_right(b, x) / len(b)
        d = max(d, abs(fa - fb))
    return d


def ks_critical(n: int, m: int, alpha: float = 0.01) -> float:
    """The asymptotic critical value: reject 'same distribution' when D exceeds it."""
    c = math.sqrt(-0.5 * math.log(alpha / 2))
    return c * math.sqrt((n + m) / (n * m))

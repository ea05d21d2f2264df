"""Goodness-of-fit statistics for the distribution tests (scipy is not a dependency)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

# Upper 0.1 % point of the standard normal: the tests' false-alarm rate is at most 1 in 1000,
# and the seeds are fixed, so a pass is reproducible.
Z_999 = 3.0902


def chi2_critical(df: int, z: float = Z_999) -> float:
    """Upper critical value of chi-square with ``df`` degrees of freedom (Wilson-Hilferty)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def chi_square(samples: Iterable[int], probs: Mapping[int, float]) -> tuple[float, int]:
    """Pearson's statistic of ``samples`` against ``probs`` and its degrees of freedom."""
    counts = Counter(samples)
    n = sum(counts.values())
    assert set(counts) <= set(probs), f"values outside the support: {sorted(set(counts) - set(probs))[:5]}"
    stat = sum((counts.get(k, 0) - n * p) ** 2 / (n * p) for k, p in probs.items())
    return stat, len(probs) - 1


def ks_statistic(samples: list[int], cdf: Callable[[int], float]) -> float:
    """Kolmogorov-Smirnov distance between the samples' ECDF and ``cdf`` over the integers they span
    (for a discrete law the usual critical value is conservative)."""
    counts = Counter(samples)
    n = len(samples)
    cum, worst = 0, 0.0
    for k in range(min(counts), max(counts) + 1):
        cum += counts.get(k, 0)
        worst = max(worst, abs(cum / n - cdf(k)))
    return worst


def ks_critical(n: int) -> float:
    """Asymptotic 0.1 % critical value of the one-sample KS statistic."""
    return 1.9495 / math.sqrt(n)


def phi(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))

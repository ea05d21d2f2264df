"""Confidence intervals for a step's reported means and percentiles, from its merged histogram.
Pure.

* A percentile: the distribution-free interval between two order statistics. The number of
  requests below the true q-quantile is Binomial(n, q); the ranks ``l`` and ``u`` are chosen so
  that ``l <= X <= u - 1`` with probability >= 95 % (exact binomial tails when the smaller of
  ``n*q`` and ``n*(1-q)`` is at most 50, the normal approximation beyond). When no rank bounds
  a side (p99 of 60 requests: even the largest of them is below the true p99 more than 2.5 % of
  the time), that side is ``None`` and the percentile is *low-sample*: the data cannot bound it.
* A mean: ``mean +- 1.96 * sd / sqrt(n)`` (the central limit theorem; ``sd`` from the buckets,
  within the histogram's 1 % relative error).

Both assume independent requests. Requests of one run are not (a closed loop settles into a
rhythm, neighbours share batches): run-to-run variation can be wider than these intervals, which
is why ``tokenload compare`` also takes repeated runs (``--baseline-runs``).
"""

from __future__ import annotations

import math

from tokenload.metrics.histogram import LogHistogram

__all__ = [
    "BATCHES",
    "CONFIDENCE",
    "Z95",
    "batch_interval",
    "mean_interval",
    "quantile_interval",
    "quantile_rank_interval",
    "share_exceeds",
    "share_interval",
]

CONFIDENCE = 0.95
#: The standard normal's 97.5th percentile (two-sided 95 %).
Z95 = 1.959963984540054
_ALPHA_HALF = (1.0 - CONFIDENCE) / 2.0
#: Up to this binomial mean the tails are summed exactly (a few hundred terms at most).
_EXACT_MEAN = 50.0


def _cdf(n: int, p: float, kmax: int) -> list[float]:
    """P(Y <= k) for k = 0..kmax, Y ~ Binomial(n, p), by the terms' recurrence."""
    out: list[float] = []
    if p <= 0.0:
        return [1.0] * (kmax + 1)
    term = math.exp(n * math.log1p(-p)) if p < 1.0 else 0.0
    total = 0.0
    ratio = p / (1.0 - p) if p < 1.0 else math.inf
    for k in range(kmax + 1):
        total += term
        out.append(min(total, 1.0))
        term = term * (n - k) / (k + 1) * ratio if k < n else 0.0
    return out


def share_exceeds(count: int, n: int, p0: float) -> bool:
    """Whether ``count`` of ``n`` independent requests is a share above ``p0`` beyond sampling
    noise: one-sided binomial test, P(Y >= count | n, p0) < 2.5 % (the lower end of a 95 %
    interval above ``p0``). Exact tails up to a binomial mean of 50, the normal beyond."""
    if n < 1 or count <= n * p0:
        return False
    if n * p0 > _EXACT_MEAN:
        sd = math.sqrt(n * p0 * (1.0 - p0))
        return (count - 0.5 - n * p0) / sd > Z95
    return 1.0 - _cdf(n, p0, count - 1)[-1] < _ALPHA_HALF


def quantile_rank_interval(n: int, q: float) -> tuple[int | None, int | None]:
    """1-based ranks ``(l, u)`` whose order statistics bound the q-quantile of ``n`` independent
    samples with >= 95 % confidence; ``None`` for a side no rank can bound."""
    if n < 1 or not 0.0 < q < 1.0:
        return None, None
    small_mean = min(n * q, n * (1.0 - q))
    if small_mean > _EXACT_MEAN:
        sd = math.sqrt(n * q * (1.0 - q))
        lo = math.floor(n * q - Z95 * sd)
        hi = math.ceil(n * q + Z95 * sd) + 1
        return (lo if lo >= 1 else None), (hi if hi <= n else None)
    # Y counts the samples on the quantile's small side: X itself (q <= 0.5) or n - X.
    flip = q > 0.5
    p = 1.0 - q if flip else q
    kmax = min(n, int(small_mean + 12 * math.sqrt(small_mean + 1) + 12))
    cdf = _cdf(n, p, kmax)

    def smallest_k_at_least(level: float) -> int:
        return next((k for k, c in enumerate(cdf) if c >= level), kmax)

    def largest_k_at_most(level: float) -> int | None:
        below = [k for k, c in enumerate(cdf) if c <= level]
        return below[-1] if below else None

    if not flip:
        k = largest_k_at_most(_ALPHA_HALF)  # P(X <= l - 1) <= alpha/2
        lo = k + 1 if k is not None else None
        hi = smallest_k_at_least(1.0 - _ALPHA_HALF) + 1  # P(X <= u - 1) >= 1 - alpha/2
        return lo, (hi if hi <= n else None)
    k_hi = largest_k_at_most(_ALPHA_HALF)  # P(X >= u) = P(Y <= n - u) <= alpha/2
    hi = n - k_hi if k_hi is not None else None
    lo = n - smallest_k_at_least(1.0 - _ALPHA_HALF)  # P(X < l) = P(Y >= n - l + 1) <= alpha/2
    return (lo if lo >= 1 else None), hi


def _at_rank(h: LogHistogram, rank: int) -> float | None:
    return h.quantile(rank / h.count)


def quantile_interval(h: LogHistogram, q: float) -> list[float | None]:
    """``[low, high]`` of the q-quantile's 95 % interval; ``None`` for a side the data cannot bound."""
    lo, hi = quantile_rank_interval(h.count, q)
    return [
        _at_rank(h, lo) if lo is not None else None,
        _at_rank(h, hi) if hi is not None else None,
    ]


def mean_interval(h: LogHistogram) -> list[float] | None:
    """``[low, high]`` of the mean's 95 % interval; None with fewer than two samples."""
    if h.count < 2 or h.mean is None:
        return None
    mean = h.mean
    gamma = h.gamma
    sq = sum(c * (2.0 * gamma**i / (gamma + 1.0) - mean) ** 2 for i, c in h.buckets.items())
    sq += h.zero_count * mean**2
    sd = math.sqrt(sq / (h.count - 1))
    half = Z95 * sd / math.sqrt(h.count)
    return [mean - half, mean + half]


def share_interval(good: int, n: int) -> tuple[float, float] | None:
    """The 95 % Wilson score interval of a share ``good / n`` (independent requests); None
    without requests. Wilson's, not the normal approximation's, because attainment targets sit
    near 1 where that one leaves [0, 1]."""
    if n < 1:
        return None
    p = good / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


#: Batches of the batch-means interval (below): 5 equal stretches of the probe's measured part.
BATCHES = 5
#: Student's t 97.5th percentile at BATCHES - 1 = 4 degrees of freedom.
_T4 = 2.7764451051977987


def batch_interval(
    samples: list[tuple[float, float]], q: float, batches: int = BATCHES
) -> tuple[float, float] | None:
    """A 95 % interval of the q-quantile that holds when requests are *not* independent (batch
    means, as in simulation output analysis): the requests, in order of sending, are cut into
    ``batches`` equal stretches of time, each stretch's q-quantile is taken, and the interval is
    their mean +- t(0.975, batches - 1) x their standard error. Requests that run together share
    the engine's batches, so their TPOTs (and TTFTs, in a queue) rise and fall together: the
    order-statistics interval, which assumes independence, is then several times too narrow
    (measured on the emulator near capacity: TPOT p90 [58.6, 59.7] ms in a 7 s probe whose 5 s
    windows ranged 52-67 ms). None with fewer than 2 samples in any batch."""
    if len(samples) < 2 * batches:
        return None
    samples = sorted(samples)
    t0, t1 = samples[0][0], samples[-1][0]
    width = (t1 - t0) / batches or 1.0
    groups: list[list[float]] = [[] for _ in range(batches)]
    for t, v in samples:
        groups[min(batches - 1, int((t - t0) / width))].append(v)
    if any(len(g) < 2 for g in groups):
        return None
    est = []
    for g in groups:
        g.sort()
        est.append(g[min(len(g) - 1, int(q * len(g)))])
    mean = sum(est) / batches
    sd = math.sqrt(sum((e - mean) ** 2 for e in est) / (batches - 1))
    half = (_T4 if batches == BATCHES else 2.0) * sd / math.sqrt(batches)
    return mean - half, mean + half

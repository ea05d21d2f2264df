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

__all__ = ["CONFIDENCE", "mean_interval", "quantile_interval", "quantile_rank_interval", "share_exceeds"]

CONFIDENCE = 0.95
_Z = 1.959963984540054  # the standard normal's 97.5th percentile
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
        return (count - 0.5 - n * p0) / sd > _Z
    return 1.0 - _cdf(n, p0, count - 1)[-1] < _ALPHA_HALF


def quantile_rank_interval(n: int, q: float) -> tuple[int | None, int | None]:
    """1-based ranks ``(l, u)`` whose order statistics bound the q-quantile of ``n`` independent
    samples with >= 95 % confidence; ``None`` for a side no rank can bound."""
    if n < 1 or not 0.0 < q < 1.0:
        return None, None
    small_mean = min(n * q, n * (1.0 - q))
    if small_mean > _EXACT_MEAN:
        sd = math.sqrt(n * q * (1.0 - q))
        lo = math.floor(n * q - _Z * sd)
        hi = math.ceil(n * q + _Z * sd) + 1
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
    half = _Z * sd / math.sqrt(h.count)
    return [mean - half, mean + half]

"""Is a step steady? Its measured part's first and last thirds compared. Pure.

A step whose figures still move while it is measured (a queue building, a cache warming, a
ramp not over) reports a mix that no longer holding load would repeat. Two trends are checked,
each between the first and the last third of the measured part:

* TTFT: the median of the requests *sent* in each third, with its distribution-free 95 %
  interval (:func:`tokenload.metrics.intervals.quantile_rank_interval`);
* completions: the successful requests that *ended* in each third (a Poisson count).

A trend is a drift when it is beyond sampling noise (the two medians' 95 % intervals do not
overlap; the two counts are as far apart as non-overlapping 95 % intervals would be, 1.96 x sqrt(2)
standard deviations of their difference, about 0.6 % false alarms for a steady step) *and* larger
than ``DRIFT_TOLERANCE``, 10 %: the default tolerance of ``tokenload compare``, so a step that
drifts by less could not be told from a regression between two runs anyway.
"""

from __future__ import annotations

import math
from typing import Any

from tokenload.metrics.intervals import quantile_rank_interval

__all__ = ["DRIFT_TOLERANCE", "steady_state"]

DRIFT_TOLERANCE = 0.1
#: Two 95 % intervals of equal width just touching: their centres 1.96 x sqrt(2) sd(diff) apart.
_Z_APART = 1.959963984540054 * math.sqrt(2.0)


def _median_interval(values: list[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    s = sorted(values)
    lo, hi = quantile_rank_interval(len(s), 0.5)
    return s[len(s) // 2], (s[lo - 1] if lo else None), (s[hi - 1] if hi else None)


def steady_state(
    ttft_by_send: list[tuple[float, float]], ends: list[float], start: float, end: float
) -> dict[str, Any] | None:
    """``ttft_by_send``: (send time, TTFT ms) of the measured part's successful requests;
    ``ends``: when its successful requests ended; ``start``/``end``: the measured part (s).
    Returns the thirds' figures and the drifts found (``drifting``: [] when steady), or None
    when the part is too short to split."""
    span = end - start
    if span <= 0:
        return None
    a, b = start + span / 3, end - span / 3
    first = [v for t, v in ttft_by_send if start <= t < a]
    last = [v for t, v in ttft_by_send if b <= t < end]
    m1, lo1, hi1 = _median_interval(first)
    m3, lo3, hi3 = _median_interval(last)
    drifting = []
    if m1 and m3 and abs(m3 / m1 - 1) > DRIFT_TOLERANCE:
        apart = (hi1 is not None and lo3 is not None and lo3 > hi1) or (
            lo1 is not None and hi3 is not None and hi3 < lo1
        )
        if apart:
            drifting.append("ttft_p50")
    c1 = sum(1 for t in ends if start <= t < a)
    c3 = sum(1 for t in ends if b <= t < end)
    # None ended in the first third is as far from the last third's count as can be (a step
    # whose users all sent at its start and not one had finished yet): the noise test decides.
    moved = c1 == 0 or abs(c3 / c1 - 1) > DRIFT_TOLERANCE
    if (c1 or c3) and moved and abs(c3 - c1) > _Z_APART * math.sqrt(c1 + c3):
        drifting.append("completions")
    third = span / 3
    return {
        "ttft_p50_ms": [m1, m3],
        "requests_per_s": [c1 / third, c3 / third],
        "drifting": drifting,
    }

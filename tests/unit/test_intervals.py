"""Confidence intervals of a step's percentiles and means: their coverage on lognormal latencies
(CV about 0.5, as under load), and the low-sample rule that follows from the definition."""

from __future__ import annotations

import math
import random

import pytest

from tokenload.metrics.histogram import LogHistogram
from tokenload.metrics.intervals import (
    mean_interval,
    quantile_interval,
    quantile_rank_interval,
    share_exceeds,
)

SIGMA = 0.47  # lognormal CV = sqrt(exp(sigma^2) - 1) = 0.5


def _lognormal_quantile(q: float, mu: float = math.log(100.0)) -> float:
    from statistics import NormalDist

    return math.exp(mu + SIGMA * NormalDist().inv_cdf(q))


@pytest.mark.parametrize(("n", "q"), [(60, 0.5), (300, 0.9), (1000, 0.99), (3000, 0.95)])
def test_percentile_intervals_cover_the_truth_about_95_percent_of_the_time(n: int, q: float) -> None:
    rng = random.Random(7)
    truth = _lognormal_quantile(q)
    trials, covered = 400, 0
    for _ in range(trials):
        h = LogHistogram()
        for _ in range(n):
            h.add(rng.lognormvariate(math.log(100.0), SIGMA))
        lo, hi = quantile_interval(h, q)
        # The histogram's 1 % relative error widens the check by that much.
        covered += lo is not None and hi is not None and lo * 0.99 <= truth <= hi * 1.01
    # 95 % nominal; 400 trials: the binomial sd is 1.1 points, so 91 % is 3.5 sd below.
    assert covered / trials >= 0.91, covered / trials


def test_the_mean_interval_covers_the_lognormal_mean() -> None:
    rng = random.Random(3)
    truth = 100.0 * math.exp(SIGMA**2 / 2)
    covered = 0
    for _ in range(400):
        h = LogHistogram()
        for _ in range(500):
            h.add(rng.lognormvariate(math.log(100.0), SIGMA))
        lo, hi = mean_interval(h)
        covered += lo <= truth <= hi
    assert covered / 400 >= 0.91


def test_a_p99_of_60_requests_cannot_be_bounded_above() -> None:
    # Even the largest of 60 requests is below the true p99 with probability 0.99**60 = 0.55.
    assert quantile_rank_interval(60, 0.99)[1] is None
    # From about 370 on the largest bounds it (0.99**n <= 2.5 %); the median of 60 is bounded.
    assert quantile_rank_interval(400, 0.99)[1] == 400
    lo, hi = quantile_rank_interval(60, 0.5)
    assert lo is not None and hi is not None and lo < 30 < hi


def test_the_summary_names_the_percentiles_too_few_requests_stand_behind() -> None:
    from tokenload.results.summary import _intervals, _low_sample

    h = LogHistogram()
    for i in range(60):
        h.add(50.0 + i)
    ci = {"ttft_ms": _intervals(h)}
    assert _low_sample(ci) == {"ttft_ms": ["p95", "p99"]}
    assert ci["ttft_ms"]["n"] == 60 and None not in ci["ttft_ms"]["p50"]


def test_a_share_is_above_a_limit_only_beyond_sampling_noise() -> None:
    # One late read among 52 requests (1.9 %) is not evidence of more than 1 %; 48 of 1,717
    # (2.8 %) is, and so is 2 % of 10,000; exactly 1 % never is.
    assert not share_exceeds(1, 52, 0.01)
    assert share_exceeds(48, 1717, 0.01)
    assert share_exceeds(200, 10_000, 0.01) and not share_exceeds(100, 10_000, 0.01)
    assert not share_exceeds(0, 0, 0.01)
    # The test's false-alarm rate at the limit itself is at most 2.5 % (Monte Carlo, seeded).
    rng = random.Random(7)
    alarms = sum(share_exceeds(sum(rng.random() < 0.01 for _ in range(400)), 400, 0.01) for _ in range(2000))
    assert alarms / 2000 <= 0.025

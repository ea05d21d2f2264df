"""How far a figure moves by chance between two runs: the statistics ``tokenload compare``
judges with (the rule that combines them is in compare_math). Pure.

* ``bootstrap_interval``: sampling noise of a percentile, from the per-request samples.
* ``spread``: the width of the central 80 % of per-request values, the scale that run-level
  effects (a closed loop settling into a different rhythm of arrivals) move a percentile by.
* ``correlation_factor``: how much requests of one run move together (a closed loop's rhythm,
  a drift through the step), by batch medians in time order against the same data shuffled:
  the bootstrap treats requests as independent, and this widens its interval when they are not.
* ``run_to_run_bound``: how far a figure moves between repeated runs of one configuration, from
  the runs themselves (a prediction interval, Student's t).
* ``count_variance`` and ``rate_interval``: counting noise of a rate.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = [
    "BOOTSTRAP_ROUNDS",
    "CONFIDENCE",
    "MIN_TAIL",
    "RUN_TO_RUN_MIN_RUNS",
    "bootstrap_interval",
    "centre_interval",
    "correlation_factor",
    "count_variance",
    "min_samples",
    "rate_interval",
    "run_to_run_bound",
    "run_to_run_sentence",
    "spread",
    "t_quantile",
    "widen_interval",
]

#: Batches of a run's requests (in time order) for ``correlation_factor``; each must hold at
#: least ``BATCH_MIN`` requests, or the factor is 1 (not measurable).
BATCHES = 10
BATCH_MIN = 20

CONFIDENCE = 0.99
BOOTSTRAP_ROUNDS = 2000
#: A percentile q is judged only with this many samples beyond it on each side: n (1 - q) >= 5,
#: 10 requests for p50, 500 for p99. A bootstrap of a p99 over 60 requests resamples their
#: maximum and reports a spread far narrower than the truth.
MIN_TAIL = 5


def min_samples(q: float) -> int:
    return max(2, math.ceil(MIN_TAIL / (1.0 - q) - 1e-9))


def bootstrap_interval(
    a: list[float],
    b: list[float],
    q: float,
    rng: np.random.Generator,
    rounds: int = BOOTSTRAP_ROUNDS,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """The central ``confidence`` share of quantile_q(B*) / quantile_q(A*) - 1 over ``rounds``
    resamples (with replacement) of both sides; None with fewer than ``min_samples(q)`` a side."""
    need = min_samples(q)
    if len(a) < need or len(b) < need:
        return None
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ratios = []
    # In chunks, so that a step with thousands of requests stays within a few MB.
    chunk = max(1, min(rounds, 2_000_000 // max(len(xa), len(xb))))
    done = 0
    while done < rounds:
        k = min(chunk, rounds - done)
        qa = np.quantile(xa[rng.integers(0, len(xa), size=(k, len(xa)))], q, axis=1)
        qb = np.quantile(xb[rng.integers(0, len(xb), size=(k, len(xb)))], q, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(qb / qa - 1.0)
        done += k
    r = np.concatenate(ratios)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return None
    tail = (1.0 - confidence) / 2
    lo, hi = np.quantile(r, [tail, 1.0 - tail])
    return float(lo), float(hi)


def centre_interval(
    interval: tuple[float, float] | None, change: float | None, a: list[float], b: list[float], q: float
) -> tuple[float, float] | None:
    """A :func:`bootstrap_interval` moved (in log space) to lie about the change reported: the
    samples' own quantiles are not always the reported ones (a summary's histogram quantiles;
    ITL's per-request medians against every token's), and an interval must hold the estimate
    it is the noise of."""
    if interval is None or change is None or change <= -1 or not a or not b:
        return interval
    qa, qb = (float(np.quantile(np.asarray(x, dtype=float), q)) for x in (a, b))
    if qa <= 0 or qb <= 0:
        return interval
    shift = math.log1p(change) - math.log(qb / qa)
    lo, hi = (math.expm1(math.log1p(max(v, -0.999999)) + shift) for v in interval)
    return lo, hi


def widen_interval(
    interval: tuple[float, float] | None, change: float | None, factor: float
) -> tuple[float, float] | None:
    """The interval's sides scaled by sqrt(factor) about the point change, in log space."""
    if interval is None or factor <= 1.0 or change is None or change <= -1:
        return interval
    c = math.log1p(change)
    k = math.sqrt(factor)
    lo, hi = (math.log1p(max(v, -0.999999)) for v in interval)
    return math.expm1(c - (c - lo) * k), math.expm1(c + (hi - c) * k)


def spread(values: list[float]) -> float | None:
    """P90 - P10 of the values (None with fewer than two)."""
    if len(values) < 2:
        return None
    p10, p90 = np.quantile(np.asarray(values, dtype=float), [0.1, 0.9])
    return float(p90 - p10)


def count_variance(n: float, users: float | None, e2e_ms: list[float]) -> float:
    """Variance of a step's completion count n. A closed loop of ``users`` (renewal theory):
    n CV^2 + users / 4, CV being the per-request E2E coefficient of variation (1 without two
    samples) and users / 4 the most a user's one request more or less in the window adds. An
    open loop (``users`` None): Poisson, n."""
    if users is None:
        return max(n, 0.5)
    cv2 = 1.0
    if len(e2e_ms) >= 2:
        m = sum(e2e_ms) / len(e2e_ms)
        var = sum((x - m) ** 2 for x in e2e_ms) / (len(e2e_ms) - 1)
        cv2 = var / (m * m) if m > 0 else 1.0
    return max(n * cv2 + users / 4.0, 0.25)


def rate_interval(
    rate_a: float,
    n_a: float,
    var_a: float,
    rate_b: float,
    n_b: float,
    var_b: float,
    confidence: float = CONFIDENCE,
) -> tuple[float, float] | None:
    """Interval of rate_b / rate_a - 1 from the completion counts behind the rates and their
    variances: exp(ln(B/A) +- z sqrt(var_A/n_A^2 + var_B/n_B^2)) - 1. A side that completed
    nothing counts as half a completion, so the ratio stays finite."""
    if rate_a <= 0 and rate_b <= 0:
        return None
    na, nb = max(n_a, 0.5), max(n_b, 0.5)
    # Within a step a rate is proportional to its count: a zero rate is rescaled from 0.5.
    ra = rate_a if rate_a > 0 else rate_b * na / nb
    rb = rate_b if rate_b > 0 else rate_a * nb / na
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * math.sqrt(var_a / na**2 + var_b / nb**2)
    center = math.log(rb / ra)
    return math.exp(center - half) - 1.0, math.exp(center + half) - 1.0


def correlation_factor(values_in_order: list[float], rng: np.random.Generator, shuffles: int = 8) -> float:
    """Variance of the batch medians of the requests in time order over that of the same
    requests shuffled (>= 1; 1 without ``BATCHES x BATCH_MIN`` requests). Independent requests
    give about 1; a run whose requests share a rhythm or drift gives more, and the sampling
    interval of its percentiles is widened by the square root."""
    n = len(values_in_order)
    m = n // BATCHES
    if m < BATCH_MIN:
        return 1.0
    x = np.asarray(values_in_order[: m * BATCHES], dtype=float)

    def batch_var(v: np.ndarray) -> float:
        return float(np.var(np.median(v.reshape(BATCHES, m), axis=1), ddof=1))

    ordered = batch_var(x)
    shuffled = float(np.mean([batch_var(rng.permutation(x)) for _ in range(shuffles)]))
    if shuffled <= 0:
        return 1.0
    return float(min(25.0, max(1.0, ordered / shuffled)))


def t_quantile(p: float, dof: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, Cornish-Fisher above."""
    if dof == 1:
        return math.tan(math.pi * (p - 0.5))
    if dof == 2:
        a = 2 * p - 1
        return a * math.sqrt(2 / (1 - a * a))
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / dof + g2 / dof**2 + g3 / dof**3


#: The fewest runs of one configuration (A and its --baseline-runs) whose spread is judged: with
#: two, the standard deviation rests on one difference (1 degree of freedom) and the 99 %
#: prediction interval is the mean +- 55 times that difference (t = 63.7, x sqrt(1.5) / sqrt(2)):
#: two runs 2 % apart admit any value from 0 to twice the mean, so it held a -73 % drop in
#: throughput (walkthrough, 2026-12-05). With three, t = 9.9 on 2 degrees of freedom. A
#: definition of what an interval can say, not fitted.
RUN_TO_RUN_MIN_RUNS = 3


def run_to_run_bound(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Where one more run of the configuration whose repeated runs gave ``values`` falls, with
    ``confidence``: mean +- t sd sqrt(1 + 1/k) (a prediction interval), from 0 up (latencies and
    rates are not negative); None with fewer than :data:`RUN_TO_RUN_MIN_RUNS` runs."""
    k = len(values)
    if k < RUN_TO_RUN_MIN_RUNS:
        return None
    mean = sum(values) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = t_quantile(0.5 + confidence / 2, k - 1) * sd * math.sqrt(1 + 1 / k)
    return max(0.0, mean - half), mean + half


def run_to_run_sentence(runs: int) -> str:
    """What the comparison says of run-to-run noise, given ``runs`` runs of A's configuration (A
    and its --baseline-runs)."""
    if runs >= RUN_TO_RUN_MIN_RUNS:
        return (
            f"Run-to-run: from {runs} runs of A's configuration, the interval where one more run "
            "falls (column run-to-run, in the metric's unit). "
        )
    if runs == 2:
        return (
            "Run-to-run noise is not judged: 2 runs of A's configuration are too few for an interval "
            f"(at 99 % it would be +- 55 times their difference); give {RUN_TO_RUN_MIN_RUNS - 1} or "
            "more --baseline-runs. "
        )
    return (
        "Run-to-run noise is not measured (give repeated runs of A's configuration: --baseline-runs "
        f"DIR, {RUN_TO_RUN_MIN_RUNS - 1} or more). "
    )

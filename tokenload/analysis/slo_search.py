"""The SLO capacity search (``--shape slo``): the highest request rate whose steps meet every
SLO, found in open loop. Pure: steps in ``summary.json`` form in, the next rate out.

A *probe* is one open-loop rate step. It is judged beyond sampling noise, never on a point
estimate alone:

* an SLO item (``ttft_p95_ms=500``) *passes* when the 95 % interval of the step's percentile
  (the union of ``summary.json``'s ``ci95``, order statistics, and a batch-means interval that
  holds for requests that run together; both in :mod:`tokenload.metrics.intervals`)
  lies at or under the limit, *fails* when it lies wholly above, and is *indeterminate* when it straddles
  the limit or a side of it cannot be bounded (too few requests for that percentile);
* with ``--slo-attainment A``: the share of the step's measured requests that met every
  per-request limit (failed requests never do; :func:`tokenload.report.capacity.good_share`),
  with its 95 % Wilson interval, against A, in the same three ways;
* a step whose failed share is above ``--stop-error-rate`` fails outright (the server refused
  the load; its latencies describe only the requests it took).

The probe passes when every item passes, fails when any item fails, else it is indeterminate.

The search: probes grow by ``factor`` from ``start`` while they pass (up to ``max_rate``), then
bisect geometrically between the highest passing and the lowest failing rate until
``hi / lo <= 1 + resolution``. A first probe that fails is followed by lower ones (``/ factor``, at most
:data:`MAX_DOWN_STEPS` times). An indeterminate probe is repeated at the same rate, each repeat
twice as long (twice the requests, a narrower interval), up to ``repeats`` times
(``--slo-repeats``, default 0: each repeat costs about half again the load time for a few points
of accuracy, bench/slo_repeats.py), the latest probe at a rate standing for it. One still
indeterminate is then *decided on its point estimates* (every item's value within its limit: the
same test a staircase applies) and stays reported ``indeterminate``: counting it as failing
instead costs a fifth to a third of the rate on lognormal latencies
(tests/analysis/test_slo_search.py measured it), because near capacity a p95 within 30 % of its
limit needs thousands of requests to be shown either way. The result says whether both ends of its
bracket were determinate (``determinate``).

*Screens* (monotonicity in the rate): while the search climbs, a probe only has to show that the
search should climb on, and the latencies of an engine do not fall as its load rises, so a rate
below one shown to meet the SLO meets it too. Climbing probes are therefore *screens*: held for
``--step-duration`` (not the requests a bounded percentile needs: at 2 req/s a p90's needs 36 s),
judged like any probe, never repeated, and climbed past when their point estimates meet the SLO,
unless an interval is bounded on both sides across its limit: that rate is near the limit, and
is probed again in full at once (climbing past it on a point estimate sent a search against the
emulator to 64 req/s and four failing probes above a 28.8 req/s capacity).
No screen is ever the answer on its own: when the bracket has closed on one, that rate is probed
again in full (a *confirmation*), and the search goes on below it if the confirmation fails. A
search stopped before that (``--time-budget``) reports the screen it stood on, marked
``answer_is_screen``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tokenload.metrics.failures import failed_share
from tokenload.metrics.intervals import BATCHES, Z95, batch_interval, quantile_rank_interval, share_interval
from tokenload.report.capacity import SLO, Share

__all__ = [
    "MAX_DOWN_STEPS",
    "PROBE_REQUESTS_FACTOR",
    "ItemCheck",
    "NextProbe",
    "Probe",
    "SearchPlan",
    "judge_probe",
    "min_requests",
    "next_probe",
    "probe_timing",
    "search_result",
]

PASS, FAIL, INDETERMINATE = "pass", "fail", "indeterminate"
#: How many times a failing first probe is followed by one ``factor`` lower before the search
#: gives up (``fails_at_lowest``): 3 halvings reach an eighth of --slo-start.
MAX_DOWN_STEPS = 3


#: A probe is planned to hold this many times the fewest requests that can bound its SLO's
#: percentiles on both sides: with the fewest, a p95's upper bound is the sample maximum, with
#: twice as many it is an inner order statistic (a far narrower interval on a lognormal tail).
PROBE_REQUESTS_FACTOR = 2


def min_requests(slo: SLO, attainment: float | None) -> int:
    """The fewest measured requests with which every item can be decided at all: both sides of
    each percentile's 95 % interval bounded (p95: 72, p99: 368), and, with an attainment A, a
    share of 1 whose Wilson lower bound reaches A (n >= z^2 A / (1 - A): 380 for 0.99)."""
    need = 1
    for item in slo.items:
        q = float(item.quantile[1:]) / 100.0
        n = 1
        while None in quantile_rank_interval(n, q) and n < 1_000_000:
            n = n * 2 if n < 64 else int(n * 1.25)
        lo = n // 2 if n > 64 else 1
        while lo < n:  # the smallest bounded n in (lo, n]
            mid = (lo + n) // 2
            if None in quantile_rank_interval(mid, q):
                lo = mid + 1
            else:
                n = mid
        need = max(need, n)
    if attainment is not None and attainment < 1:
        need = max(need, math.ceil(Z95 * Z95 * attainment / (1 - attainment)))
    return need


def probe_timing(
    step_duration_s: float, warmup: float, rate_rps: float, requests: int, fill_s: float = 0.0
) -> tuple[float, float]:
    """(seconds a probe at ``rate_rps`` is held, seconds of it left out as warm-up). The warm-up
    is ``warmup`` (a fraction of ``step_duration_s`` below 1, else seconds) but at least
    ``fill_s``: a probe starts from an idle server, and in open loop its batch fills for about
    one request's lifetime (Little's law), so measuring earlier would judge a lighter load than
    the rate's. The measured part expects ``requests`` arrivals, is never shorter than what
    ``step_duration_s`` leaves after the warm-up, and holds :data:`BATCHES` request lifetimes
    (``fill_s`` each): requests that run together move together, so each batch of the
    batch-means interval must outlast one (in a synthetic check with a 2 s correlation time, the
    interval covered the true p90 in 66 % of 7 s probes, 80 % of 20 s ones, 88 % of 40 s ones)."""
    warm = max(warmup * step_duration_s if warmup < 1 else warmup, fill_s)
    measured = max(requests / rate_rps, step_duration_s - warm, BATCHES * fill_s)
    return warm + measured, warm


@dataclass(frozen=True, slots=True)
class ItemCheck:
    """One SLO item (or the attainment target) against one step."""

    name: str  # ttft_p95_ms, ..., or attainment
    limit: float
    value: float | None
    interval: tuple[float | None, float | None]
    outcome: str  # pass | fail | indeterminate

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "limit": self.limit,
            "value": self.value,
            "ci95": list(self.interval),
            "outcome": self.outcome,
        }


def _latency_check(limit: float, value: float | None, lo: float | None, hi: float | None) -> str:
    if value is None:
        return INDETERMINATE
    if hi is not None and hi <= limit:
        return PASS
    if lo is not None and lo > limit:
        return FAIL
    return INDETERMINATE


def _union(
    a: tuple[float | None, float | None], b: tuple[float, float] | None
) -> tuple[float | None, float | None]:
    """The smallest interval holding both (a side ``a`` cannot bound stays unbounded)."""
    if b is None:
        return a
    lo = None if a[0] is None else min(a[0], b[0])
    hi = None if a[1] is None else max(a[1], b[1])
    return lo, hi


def judge_probe(
    step: dict[str, Any],
    slo: SLO,
    attainment: float | None,
    share: Share | None,
    max_error_rate: float,
    per_request: dict[str, list[tuple[float, float]]] | None = None,
) -> tuple[str, bool, list[ItemCheck]]:
    """The probe's outcome (pass, fail, indeterminate), whether its point estimates meet every
    item, and each item's check; see the module docstring. ``share`` is the step's good share
    (needed with ``attainment``); ``per_request`` the measured requests' (send time, value) by
    field (``ttft_ms``, ...): a percentile's interval is then the union of the order-statistics
    interval and the batch-means one (``metrics.intervals.batch_interval``)."""
    checks: list[ItemCheck] = []
    for item in slo.items:
        value = (step.get(item.field) or {}).get(item.quantile)
        ci = ((step.get("ci95") or {}).get(item.field) or {}).get(item.quantile) or [None, None]
        samples = (per_request or {}).get(item.field)
        q = float(item.quantile[1:]) / 100.0
        lo, hi = _union((ci[0], ci[1]), batch_interval(samples, q) if samples else None)
        checks.append(
            ItemCheck(
                item.name,
                item.limit_ms,
                value,
                (lo, hi),
                _latency_check(item.limit_ms, value, lo, hi),
            )
        )
    if attainment is not None:
        interval = share_interval(share.good, share.requests) if share is not None else None
        value = share.request_share if share is not None else None
        if interval is None:
            outcome, interval = INDETERMINATE, (None, None)
        elif interval[0] >= attainment:
            outcome = PASS
        elif interval[1] < attainment:
            outcome = FAIL
        else:
            outcome = INDETERMINATE
        checks.append(ItemCheck("attainment", attainment, value, interval, outcome))
    share_failed = failed_share(step)
    if share_failed is not None and share_failed > max_error_rate:
        checks.append(ItemCheck("failed_share", max_error_rate, share_failed, (None, None), FAIL))
    meets = bool(checks) and all(_meets(c) for c in checks)
    outcomes = {c.outcome for c in checks}
    if not checks:
        return INDETERMINATE, False, checks
    if FAIL in outcomes:
        return FAIL, False, checks
    if INDETERMINATE in outcomes:
        return INDETERMINATE, meets, checks
    return PASS, True, checks


def _meets(check: ItemCheck) -> bool:
    """The point estimate's test: a latency at or under its limit, a share at or over its target."""
    if check.outcome == FAIL or check.value is None:
        return False
    if check.name == "attainment":
        return check.value >= check.limit
    return check.value <= check.limit


@dataclass(slots=True)
class Probe:
    """One probe as the search saw it."""

    step: int
    rate_rps: float
    duration_s: float
    outcome: str
    #: Whether the point estimates meet every item (decides a probe still indeterminate).
    meets: bool = False
    checks: list[ItemCheck] = field(default_factory=list)
    bottleneck: str | None = None
    #: How many probes at this rate came before this one (a repeat of an indeterminate one).
    repeat: int = 0
    #: The step's measured request rate and the share of its requests that met every
    #: per-request limit (for the goodput at the answer).
    requests_per_s: float | None = None
    good_share: float | None = None
    #: The step's E2E p90 in seconds (how long its batch takes to fill from idle).
    e2e_p90_s: float | None = None
    #: A climbing probe (see the module docstring): never the answer until probed in full.
    screen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "rate_rps": self.rate_rps,
            "duration_s": self.duration_s,
            "outcome": self.outcome,
            "meets_point_estimate": self.meets,
            "repeat": self.repeat,
            "screen": self.screen,
            "bottleneck": self.bottleneck,
            "requests_per_s": self.requests_per_s,
            "good_share": self.good_share,
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """The search's settings (``--slo-start``, ``--slo-factor``, ``--slo-max``,
    ``--slo-resolution``, ``--slo-repeats``). No defaults here: the option table
    (tokenload.loadgen.option_table) is the one place that declares them."""

    start: float
    factor: float
    max_rate: float
    resolution: float
    repeats: int

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.factor > 1 and self.max_rate >= self.start):
            raise ValueError(f"slo search: expected 0 < start <= max and factor > 1, got {self}")
        if not self.resolution > 0:
            raise ValueError(f"--slo-resolution: expected a share > 0, got {self.resolution:g}")


def _passes(p: Probe) -> bool:
    return p.outcome == PASS or (p.outcome == INDETERMINATE and p.meets)


def _straddles(p: Probe) -> bool:
    """An indeterminate item whose interval is bounded on both sides: it lies across the limit
    (not merely too few requests to bound it)."""
    return any(c.outcome == INDETERMINATE and None not in c.interval for c in p.checks)


def _standing(probes: list[Probe]) -> dict[float, Probe]:
    """The latest probe at each rate (a repeat stands for the probes before it)."""
    return {p.rate_rps: p for p in probes}


def _ends(probes: list[Probe]) -> tuple[Probe | None, Probe | None]:
    """The highest passing probe and the lowest not-passing one above it."""
    standing = list(_standing(probes).values())
    lo = max((p for p in standing if _passes(p)), key=lambda p: p.rate_rps, default=None)
    above = [p for p in standing if not _passes(p) and (lo is None or p.rate_rps > lo.rate_rps)]
    return lo, min(above, key=lambda p: p.rate_rps, default=None)


def _bracket(probes: list[Probe]) -> tuple[float | None, float | None]:
    lo, hi = _ends(probes)
    return (lo.rate_rps if lo else None), (hi.rate_rps if hi else None)


class NextProbe(NamedTuple):
    """The next probe: its rate, how many probes at that rate came before it when it repeats an
    indeterminate one (0 otherwise), and whether it is a screen."""

    rate_rps: float
    repeat: int = 0
    screen: bool = False


def next_probe(probes: list[Probe], plan: SearchPlan) -> NextProbe | str:
    """The next probe, or why the search ends: ``found``, ``not_reached`` (it met the SLO up to
    ``max_rate``) or ``fails_at_lowest``."""
    if not probes:
        return NextProbe(plan.start, 0, screen=True)
    last = probes[-1]
    if last.outcome == INDETERMINATE and not last.screen and last.repeat < plan.repeats:
        return NextProbe(last.rate_rps, last.repeat + 1)
    if last.screen and last.meets and _straddles(last):
        # Near the limit (an interval bounded on both sides across it): no climbing past on a
        # point estimate; the rate is probed in full now.
        return NextProbe(last.rate_rps)
    lo, hi = _ends(probes)
    if hi is None:  # everything so far passed: climb
        assert lo is not None
        if lo.rate_rps >= plan.max_rate:
            return "not_reached" if not lo.screen else NextProbe(lo.rate_rps)
        return NextProbe(min(plan.max_rate, lo.rate_rps * plan.factor), 0, screen=True)
    if lo is None:  # nothing passed yet: go down
        lowest = min(p.rate_rps for p in probes)
        if lowest <= plan.start / plan.factor**MAX_DOWN_STEPS * (1 + 1e-9):
            return "fails_at_lowest"
        return NextProbe(lowest / plan.factor, 0, screen=True)
    if hi.rate_rps / lo.rate_rps <= 1 + plan.resolution:
        # The answer must be a probe in full: a screen at the bracket's foot is confirmed first.
        return "found" if not lo.screen else NextProbe(lo.rate_rps)
    return NextProbe(float(f"{math.sqrt(lo.rate_rps * hi.rate_rps):.4g}"))  # the geometric middle


def search_result(probes: list[Probe], outcome: str, slo: SLO, attainment: float | None) -> dict[str, Any]:
    """summary.json's ``search`` for the SLO search. ``slo_capacity_rps`` is the highest rate
    that met the SLO (None when none did); ``determinate``: both ends of the bracket were decided
    on their intervals, not on point estimates."""
    answer, top = _ends(probes)
    lo, hi = _bracket(probes)
    standing = _standing(probes)
    failing = [p for p in probes if not _passes(p) and standing[p.rate_rps] is p]
    return {
        "shape": "slo",
        "outcome": outcome,
        "slo": str(",".join(f"{i.name}={i.limit_ms:g}" for i in slo.items)),
        "slo_attainment": attainment,
        "slo_capacity_rps": lo,
        "bracket": [lo, hi],
        "determinate": all(p.outcome != INDETERMINATE for p in (answer, top) if p is not None),
        "answer_step": answer.step if answer is not None else None,
        # A screen (a climbing probe held for --step-duration only) stands as the answer only
        # when the search stopped before confirming it in full (--time-budget, or Ctrl-C).
        "answer_is_screen": answer.screen if answer is not None else None,
        # Goodput = the answer step's measured rate x the share of its requests that met every
        # per-request limit (report/capacity.py's definition).
        "goodput_rps": (
            answer.requests_per_s * answer.good_share
            if answer is not None and answer.requests_per_s is not None and answer.good_share is not None
            else None
        ),
        "first_failing_probe": (
            {"step": failing[0].step, "rate_rps": failing[0].rate_rps, "bottleneck": failing[0].bottleneck}
            if failing
            else None
        ),
        "probes": [p.to_dict() for p in probes],
    }

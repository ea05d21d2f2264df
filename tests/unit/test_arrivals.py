"""Open-loop arrival schedules (pure): exact split across workers, the requested distributions."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from tests.ks import ks_critical, ks_statistic
from tokenload.loadgen.arrivals import (
    ArrivalSpec,
    ArrivalSpecError,
    SlotSchedule,
    global_gaps,
    parse_arrival,
)
from tokenload.loadgen.steps import StepSpecError, parse_rate_list, rate_staircase


def _times(spec: ArrivalSpec, rate: float, seed: int, slot: int, of: int, n: int) -> list[float]:
    sched = SlotSchedule(spec, rate, seed, 100.0, slot, of)
    return [sched.next() for _ in range(n)]


@pytest.mark.parametrize("spec", [ArrivalSpec("constant"), ArrivalSpec("poisson"), ArrivalSpec("gamma", 0.3)])
@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_the_slots_of_all_workers_are_exactly_the_global_schedule(spec: ArrivalSpec, workers: int) -> None:
    everyone = _times(spec, 50.0, 7, 0, 1, 700)
    merged = sorted(t for w in range(workers) for t in _times(spec, 50.0, 7, w, workers, 700 // workers))
    assert merged == pytest.approx(everyone[: len(merged)], abs=1e-9)
    assert len(set(merged)) == len(merged)  # no arrival sent twice


def test_constant_arrivals_are_evenly_spaced() -> None:
    t = _times(ArrivalSpec("constant"), 8.0, 0, 0, 1, 100)
    assert {round(b - a, 9) for a, b in itertools.pairwise(t)} == {0.125}


@pytest.mark.parametrize(("spec", "cv"), [(ArrivalSpec("poisson"), 1.0), (ArrivalSpec("gamma", 0.25), 2.0),
                                          (ArrivalSpec("gamma", 4.0), 0.5)])  # fmt: skip
def test_gaps_have_the_requested_mean_and_burstiness(spec: ArrivalSpec, cv: float) -> None:
    gaps = list(_take(global_gaps(spec, 20.0, 3), 20_000))
    assert statistics.fmean(gaps) == pytest.approx(0.05, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.08)


def test_poisson_gaps_pass_ks_against_the_exponential() -> None:
    rng = random.Random(99)
    reference = [rng.expovariate(20.0) for _ in range(20_000)]
    gaps = list(_take(global_gaps(ArrivalSpec("poisson"), 20.0, 5), 2_000))
    assert ks_statistic(gaps, reference) < ks_critical(len(gaps), len(reference))
    # ... and the test can fail: constant gaps are not exponential.
    const = list(_take(global_gaps(ArrivalSpec("constant"), 20.0, 5), 2_000))
    assert ks_statistic(const, reference) > ks_critical(len(const), len(reference))


def test_schedules_are_reproducible_from_the_seed() -> None:
    a = _times(ArrivalSpec("poisson"), 5.0, 11, 1, 3, 50)
    assert a == _times(ArrivalSpec("poisson"), 5.0, 11, 1, 3, 50)
    assert a != _times(ArrivalSpec("poisson"), 5.0, 12, 1, 3, 50)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("constant", ArrivalSpec("constant")), ("Poisson", ArrivalSpec("poisson")),
     ("gamma:0.5", ArrivalSpec("gamma", 0.5))],
)  # fmt: skip
def test_parse_arrival(text: str, expected: ArrivalSpec) -> None:
    assert parse_arrival(text) == expected


@pytest.mark.parametrize("text", ["gamma", "gamma:0", "gamma:-1", "gamma:nan", "uniform", "poisson:2", ""])
def test_bad_arrivals_name_the_option(text: str) -> None:
    with pytest.raises(ArrivalSpecError, match=r"^--arrival: "):
        parse_arrival(text)


def test_rate_lists() -> None:
    assert parse_rate_list("0.5,2") == [0.5, 2.0]
    assert parse_rate_list("1:16:x2") == [1, 2, 4, 8, 16]
    for bad in ("", "0", "-1", "1,x", "4:1", "1:8:x1"):
        with pytest.raises(StepSpecError, match=r"^--rate: "):
            parse_rate_list(bad)
    steps = rate_staircase([1.0, 3.0], 10, 0.2, max_in_flight=32)
    assert [(s.rate_rps, s.concurrency, s.warmup_s) for s in steps] == [(1.0, 32, 2.0), (3.0, 32, 2.0)]


def _take(it, n):
    for _ in range(n):
        yield next(it)


def test_a_warmup_fraction_is_the_seconds_a_person_would_write() -> None:
    # Walkthrough: /tokenload/api/series showed warmup_s 1.2000000000000002 for --warmup 0.2 of 6 s.
    from tokenload.loadgen.steps import staircase

    assert [s.warmup_s for s in staircase([1, 2], 6.0, 0.2)] == [1.2, 1.2]
    assert staircase([1], 6.0, 1.5)[0].warmup_s == 1.5

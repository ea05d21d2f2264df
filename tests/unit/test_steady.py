"""The steady-state check on realistic data: lognormal TTFTs (CV 0.5 to 1.0), Poisson arrivals and
completions, a few hundred requests a step; seeded."""

from __future__ import annotations

import math
import random

from tokenload.metrics.steady import steady_state


def _step(rng: random.Random, n: int, sigma: float, drift: float = 1.0, slowdown: float = 1.0):
    """n requests sent uniformly over [0, 60) s; TTFT lognormal with median 200 ms growing by
    ``drift`` (x) from start to end; completions at a rate falling by ``slowdown`` (x)."""
    sends = sorted(rng.uniform(0, 60) for _ in range(n))
    ttft = [(t, 200 * (1 + (drift - 1) * t / 60) * math.exp(rng.gauss(0, sigma))) for t in sends]
    ends, t = [], 0.0
    while True:
        rate = n / 60 * (1 - (1 - 1 / slowdown) * t / 60)
        t += rng.expovariate(rate)
        if t >= 60:
            break
        ends.append(t)
    return ttft, ends


def _cv(sigma: float) -> float:
    return math.sqrt(math.exp(sigma**2) - 1)


def test_a_steady_step_is_not_called_drifting() -> None:
    rng = random.Random(11)
    for sigma in (0.47, 0.83):  # CV 0.5 and 1.0
        assert 0.49 < _cv(sigma) < 1.01
        alarms = 0
        for _ in range(300):
            ttft, ends = _step(rng, rng.choice([300, 1000, 3000]), sigma)
            alarms += bool(steady_state(ttft, ends, 0.0, 60.0)["drifting"])
        assert alarms <= 6, (sigma, alarms)  # <= 2 % of steady steps


def test_a_building_queue_is_called_drifting() -> None:
    # 600 requests whose TTFT doubles through the step: caught 100 and 90 times of 100 at CV 0.5
    # and 1.0 when this test was written (a median of 200 requests at CV 1.0 is only known to
    # about +-15 %); the bars below leave room for other seeds, not for a test that cannot see.
    rng = random.Random(12)
    for sigma, bar in ((0.47, 95), (0.83, 80)):
        caught = 0
        for _ in range(100):
            ttft, ends = _step(rng, 600, sigma, drift=2.0)  # TTFT doubles through the step
            result = steady_state(ttft, ends, 0.0, 60.0)
            caught += "ttft_p50" in result["drifting"]
            assert result["ttft_p50_ms"][1] > result["ttft_p50_ms"][0] or "ttft_p50" not in result["drifting"]
        assert caught >= bar, (sigma, caught)


def test_falling_completions_are_called_drifting_and_small_moves_are_not() -> None:
    rng = random.Random(13)
    falling = sum(
        "completions" in steady_state(*_step(rng, 1200, 0.6, slowdown=2.0), 0.0, 60.0)["drifting"]
        for _ in range(100)
    )
    assert falling >= 95
    # A 5 % rise of the median, within compare's 10 % tolerance, is never a drift, however many
    # requests show it.
    small = sum(
        bool(steady_state(*_step(rng, 20_000, 0.47, drift=1.08), 0.0, 60.0)["drifting"]) for _ in range(20)
    )
    assert small == 0


def test_too_short_a_part_is_not_judged() -> None:
    assert steady_state([], [], 5.0, 5.0) is None
    empty = steady_state([], [], 0.0, 10.0)
    assert empty is not None and empty["drifting"] == [] and empty["ttft_p50_ms"] == [None, None]


def test_a_first_third_with_no_completions_is_drifting_unless_too_few_end_at_all() -> None:
    # make demo's 256-user step (2026-12-06): 192 users joined at its start, 2.4 s before its
    # measured part, each sending a request that decodes 64 tokens at about 98 ms each after a
    # wait in the queue; none ended in the first 3.2 s third of the measured part, 31 in the last
    # (9.7 req/s). Here: the same burst, queue waits lognormal (median 0.6 s, CV 1.0).
    rng = random.Random(14)
    sends = [rng.uniform(-2.4, -2.3) for _ in range(192)]
    waits = [0.6 * math.exp(rng.gauss(0, 0.83)) for _ in sends]
    ends = [t + w + 64 * 0.098 for t, w in zip(sends, waits, strict=True)]
    ttft = [(t, 1000.0 * w) for t, w in zip(sends, waits, strict=True)]
    result = steady_state(ttft, [e for e in ends if 0.0 <= e < 9.6], 0.0, 9.6)
    assert result["requests_per_s"][0] < 1.0 < result["requests_per_s"][1], result
    assert "completions" in result["drifting"]
    # None in the first third and three in the last: three Poisson counts cannot tell.
    assert steady_state([], [7.0, 8.0, 9.0], 0.0, 9.6)["drifting"] == []
    # Steady long requests, a few ending a third: a first third of none is not a false alarm
    # more often than the check's design allows (2 % here).
    alarms = 0
    for _ in range(500):
        ends, t = [], 0.0
        while (t := t + rng.expovariate(4 / 3.2)) < 9.6:
            ends.append(t)
        alarms += bool(steady_state([], ends, 0.0, 9.6)["drifting"])
    assert alarms <= 10, alarms

"""bench/verdict_accuracy.py --oracle-repeat: the ground truth run again on a fresh draw of the
same workload, and how its agreement with itself is counted."""

from __future__ import annotations

import random
from types import ModuleType


def _result(
    oracle: str,
    again: str,
    verdict: str,
    gains: dict,
    gains_again: dict,
    doubling: tuple[float, float] = (0.0, 0.0),
) -> dict:
    return {
        "oracle": oracle,
        "repeat_oracle": again,
        "verdict": verdict,
        "oracle_gains": gains,
        "repeat_oracle_gains": gains_again,
        "oracle_doubling_gain": doubling[0],
        "repeat_oracle_doubling_gain": doubling[1],
    }


def test_the_repeat_counts_agreement_with_itself_and_the_verdicts_against_each_draw(
    verdict_bench: ModuleType,
) -> None:
    out = verdict_bench.summarize_repeat(
        [
            # Both draws name the cache; their mean gains name bandwidth (1.85 x 1.88 > 1.9 x 1.8).
            _result(
                "kv_capacity",
                "kv_capacity",
                "kv_capacity",
                {"kv_blocks": 0.9, "bandwidth": 0.85},
                {"kv_blocks": 0.8, "bandwidth": 0.88},
            ),
            _result("memory_bandwidth", "kv_capacity", "kv_capacity", {"bandwidth": 0.5}, {"bandwidth": 0.5}),
            # Not saturated on the first draw (no relaxations), saturated on the second; their
            # mean doubling gain, sqrt(1.3 x 1.1) - 1 = 0.196, is under the line: the second's label.
            _result("none", "compute", "memory_bandwidth", {}, {"flops": 0.3}, (0.3, 0.1)),
            _result("compute", "compute", "memory_bandwidth", {"flops": 0.3}, {"flops": 0.3}),
        ]
    )
    assert out["scenarios"] == 4
    assert out["oracle_agrees_with_itself"]["count"] == 2
    assert out["oracle_agrees_with_itself"]["share"] == 0.5
    assert out["oracle_saturated_agrees_with_itself"] == 0.75  # none / compute is the one
    assert out["verdict_vs_first_draw"] == 0.25
    assert out["verdict_vs_fresh_draw"] == 0.5
    # The two draws' means name memory_bandwidth, memory_bandwidth, compute and compute: no verdict.
    assert out["verdict_vs_two_draw_mean"] == 0.0
    assert out["verdict_right_where_the_draws_agree"] == 1
    differ = out["where_the_draws_differ"]
    assert (differ["count"], differ["verdict_is_first"], differ["verdict_is_fresh"]) == (2, 0, 1)
    assert differ["pairs"] == ["memory_bandwidth / kv_capacity", "none / compute"]
    # |log(1.9 / 1.8)| = 0.054 and |log(1.85 / 1.88)| = 0.016 for the first; the others' 0
    # (flops: only where both drew).
    assert out["gain_spread_median"] == {"bandwidth": 0.016, "flops": 0.0, "kv_blocks": 0.054}


def test_a_mean_past_the_line_is_not_saturated_and_a_small_gain_is_unexplained(
    verdict_bench: ModuleType,
) -> None:
    # sqrt(1.4 x 1.2) - 1 = 0.296 >= 0.25: the two draws together say more load still pays.
    assert (
        verdict_bench._two_draw_label(_result("none", "compute", "none", {}, {"flops": 0.3}, (0.4, 0.2)))
        == "none"
    )
    # Saturated on both, and no relaxation gains the oracle's 10 %.
    small = _result("unexplained", "compute", "none", {"flops": 0.05}, {"flops": 0.12})
    assert verdict_bench._two_draw_label(small) == "unexplained"


def test_the_repeat_is_a_fresh_draw_of_the_same_load(verdict_bench: ModuleType) -> None:
    # The grid's scenario 4 of seed 1 (the A40, a closed loop of 5 users, lognormal lengths): the
    # oracle at the same load, its workload drawn with another seed, serves other requests.
    rng = random.Random(1)
    scenarios = [verdict_bench.make_scenario(rng, i) for i in range(5)]
    sc = scenarios[4]
    duration, _, load = verdict_bench._level(sc, 0)
    first = verdict_bench._oracle(sc, duration, load, sc["config"]["seed"])
    same = verdict_bench._oracle(sc, duration, load, sc["config"]["seed"])
    fresh = verdict_bench._oracle(sc, duration, load, sc["config"]["seed"] + verdict_bench.REPEAT_SEED_OFFSET)
    assert same.throughput == first.throughput  # the draw is the seed's: the same seed, the same run
    assert fresh.throughput != first.throughput
    assert abs(fresh.throughput / first.throughput - 1) < 0.5  # the same workload's distributions

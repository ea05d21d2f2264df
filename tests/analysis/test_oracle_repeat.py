"""bench/verdict_accuracy.py --oracle-repeat: the ground truth run again on a fresh draw of the
same workload, and how its agreement with itself is counted."""

from __future__ import annotations

import random
from types import ModuleType


def _result(oracle: str, again: str, verdict: str, gains: dict, gains_again: dict) -> dict:
    return {
        "oracle": oracle,
        "repeat_oracle": again,
        "verdict": verdict,
        "oracle_gains": gains,
        "repeat_oracle_gains": gains_again,
    }


def test_the_repeat_counts_agreement_with_itself_and_the_verdicts_against_each_draw(
    verdict_bench: ModuleType,
) -> None:
    out = verdict_bench.summarize_repeat(
        [
            _result("kv_capacity", "kv_capacity", "kv_capacity", {"kv_blocks": 0.9}, {"kv_blocks": 0.8}),
            _result("memory_bandwidth", "kv_capacity", "kv_capacity", {"bandwidth": 0.5}, {"bandwidth": 0.5}),
            _result("none", "compute", "memory_bandwidth", {}, {"flops": 0.3}),
            _result("compute", "compute", "memory_bandwidth", {"flops": 0.3}, {"flops": 0.3}),
        ]
    )
    assert out["scenarios"] == 4
    assert out["oracle_agrees_with_itself"]["count"] == 2
    assert out["oracle_agrees_with_itself"]["share"] == 0.5
    assert out["oracle_saturated_agrees_with_itself"] == 0.75  # none / compute is the one
    assert out["verdict_vs_first_draw"] == 0.25
    assert out["verdict_vs_fresh_draw"] == 0.5
    assert out["where_the_draws_agree"] == {"count": 2, "verdict_right": 1}
    differ = out["where_the_draws_differ"]
    assert (differ["count"], differ["verdict_is_first"], differ["verdict_is_fresh"]) == (2, 0, 1)
    assert differ["pairs"] == ["memory_bandwidth / kv_capacity", "none / compute"]
    # |log(1.9 / 1.8)| = 0.054 for the cache; the others' spreads are 0 (flops: only where both drew).
    assert out["gain_spread_median"] == {"bandwidth": 0.0, "flops": 0.0, "kv_blocks": 0.054}


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

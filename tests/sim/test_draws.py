"""tokenload.sim.draws: the spread of a plan's draws, per step and figure."""

from __future__ import annotations

import pytest

from tokenload.sim.draws import draw_spread, range_text

pytestmark = pytest.mark.simulated_time


def _step(index: int, tput: float, ttft: float | None, verdict: str) -> dict:
    return {
        "index": index,
        "output_tokens_per_s": tput,
        "ttft_ms": {"p50": ttft, "p95": None},
        "tpot_ms": {},
        "verdict": {"bottleneck": verdict},
    }


def test_least_median_most_per_step_and_the_verdicts_counted() -> None:
    draws = [
        (0, [_step(0, 10.0, 100.0, "none"), _step(1, 30.0, None, "kv_capacity")], {"step": 1}),
        (1, [_step(0, 14.0, 300.0, "none"), _step(1, 20.0, 900.0, "memory_bandwidth")], None),
        (2, [_step(0, 12.0, 150.0, "none"), _step(1, 25.0, 500.0, "kv_capacity")], {"step": 1}),
    ]
    s = draw_spread(draws)
    assert s["count"] == 3 and s["seeds"] == [0, 1, 2]
    first, top = s["steps"]
    assert first["output_tokens_per_s"] == (10.0, 12.0, 14.0)
    assert first["ttft_ms_p50"] == (100.0, 150.0, 300.0)
    assert first["ttft_ms_p95"] is None and first["tpot_ms_p50"] is None  # no draw has them
    assert top["ttft_ms_p50"] == (500.0, 700.0, 900.0)  # over the draws that have it
    assert top["bottleneck"] == {"kv_capacity": 2, "memory_bandwidth": 1}
    assert s["knee_step"] == {"1": 2, "none": 1}
    assert range_text(top["ttft_ms_p50"]) == "500.0-900.0" and range_text(None) == "-"


def test_draws_of_different_sweeps_are_refused() -> None:
    with pytest.raises(ValueError, match="draws of different sweeps"):
        draw_spread([(0, [_step(0, 1.0, 1.0, "none")], None), (1, [], None)])


def _cap(load: float, rps: float) -> dict:
    return {"load": load, "load_unit": "users", "requests_per_s": rps}


def test_capacity_and_replicas_over_the_draws_say_what_carries_every_draw() -> None:
    from tokenload.report.draws import draws_lines
    from tokenload.sim.draws import capacity_spread

    base = {"knee_step": {"none": 3}, "count": 3}
    every = capacity_spread(
        [(_cap(8, 2.0), {"replicas": 5}), (_cap(4, 1.0), {"replicas": 9}), (_cap(8, 2.2), {"replicas": 5})]
    )
    assert every["load"] == (4, 8, 8) and every["replicas"] == (5, 5, 9) and every["no_capacity"] == 0
    lines = draws_lines({**base, "capacity": every})
    assert (
        lines[1]
        == "Capacity per replica over the draws (plan's options): 4-8 users, serving 1.00-2.20 req/s."
    )
    assert lines[2].startswith("Replicas over the draws: 5-9; 9 carry the target in every draw")
    # A draw with no passing step has no capacity, hence no replica count covers every draw.
    some = capacity_spread([(_cap(8, 2.0), {"replicas": 5}), (None, {"error": "no capacity"}), (None, None)])
    assert some["no_capacity"] == 2 and some["no_replicas"] == 2 and some["load"] == (8, 8, 8)
    lines = draws_lines({**base, "capacity": some})
    assert lines[1] == (
        "Capacity per replica over the draws (plan's options): 8 users, serving 2.00 req/s; "
        "in 2 of 3 draws none."
    )
    assert "in 2 of 3 draws no capacity to plan with, so no replica count covers every draw" in lines[2]
    none = capacity_spread([(None, None), (None, None)])
    assert (
        draws_lines({**base, "capacity": none})[1]
        == "Capacity over the draws (plan's options): none in any of the 2 draws."
    )
    assert draws_lines(base) == [
        "Knee over the draws: none in 3 of 3 draws."
    ]  # no SLO, no target: nothing judged

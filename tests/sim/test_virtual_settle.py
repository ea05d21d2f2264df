"""A virtual sweep's steps settle as a run's do (``loadgen/shapes.py``): a step's load goes on
until every request of its measured part has ended, the next step's users spawn then and its
clock starts a shape tick later, and an open-loop step's arrivals stop at its end. Checked on the
engine's own request times (ground truth)."""

from __future__ import annotations

import pytest

from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

A40 = "a40-qwen2.5-7b"


def _tpot_p50(step: dict) -> float:
    return step["tpot_ms"]["p50"]


def test_short_steps_measure_what_long_ones_do() -> None:
    # Found by a new-user walkthrough (bench/RESULTS.md, "A plan's short steps against the
    # sweep's"): with 5 s steps the 16-user step's last requests ran into the 64-user step's 48
    # new prefills, TPOT p50 41.7 ms against 31.1 ms for the same step 30 s long (and for a real
    # 5 s sweep). Its own requests now end before the next step's users arrive.
    workload = VirtualWorkload("128", "64", seed=1)
    short = virtual_sweep(
        A40, None, workload, VirtualSchedule(concurrency=(1, 4, 16, 64), step_duration_s=5.0, warmup=1.0)
    )
    long = virtual_sweep(
        A40, None, workload, VirtualSchedule(concurrency=(1, 4, 16, 64), step_duration_s=30.0, warmup=1.0)
    )
    for s, lg in zip(short.steps, long.steps, strict=True):
        assert _tpot_p50(s) == pytest.approx(_tpot_p50(lg), rel=0.03), (
            s["index"],
            _tpot_p50(s),
            _tpot_p50(lg),
        )


@pytest.mark.parametrize("output", ["64", "lognormal:mean=256,sigma=1.0"])
def test_a_steps_measured_requests_end_before_the_next_step_spawns(output: str) -> None:
    levels = (2, 8, 32)
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("512", output, seed=4),
        VirtualSchedule(concurrency=levels, step_duration_s=10.0, warmup=0.2),
    )
    by_id = {r.request_id: r for r in vs.requests}
    for k, (w, nxt) in enumerate(zip(vs.windows, vs.windows[1:], strict=False)):
        measured = [r for r in vs.records if r["step"] == k and r["phase"] == "measure"]
        assert measured
        last_end = max(by_id[r["request_id"]].token_times_s[-1] for r in measured)
        # The settle is looked at each tick after the end; the next clock starts a tick after.
        assert w.end <= last_end <= nxt.start - 1.0 + 1e-9, (k, w.end, last_end, nxt.start)
        assert nxt.start - 1.0 - last_end <= 1.0 + 1e-9
        assert w.unfinished_at_decision == 0
        # Sent in the settle or the next step's spawn: in no step, as a run's phases tag them.
        between = [r for r in vs.records if w.end <= r["wall_start"] < nxt.start]
        assert between and all(r["step"] is None and r["phase"] is None for r in between)
        # The new users arrive when the settle ends, not before.
        first_new = min(
            by_id[r["request_id"]].arrival_s for r in between if by_id[r["request_id"]].client >= levels[k]
        )
        assert first_new == pytest.approx(nxt.start - 1.0)


def test_an_open_loop_step_sends_nothing_while_it_settles() -> None:
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "lognormal:mean=128,sigma=0.8", seed=2),
        VirtualSchedule(rates=(1.0, 4.0, 8.0), step_duration_s=15.0, warmup=0.25, max_in_flight=4096),
    )
    for w, nxt in zip(vs.windows, vs.windows[1:], strict=False):
        assert nxt.start >= w.end + 2.0 - 1e-9  # at least a tick of settle and a tick of spawn
        assert not [r for r in vs.records if w.end <= r["wall_start"] < nxt.start]


def test_a_settle_bound_cuts_the_wait_and_says_how_many_it_cut() -> None:
    # Requests that live ~30 s, all sent in the measured part (no warm-up), against a 3 s settle
    # bound: the next step starts without them.
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "1024", seed=5),
        VirtualSchedule(concurrency=(4, 8), step_duration_s=10.0, warmup=0.0, settle_timeout_s=3.0),
    )
    first, second = vs.windows
    assert first.unfinished_at_decision > 0
    assert second.start == pytest.approx(first.end + 3.0 + 1.0)


def test_back_to_back_steps_when_settling_is_off() -> None:
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "64", seed=6),
        VirtualSchedule(concurrency=(2, 4), step_duration_s=10.0, settle=False),
    )
    assert [(w.start, w.end) for w in vs.windows] == [(0.0, 10.0), (10.0, 20.0)]
    assert all(r["step"] is not None for r in vs.records)

"""A virtual sweep's steps settle as a run's do (``loadgen/shapes.py``): a step's load goes on
until every request of its measured part has ended, the next step's users spawn then and its
clock starts a shape tick later, and an open-loop step's arrivals stop at its end. Checked on the
engine's own request times (ground truth)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest

from tokenload.sim.profile import load_profile
from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

pytestmark = pytest.mark.simulated_time

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
    for k, (w, nxt) in enumerate(pairwise(vs.windows)):
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
    for w, nxt in pairwise(vs.windows):
        assert nxt.start >= w.end + 2.0 - 1e-9  # at least a tick of settle and a tick of spawn
        assert not [r for r in vs.records if w.end <= r["wall_start"] < nxt.start]


@pytest.mark.parametrize("bound", [3.0, 2.5])
def test_a_settle_bound_cuts_the_wait_at_a_tick_and_says_how_many_it_cut(bound: float) -> None:
    # Requests of ~7.5 s: each user's second one is sent in the measured part (no warm-up) and is
    # still streaming at the end; the settle bound starts the next step without them. The shape
    # looks once a tick: a 2.5 s bound is noticed 3 s after the end.
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "256", seed=5),
        VirtualSchedule(concurrency=(4, 8), step_duration_s=10.0, warmup=0.0, settle_timeout_s=bound),
    )
    first, second = vs.windows
    assert first.unfinished_at_decision == 4
    assert second.start == pytest.approx(first.end + 3.0 + 1.0)


def _first_sends(
    prompt: str, output: str, levels: tuple[int, ...], step_s: float
) -> tuple[Any, dict[int, float]]:
    """A staircase's virtual sweep and when each user sent its first request."""
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload(prompt, output, seed=7),
        VirtualSchedule(concurrency=levels, step_duration_s=step_s),
    )
    first: dict[int, float] = {}
    for r in sorted(vs.requests, key=lambda r: r.arrival_s):
        first.setdefault(r.client, r.arrival_s)
    return vs, first


def test_users_spawn_at_once_before_the_clock_starts() -> None:
    # Locust dispatches floor(rate) users a second at once (locust/dispatch.py); at the shapes'
    # rate a step's users all start together, before its clock, which starts at the next tick.
    # Over 1,000 users, 1,000 a second.
    vs, first_of = _first_sends("128", "64", (16, 64), 5.0)
    assert {first_of[u] for u in range(16)} == {0.0}
    assert vs.windows[0].start == pytest.approx(1.0)
    assert [first_of[u] for u in range(16, 64)] == pytest.approx([vs.windows[1].start - 1.0] * 48)
    assert all(r["step"] is None for r in vs.records if r["wall_start"] < 1.0)
    big, firsts = _first_sends("16", "4", (2500,), 4.0)
    assert sorted(set(firsts.values())) == [0.0, 1.0, 2.0]
    assert big.windows[0].start == pytest.approx(3.0)


def test_going_down_the_clock_waits_for_the_extra_users_to_stop() -> None:
    # 16 users, then 2: the 14 extra users' requests (~7.5 s) end before the 2-user step's clock.
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "256", seed=8),
        VirtualSchedule(concurrency=(16, 2), step_duration_s=10.0),
    )
    second = vs.windows[1]
    extra_ends = [r.token_times_s[-1] for r in vs.requests if r.client >= 2]
    assert max(extra_ends) <= second.start
    assert second.start - max(extra_ends) <= 1.0 + 1e-9
    assert all(r.client < 2 for r in vs.requests if r.arrival_s >= second.start)


def test_an_overloaded_open_loop_step_drops_the_arrivals_no_user_was_free_for() -> None:
    # 8 users for 20 and 40 arrivals a second: most arrivals wait for a free user. At the step's
    # end the pacer drops its schedule (loadgen/pacing.py): none of them is sent after it, and
    # the settle waits only for what was sent.
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "64", seed=9),
        VirtualSchedule(rates=(20.0, 40.0), step_duration_s=10.0, warmup=0.2, max_in_flight=8),
    )
    by_id = {r.request_id: r for r in vs.requests}
    for w in vs.windows:
        mine = [r for r in vs.records if r["step"] == w.index]
        assert mine and all(by_id[r["request_id"]].arrival_s < w.end for r in mine)
        assert w.unfinished_at_decision == 0
        assert w.concurrency is None and w.target_rate_rps is not None
    # A waiting arrival counts in the phase it was sent in.
    queued = [r for r in vs.records if r["send_queued"] and r["step"] == 0]
    assert any(r["phase"] == "measure" and r["wall_start"] < vs.windows[0].measure_start for r in queued)


def test_back_to_back_steps_when_settling_is_off() -> None:
    vs = virtual_sweep(
        A40,
        None,
        VirtualWorkload("256", "64", seed=6),
        VirtualSchedule(concurrency=(2, 4), step_duration_s=10.0, settle=False),
    )
    assert [(w.start, w.end) for w in vs.windows] == [(0.0, 10.0), (10.0, 20.0)]
    assert all(r["step"] is not None for r in vs.records)


def test_a_users_next_request_misses_the_engine_step_that_starts_as_its_last_one_ends() -> None:
    # Against the emulator over loopback (tokenload sweep --concurrency 4,16,64 --step-duration 8
    # --prompt-tokens 128 --output-tokens 64, 2026-12-05), a request reached the server a median
    # 0.74 ms after its user's previous one's last token, so it waited for the engine step that
    # had just begun: TTFT p50 at 16 users 194.4 ms. Sent again at that very instant, the virtual
    # users' requests joined that step: 168.1 ms.
    workload = VirtualWorkload("128", "64", seed=1)

    def ttft_p50(turnaround: float) -> float:
        sch = VirtualSchedule(concurrency=(4, 16, 64), step_duration_s=8.0, client_turnaround_s=(turnaround,))
        vs = virtual_sweep(A40, None, workload, sch)
        by_client: dict[int, list] = {}
        for r in vs.requests:
            by_client.setdefault(r.client, []).append(r)
        for reqs in by_client.values():
            reqs.sort(key=lambda r: r.arrival_s)
            for prev, nxt in pairwise(reqs):
                assert nxt.arrival_s - prev.token_times_s[-1] == pytest.approx(turnaround, abs=1e-9) or (
                    nxt.arrival_s in {w.start - 1.0 for w in vs.windows}  # spawned for a step
                )
        return vs.steps[1]["ttft_ms"]["p50"]

    assert ttft_p50(0.001) == pytest.approx(194.4, rel=0.05)
    assert ttft_p50(0.0) < 0.9 * 194.4


def test_a_requests_step_and_phase_at_the_windows_edges() -> None:
    """One definition (step_and_phase) for the settle's count and the record: windows are
    half-open, a request is its step's by when it was meant to be sent and measured by when it
    was sent, and nothing between a step's end and the next one's start belongs to a step."""
    from tokenload.loadgen.phases import StepWindow
    from tokenload.sim.virtual_sweep import step_and_phase

    windows = [StepWindow(0, 4, None, 10.0, 12.0, 20.0), StepWindow(1, 8, None, 25.0, 27.0, 35.0)]
    assert step_and_phase(windows, 9.99, 9.99) == (None, None)
    assert step_and_phase(windows, 10.0, 10.0) == (0, "warmup")
    assert step_and_phase(windows, 11.0, 12.0) == (0, "measure")  # sent as the warm-up ended
    assert step_and_phase(windows, 19.0, 19.99) == (0, "measure")
    assert step_and_phase(windows, 19.0, 20.0) == (0, None)  # meant in step 0, sent at its end
    assert step_and_phase(windows, 20.0, 20.0) == (None, None)  # the settle: no step
    assert step_and_phase(windows, 24.0, 25.5) == (None, None)  # meant before step 1 began
    assert step_and_phase(windows, 25.0, 25.0) == (1, "warmup")


def test_users_with_equal_requests_do_not_lock_in_phase() -> None:
    # Against tokenload sim over loopback (tokenload sweep --concurrency 2,8 --prompt-tokens 1024
    # --output-tokens 256 --step-duration 30, the A40 profile with bench/twin_sim.py's seed-1
    # perturbation, 2026-12-05): TTFT mean 265.8 ms at 2 users (half the requests near 194 ms,
    # half near 337), 443.7 at 8. With one turnaround value the two virtual users locked in
    # phase, each request meeting the other's prefill: every one 315.7 ms. Drawn from the
    # measured spread (tokenload.sim.turnaround, fitted on this sweep), as the real run.
    from tokenload.sim.calibrate import perturbed_values, with_values
    from tokenload.sim.turnaround import CLIENT_TURNAROUND_S

    base = load_profile("a40-qwen2.5-7b")
    hidden = with_values(base, perturbed_values(base, 1))
    workload = VirtualWorkload("1024", "256")

    def ttft_means(quantiles: tuple[float, ...]) -> list[float]:
        sch = VirtualSchedule(concurrency=(2, 8), step_duration_s=30.0, client_turnaround_s=quantiles)
        vs = virtual_sweep(hidden, None, workload, sch)
        gaps = [
            nxt.arrival_s - prev.token_times_s[-1]
            for reqs in _by_client(vs.requests).values()
            for prev, nxt in pairwise(reqs)
            if nxt.arrival_s - prev.token_times_s[-1] < 0.5  # not a spawn for the next step
        ]
        assert min(gaps) >= quantiles[0] - 1e-12 and max(gaps) <= quantiles[-1] + 1e-12
        return [s["ttft_ms"]["mean"] for s in vs.steps]

    assert ttft_means(CLIENT_TURNAROUND_S) == pytest.approx([265.8, 443.7], rel=0.05)
    assert ttft_means((0.001,))[0] > 1.15 * 265.8


def test_the_turnaround_stream_leaves_prompts_and_arrivals_alone() -> None:
    # Its own random stream: an open loop (no turnaround) is the same whatever the spread, and
    # a closed loop's prompts are the same lengths in the same order.
    rates = VirtualSchedule(rates=(2.0, 4.0), step_duration_s=6.0, warmup=1.0)
    a = virtual_sweep(A40, None, VirtualWorkload("uniform:100-900", "64", seed=3), rates)
    b = virtual_sweep(
        A40,
        None,
        VirtualWorkload("uniform:100-900", "64", seed=3),
        replace(rates, client_turnaround_s=(0.0,)),
    )
    assert a.records == b.records
    users = VirtualSchedule(concurrency=(4,), step_duration_s=6.0, warmup=1.0)
    c, d = (
        virtual_sweep(
            A40, None, VirtualWorkload("uniform:100-900", "64", seed=3), replace(users, client_turnaround_s=q)
        )
        for q in ((0.001,), (0.0005, 0.004))
    )

    def by_submission(vs: Any) -> list[int]:  # request ids count submissions: req-0, req-1, ...
        return [
            r.num_prompt_tokens for r in sorted(vs.requests, key=lambda r: int(r.request_id.split("-")[1]))
        ]

    n = min(len(c.requests), len(d.requests))
    assert n > 10 and by_submission(c)[:n] == by_submission(d)[:n]


def _by_client(requests: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in requests:
        out.setdefault(r.client, []).append(r)
    for reqs in out.values():
        reqs.sort(key=lambda r: r.arrival_s)
    return out


def test_a_turnaround_is_drawn_from_its_quantiles() -> None:
    import random

    from tokenload.sim.turnaround import turnaround

    rng = random.Random(0)
    draws = sorted(turnaround((0.001, 0.002, 0.005), rng) for _ in range(4000))
    assert draws[0] >= 0.001 and draws[-1] <= 0.005
    assert draws[2000] == pytest.approx(0.002, abs=1e-4)  # the middle quantile is the median
    assert turnaround((0.003,), rng) == 0.003
    from tokenload.sim.turnaround import check_quantiles

    # One check for the schedule and plan's --client-turnaround-ms, each naming its own field.
    with pytest.raises(ValueError, match=r"^--x: expected finite quantiles >= 0 \(ms\) in increasing order$"):
        check_quantiles([2.0, 1.0], "--x", "ms")
    with pytest.raises(ValueError, match=r"^--x: expected quantiles"):
        check_quantiles(1.0, "--x")
    assert check_quantiles([0, 1], "--x") == (0.0, 1.0)
    for bad in ((0.002, 0.001), (), (float("nan"),), (0.001, float("inf")), (-0.001,), 0.001):
        with pytest.raises(ValueError, match="client turnaround"):
            VirtualSchedule(concurrency=(1,), client_turnaround_s=bad)  # type: ignore[arg-type]
    assert VirtualSchedule(concurrency=(1,), client_turnaround_s=[0.001, 0.002]).client_turnaround_s == (
        0.001,
        0.002,
    )  # type: ignore[arg-type]

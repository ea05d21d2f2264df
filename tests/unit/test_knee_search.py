"""The knee search's choice of steps (KneeShape.next_step), driven by a saturation oracle."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tokenload.loadgen.shapes import KneeShape


class Knee(KneeShape):
    pass


def _search(saturated_from: int | None, **opts: float) -> tuple[list[tuple[int, float]], Knee]:
    shape = Knee()
    defaults = {"step_duration": 10.0, "warmup": 0.2, "knee_start": 1, "knee_max": 1024,
                "knee_factor": 4.0, "knee_resolution": 1.5, "probe_duration": None}  # fmt: skip
    shape.runner = SimpleNamespace(
        environment=SimpleNamespace(parsed_options=SimpleNamespace(**defaults | opts))
    )
    ran: list[tuple[int, float]] = []
    steps: list[dict] = []
    for _ in range(50):
        step = shape.next_step(len(ran), steps)
        if step is None:
            return ran, shape
        ran.append((step.concurrency, step.duration_s))
        sat = saturated_from is not None and step.concurrency >= saturated_from
        steps.append(
            {"index": step.index, "concurrency": step.concurrency, "measured_s": step.duration_s,
             "verdict": {"bottleneck": "compute" if sat else "none"}}
        )  # fmt: skip
    raise AssertionError("the search did not end")


def test_climbs_with_short_probes_then_bisects_with_full_steps() -> None:
    ran, shape = _search(40)
    assert ran == [(1, 5.0), (4, 5.0), (16, 5.0), (64, 5.0), (32, 10.0), (45, 10.0)]
    r = shape.result()
    assert (r["outcome"], r["last_unsaturated_concurrency"], r["first_saturated_concurrency"]) == (
        "found",
        32,
        45,
    )
    assert 45 / 32 <= 1.5


@pytest.mark.parametrize("knee", [2, 3, 5, 17, 100, 700])
def test_the_bracket_always_holds_the_knee_to_the_resolution(knee: int) -> None:
    _, shape = _search(knee, knee_resolution=1.25)
    lo, hi = shape.lo, shape.hi
    assert lo is not None and hi is not None and lo < knee <= hi
    assert hi / lo <= 1.25 or hi - lo <= 1


def test_ends_unsaturated_at_the_cap_and_saturated_at_the_start() -> None:
    ran, shape = _search(None, knee_max=100)
    assert [c for c, _ in ran] == [1, 4, 16, 64, 100] and shape.outcome == "not_saturated"
    ran, shape = _search(1)
    assert [c for c, _ in ran] == [1] and shape.outcome == "saturated_at_start"
    assert "--knee-start" in (shape.stop_reason or "")


def test_a_client_bound_step_stops_the_search() -> None:
    shape = Knee()
    shape.runner = SimpleNamespace(environment=SimpleNamespace(parsed_options=SimpleNamespace()))
    step = shape.next_step(0, [])
    assert step is not None and step.concurrency == 1
    assert shape.next_step(1, [{"concurrency": 1, "verdict": {"bottleneck": "client"}}]) is None
    assert shape.outcome == "client_bound" and "add workers" in (shape.stop_reason or "")


def test_a_step_that_could_not_be_judged_stops_the_search_and_says_why() -> None:
    # It was taken as saturated (any verdict but "none" set the upper bound), so a lost worker
    # or a step that measured nothing bracketed the knee.
    shape = Knee()
    shape.runner = SimpleNamespace(environment=SimpleNamespace(parsed_options=SimpleNamespace()))
    assert shape.next_step(0, []) is not None
    rule = "a worker died during the step: its load was short; not judged"
    verdict = {"bottleneck": "unknown", "saturated": False, "evidence": [{"metric": "flag", "rule": rule}]}
    assert shape.next_step(1, [{"concurrency": 1, "flags": ["worker_lost"], "verdict": verdict}]) is None
    assert (shape.outcome, shape.hi, shape.lo) == ("undecided", None, None)
    assert shape.stop_reason == f"the step at 1 user could not be judged ({rule})"
    assert shape.result()["probes"][0]["flags"] == ["worker_lost"]
    # Saturated without a resource named is still saturated: it bounds the bracket.
    shape = Knee()
    shape.runner = SimpleNamespace(environment=SimpleNamespace(parsed_options=SimpleNamespace()))
    shape.next_step(0, [])
    calm = {"concurrency": 1, "verdict": {"bottleneck": "none"}}
    shape.next_step(1, [calm])
    shape.next_step(2, [calm, {"concurrency": 4, "verdict": {"bottleneck": "unknown", "saturated": True}}])
    assert (shape.lo, shape.hi) == (1, 4)


def test_a_step_that_changes_an_earlier_verdict_moves_the_bracket() -> None:
    # An e2e knee search (tests/sweep/test_knee.py) bracketed (3, 4) on the verdicts each step got
    # when it ended, while summary.json, judging every step together, found 4 unsaturated next to
    # 3 (a step is judged against the load below it): the search and the report disagreed. Each
    # decision now takes the bracket from every step's current verdict, as the report's knee does.
    shape = Knee()
    opts = {"step_duration": 8.0, "warmup": 0.2, "knee_start": 1, "knee_max": 64, "knee_factor": 2.0,
            "knee_resolution": 1.5, "probe_duration": None}  # fmt: skip
    shape.runner = SimpleNamespace(environment=SimpleNamespace(parsed_options=SimpleNamespace(**opts)))

    def step(c: int, bottleneck: str) -> dict:
        return {"concurrency": c, "verdict": {"bottleneck": bottleneck}}

    assert shape.next_step(0, []).concurrency == 1
    assert shape.next_step(1, [step(1, "none")]).concurrency == 2
    assert shape.next_step(2, [step(1, "none"), step(2, "none")]).concurrency == 4
    nxt = shape.next_step(3, [step(1, "none"), step(2, "none"), step(4, "memory_bandwidth")])
    assert (nxt.concurrency, nxt.duration_s, shape.lo, shape.hi) == (3, 8.0, 2, 4)  # bisecting: a full step
    # 3 is unsaturated, and judged again beside it 4 is too: no bracket left, so the climb goes on
    # from 4 with a probe (half a step), not from 3.
    again = [step(1, "none"), step(2, "none"), step(4, "none"), step(3, "none")]
    nxt = shape.next_step(4, again)
    assert (nxt.concurrency, nxt.duration_s, shape.lo, shape.hi) == (8, 4.0, 4, None)
    assert shape.next_step(5, [*again, step(8, "compute")]).concurrency == 6
    assert (shape.lo, shape.hi) == (4, 8)
    assert shape.result()["probes"][-1]["bracket"] == [4, 8]
    # A saturated step that the next higher load contradicts is no knee (find_knee's rule).
    noisy = [step(1, "none"), step(2, "compute"), step(4, "none")]
    assert shape.next_step(3, noisy).concurrency == 8 and (shape.lo, shape.hi) == (4, None)


def test_the_recorded_options_keep_no_url_credentials() -> None:
    # Review: the test of redact() alone would pass with _record_result not calling it.
    class Recorded(KneeShape):
        ctx = SimpleNamespace(plan=SimpleNamespace(search=None))  # type: ignore[assignment]

    shape = Recorded()
    opts = SimpleNamespace(metrics_url=["http://u:pw@10.0.0.6:8000/metrics"], knee_max=64)
    shape.runner = SimpleNamespace(environment=SimpleNamespace(parsed_options=opts))
    shape._record_result()
    argv = shape.ctx.plan.search["argv"]
    assert argv == ["--metrics-url", "http://***@10.0.0.6:8000/metrics", "--knee-max", "64"], argv

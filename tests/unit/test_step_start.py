"""A step's clock starts when Locust says its users all run (its ``spawning_complete`` event), not
at the shape's next once-a-second tick: StepShape driven by hand, with a stand-in runner."""

from __future__ import annotations

from locust.event import Events

import time
from types import SimpleNamespace
from typing import Any

import gevent

from tokenload.loadgen.shapes import StaircaseShape


def _shape(concurrency: str) -> tuple[Any, SimpleNamespace, list[tuple[str, int, float]]]:
    calls: list[tuple[str, int, float]] = []
    ctx = SimpleNamespace(
        plan=SimpleNamespace(planned=None, search=None),
        prepare_step=lambda step: None,
        begin_step=lambda step, now: calls.append(("begin", step.index, now)),
        measure_step=lambda step, now: calls.append(("measure", step.index, now)),
        end_step=lambda step, now, drain=False: calls.append(("end", step.index, now)),
        reannounce_if_workers_changed=lambda: None,
        request_reports=lambda: None,
    )

    class Shape(StaircaseShape):
        pass

    Shape.ctx = ctx  # type: ignore[assignment]  # in place of the run's context (plugin.py)
    opts = SimpleNamespace(concurrency=concurrency, step_duration=30.0, warmup=0.0)
    runner = SimpleNamespace(user_count=0, environment=SimpleNamespace(parsed_options=opts, events=Events()))
    shape = Shape()
    shape.runner = runner
    return shape, runner, calls


def test_the_clock_starts_when_the_users_run_not_at_the_next_tick() -> None:
    shape, runner, calls = _shape("2")
    ticked = time.time()
    assert shape.tick() == (2, 10.0)  # Locust starts them after the tick returns
    assert shape.reached_at is None and calls == []
    gevent.sleep(0.2)  # Locust spawns them
    runner.user_count = 2
    spawned = time.time()
    runner.environment.events.spawning_complete.fire(user_count=2)
    gevent.sleep(0.05)
    # Started in the event's greenlet, 0.8 s before the next tick would have.
    assert shape.reached_at is not None and spawned <= shape.reached_at < spawned + 0.05
    assert [c[:2] for c in calls] == [("begin", 0), ("measure", 0)]  # --warmup 0: measured at once
    assert calls[0][2] == shape.reached_at and ticked + 0.2 < shape.reached_at
    # It gives the machine back before the next tick, which goes on with the step.
    gevent.sleep(max(0.0, ticked + 1.0 - time.time()))
    assert shape.tick() == (2, 10.0) and shape.reached_at == calls[0][2]


def test_users_that_run_during_a_tick_are_the_ticks_and_an_event_between_steps_does_nothing() -> None:
    shape, runner, calls = _shape("2")
    assert shape.tick() == (2, 10.0)
    runner.user_count = 2
    busy = gevent.spawn(shape.tick)  # the tick sees them itself and holds the machine
    gevent.sleep(0.05)
    runner.environment.events.spawning_complete.fire(user_count=2)
    gevent.sleep(0.05)
    assert [c[:2] for c in calls] == [("begin", 0), ("measure", 0)]  # once, not twice
    busy.kill()
    # Users changed by anyone else mid-step (a worker's loss restarts the ramp): the step goes on.
    runner.environment.events.spawning_complete.fire(user_count=2)
    gevent.sleep(0.05)
    assert [c[:2] for c in calls] == [("begin", 0), ("measure", 0)]

"""The live engine loop keeps the model's clock: a busy engine's next step starts when the last
one ended in model time, however long the emulator's own writes took, and a request that arrives
after a step's start waits for a later step (as it would in vLLM, and as the virtual driver
already has it)."""

from __future__ import annotations

import itertools
import time

import gevent
import pytest

from tokenload.sim.engine import EngineConfig, RequestOutput, SimEngine
from tokenload.sim.loop import EngineLoop
from tokenload.sim.virtual import RequestSpec, VirtualDriver

PROFILE = "h100-llama3.1-8b"


class _SlowSink:
    """Takes every token by ``deliver`` and blocks the loop for ``work_s`` each time: an emulator
    whose writes and bookkeeping take longer than the old 5 ms catch-up allowed."""

    def __init__(self, work_s: float, stall_at: int | None = None) -> None:
        self.work_s = work_s
        self.stall_at = stall_at
        self.dues: list[float] = []
        self.done = False

    def prepare(self, out: RequestOutput) -> tuple:
        return (None, out, self)

    def deliver(self, out: RequestOutput, due_s: float) -> None:
        self.dues.append(due_s)
        self.done = out.finished
        stall = len(self.dues) == self.stall_at
        time.sleep(0.3 if stall else self.work_s)  # blocking on purpose: the loop's own time


def test_slow_writes_do_not_stretch_the_model_timeline() -> None:
    spec = RequestSpec([1] * 32, max_tokens=12, ignore_eos=True)
    virtual = VirtualDriver(SimEngine(PROFILE, EngineConfig()))
    virtual.submit(0.0, spec)
    expected = virtual.run().requests[0].token_times_s
    gaps = [b - a for a, b in itertools.pairwise(expected)]
    assert min(gaps) < 0.008  # a decode step shorter than the loop's work below: the old code stretched it

    loop = EngineLoop(SimEngine(PROFILE, EngineConfig()))
    sink = _SlowSink(work_s=0.009)
    loop.start()
    try:
        arrival = time.perf_counter()
        loop.submit(
            "r",
            sink,
            arrival_s=arrival,
            prompt_token_ids=spec.prompt_token_ids,
            max_tokens=12,
            ignore_eos=True,
        )
        deadline = time.monotonic() + 10
        while not sink.done and time.monotonic() < deadline:
            gevent.sleep(0.005)
    finally:
        loop.stop()
    assert sink.done and len(sink.dues) == 12
    # Decode steps back to back in model time: each token exactly one modelled step after the last
    # (the 9 ms of work per token made the loop late, which lateness shows, not the timeline).
    live_gaps = [b - a for a, b in itertools.pairwise(sink.dues)]
    assert live_gaps == pytest.approx(gaps, abs=1e-9)
    assert loop.clock_restarts == 0


def test_a_request_arriving_after_a_step_starts_waits_for_the_next() -> None:
    engine = SimEngine(PROFILE, EngineConfig())
    engine.add_request("a", [1] * 16, max_tokens=5, ignore_eos=True, arrival_time_s=0.0)
    plan = engine.schedule(0.0)
    assert plan is not None
    engine.complete(plan, plan.duration_s)
    # The loop was slow (its writes took 2 ms): b arrived before the loop planned the next step,
    # but after that step starts in model time, when the last one ended: b is not in it, and not
    # yet seen by the scheduler.
    engine.add_request("b", [2] * 16, max_tokens=5, ignore_eos=True, arrival_time_s=plan.duration_s + 0.001)
    assert engine.next_start(plan.duration_s) == plan.duration_s  # a is still running
    nxt = engine.schedule(plan.duration_s)
    assert nxt is not None and nxt.num_prefill_tokens == 0 and nxt.num_decode_tokens == 1
    assert engine.num_waiting == 1 and engine.num_waiting_seen == 0
    engine.complete(nxt, plan.duration_s + nxt.duration_s)
    third = engine.schedule(plan.duration_s + nxt.duration_s)
    assert third is not None and third.num_prefill_tokens == 16
    times = engine.request_times("b")
    assert times is not None and times.first_scheduled_s is not None
    assert times.first_scheduled_s >= times.arrival_s  # never scheduled before it arrived


def test_an_idle_engine_starts_when_the_first_request_arrived() -> None:
    engine = SimEngine(PROFILE, EngineConfig())
    assert engine.next_start(None) is None and engine.next_start(1.0) is None
    engine.add_request("a", [1] * 16, max_tokens=1, arrival_time_s=2.0)
    engine.add_request("b", [1] * 16, max_tokens=1, arrival_time_s=2.5)
    # Idle since 1.0 (or since ever): the step starts at a's arrival, not when the loop noticed.
    assert engine.next_start(1.0) == 2.0 and engine.next_start(None) == 2.0
    assert engine.schedule(1.0) is None  # nothing had arrived by then
    plan = engine.schedule(2.0)
    assert plan is not None and plan.num_prefill_tokens == 16  # b came later: the next step
    engine.complete(plan, 2.0 + plan.duration_s)
    # a finished and b had arrived before that step ended: b starts right at its end.
    assert engine.next_start(2.0 + plan.duration_s) == max(2.5, 2.0 + plan.duration_s)


def test_the_loop_dates_an_idle_start_at_the_arrival() -> None:
    # However late the loop gets to a request (here it was busy for 20 ms), the first step of an
    # idle engine starts at the request's arrival: the token is due a prefill after it.
    engine = SimEngine(PROFILE, EngineConfig())
    loop = EngineLoop(engine)
    sink = _SlowSink(work_s=0.0)
    virtual = VirtualDriver(SimEngine(PROFILE, EngineConfig()))
    virtual.submit(0.0, RequestSpec([1] * 64, max_tokens=1, ignore_eos=True))
    ttft = virtual.run().requests[0].ttft_s
    loop.start()
    try:
        arrival = time.perf_counter()
        time.sleep(0.02)
        loop.submit("r", sink, arrival_s=arrival, prompt_token_ids=[1] * 64, max_tokens=1, ignore_eos=True)
        deadline = time.monotonic() + 10
        while not sink.done and time.monotonic() < deadline:
            gevent.sleep(0.005)
    finally:
        loop.stop()
    assert sink.dues == [pytest.approx(arrival + ttft, abs=1e-9)]


def test_a_loop_stalled_far_behind_restarts_the_models_clock() -> None:
    # Catching up on a 300 ms stall would run a burst of early steps; past 250 ms behind, the
    # timeline restarts from now instead, and /sim/stats counts it.
    loop = EngineLoop(SimEngine(PROFILE, EngineConfig()))
    sink = _SlowSink(work_s=0.0, stall_at=3)
    loop.start()
    try:
        loop.submit("r", sink, prompt_token_ids=[1] * 32, max_tokens=6, ignore_eos=True)
        deadline = time.monotonic() + 10
        while not sink.done and time.monotonic() < deadline:
            gevent.sleep(0.005)
    finally:
        loop.stop()
    assert sink.done and loop.clock_restarts == 1
    assert sink.dues[3] - sink.dues[2] > 0.3  # the stall shows in the timeline once

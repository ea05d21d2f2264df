"""The emulator's engine loop on gevent: plan a step, sleep for its modelled duration, hand each
request its new tokens with the time the engine produced them.

The step's end time is computed from the plan, not read after the sleep, so the engine's clock
follows the model exactly; how late the bytes actually leave is measured per token
(``lateness``), which is how ``bench/sim_capacity.py`` shows the emulator is never what limits a
test.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import gevent
from gevent.event import Event

from tokenload.metrics.histogram import LogHistogram
from tokenload.sim.engine import RequestOutput, SimEngine

__all__ = ["EngineLoop", "OutputSink"]


class OutputSink(Protocol):
    """Receives a request's outputs inside the loop greenlet: ``prepare`` just before the step's
    end (format, no I/O), ``deliver`` at the step's end. Neither may block: write what the
    socket takes now, queue the rest."""

    def prepare(self, out: RequestOutput) -> Any: ...

    def deliver(self, item: Any, due_s: float) -> None: ...


#: A step that starts later than this after the previous one ended is an idle gap, not jitter.
_CATCH_UP_S = 0.005
#: The last stretch of every step is waited out by yielding rather than by a timer.
_SPIN_S = 0.0015
#: The longest single timer sleep while waiting for a step's end.
_MAX_SLEEP_S = 0.005


class EngineLoop:
    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self._wake = Event()
        self._sinks: dict[str, OutputSink] = {}
        #: ms between the engine's scheduled token time and the start of its write.
        self.lateness_ms = LogHistogram()
        self.steps = 0
        #: Smoothed CPU time of completing a step and formatting its chunks, done ahead of ``due``.
        self._prep_s = 0.0
        self._sent: list[float] = []
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill()

    def submit(self, request_id: str, sink: OutputSink, arrival_s: float | None = None, **kw: Any) -> None:
        """Add a request that reached the server at ``arrival_s`` (perf_counter; default now);
        its outputs go to ``sink.on_output(out, due_s)``."""
        arrival = time.perf_counter() if arrival_s is None else arrival_s
        self.engine.add_request(request_id, arrival_time_s=arrival, **kw)
        self._sinks[request_id] = sink
        self._wake.set()

    def abort(self, request_id: str) -> None:
        if self._sinks.pop(request_id, None) is not None:
            self.engine.abort(request_id)

    def note_sent(self, due_s: float, sent_s: float) -> None:
        # Only remembered here: folding into the histogram waits until the step's writes are out.
        self._sent.append(sent_s - due_s)

    def _fold_lateness(self) -> None:
        add = self.lateness_ms.add
        for late in self._sent:
            add(late * 1000.0 if late > 0 else 0.0)
        self._sent.clear()

    def _run(self) -> None:
        engine = self.engine
        clock = time.perf_counter
        prev_due = None
        while True:
            now = clock()
            # Back-to-back steps start when the previous one ended in model time: timer and
            # hand-off jitter (sub-millisecond) must not accumulate into every step.
            if prev_due is not None and now - prev_due < _CATCH_UP_S:
                now = prev_due
            plan = engine.schedule(now)
            if plan is None:
                prev_due = None
                self._wake.clear()
                self._wake.wait()
                continue
            due = prev_due = now + plan.duration_s
            # The step's outputs are fixed by its plan, so they are computed and formatted
            # before the step's end (the engine's clock still says ``due``); at ``due`` only the
            # writes remain. libev's timers fire up to ~1 ms late: sleep to just before that,
            # then yield in a tight loop (still serving I/O) so tokens leave on time.
            # Sleep in short slices: a timer's clock may run at a slightly different rate than
            # perf_counter (a VM's clock being slewed: 2 % seen here, 35 ms on a 1.75 s prefill),
            # and a slice bounds that error to a fraction of a millisecond.
            while (delay := due - clock() - self._prep_s) > _SPIN_S:
                gevent.sleep(min(delay - _SPIN_S, _MAX_SLEEP_S))
            t_prep = clock()
            outputs: list[RequestOutput] = engine.complete(plan, due)
            self.steps += 1
            sinks = self._sinks
            ready = []
            for out in outputs:
                sink = sinks.get(out.request_id)
                if sink is not None:
                    if out.finished:
                        del sinks[out.request_id]
                    ready.append((sink, sink.prepare(out)))
            self._prep_s = 0.8 * self._prep_s + 0.2 * (clock() - t_prep)
            while clock() < due:
                gevent.sleep(0)
            # Hand tokens out before planning the next step: this is where lateness is made.
            for sink, item in ready:
                sink.deliver(item, due)
            self._fold_lateness()

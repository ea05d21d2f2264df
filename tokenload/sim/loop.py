"""The emulator's engine loop on gevent: plan a step, sleep for its modelled duration, hand each
request its new tokens with the time the engine produced them.

The step's end time is computed from the plan, not read after the sleep, so the engine's clock
follows the model exactly; how late the bytes actually leave is measured per token
(``lateness``), which is how ``bench/sim_capacity.py`` shows the emulator is never what limits a
test.

At 1,000 streams a step ends with 1,000 socket writes, one after another, so a token's lateness
is mostly the writes queued before it: the step's writes run in one tight loop (a bare send per
stream, no per-token Python calls), bookkeeping and folding lateness wait until they are out,
and the cyclic GC runs only while the loop has time to spare before the next step's end.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import gevent
from gevent.event import Event

from tokenload.metrics.histogram import LogHistogram
from tokenload.sim.engine import RequestOutput, SimEngine

__all__ = ["EngineLoop", "OutputSink", "Write"]

#: What a sink asks the loop to do at the step's end: ``(send, data, sink)`` to have the loop call
#: ``send(data)`` itself (then ``sink.written(t)``, or ``sink.short_write`` if the socket took less
#: than all of it), or ``(None, item, sink)`` to have it call ``sink.deliver(item, due_s)``.
Write = tuple[Callable[[bytes], int] | None, Any, "OutputSink"]


class OutputSink(Protocol):
    """Receives a request's outputs inside the loop greenlet: ``prepare`` just before the step's
    end (format, no I/O), then the write it returns at the step's end. Nothing may block: write
    what the socket takes now, queue the rest."""

    def prepare(self, out: RequestOutput) -> Write | None: ...

    def deliver(self, item: Any, due_s: float) -> None: ...

    def written(self, sent_s: float) -> None:
        """The loop's ``send(data)`` took all of ``data``; its write began at ``sent_s``."""

    def short_write(self, data: bytes, result: int | OSError, sent_s: float, due_s: float) -> None:
        """The loop's ``send(data)`` took only ``result`` bytes, or raised ``result``."""


#: How far behind the model's clock the loop may fall (a stalled host) before that clock restarts
#: from now: up to this, the steps that follow run early until the loop has caught up.
_MAX_BEHIND_S = 0.25
#: The last stretch of every step, after preparing its outputs, is waited out by spinning
#: rather than by a timer: a timer fires up to ~1 ms late.
_SPIN_S = 0.0015
#: The longest single timer sleep while waiting for a step's end, in ms.
_MAX_SLEEP_MS = 5
#: libev rounds a timer up to whole milliseconds (at least one) and fires it about 0.1 ms after
#: that (0.25 ms at the 90th percentile on a busy 2-core VM): ``_sleep_until`` asks for the whole
#: milliseconds that end this long before its target.
_TIMER_LATE_S = 0.00025
#: Preparation that ended long before the step's end sleeps again, to this long before it.
_WAKE_BEFORE_S = 0.0005
#: How many of the last preparations the lead time before a step's end is the slowest of.
_PREP_WINDOW = 32


class EngineLoop:
    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self._wake = Event()
        self._sinks: dict[str, OutputSink] = {}
        #: ms between the engine's scheduled token time and the start of its write.
        self.lateness_ms = LogHistogram()
        self.steps = 0
        #: Modelled time of the steps run (s): over a busy stretch, real time / this is 1.0.
        self.model_s = 0.0
        #: Times the loop fell more than ``_MAX_BEHIND_S`` behind the model's clock and restarted it.
        self.clock_restarts = 0
        #: Wall time of the last preparations (completing a step, formatting its chunks), which
        #: are done ahead of ``due``; the slowest sets how far ahead.
        self._prep_s: deque[float] = deque([0.0], maxlen=_PREP_WINDOW)
        self._prep_max_s = 0.0
        self._sent: list[float] = []
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill()

    def submit(self, request_id: str, sink: OutputSink, arrival_s: float | None = None, **kw: Any) -> None:
        """Add a request that reached the server at ``arrival_s`` (perf_counter; default now);
        its outputs go to ``sink`` (see ``OutputSink``)."""
        arrival = time.perf_counter() if arrival_s is None else arrival_s
        self.engine.add_request(request_id, arrival_time_s=arrival, **kw)
        self._sinks[request_id] = sink
        self._wake.set()

    def abort(self, request_id: str) -> None:
        if self._sinks.pop(request_id, None) is not None:
            self.engine.abort(request_id)

    def note_sent(self, due_s: float, sent_s: float) -> None:
        """A write a sink made itself (``deliver``, a backlog) began at ``sent_s``."""
        # Only remembered here: folding into the histogram waits until the step's writes are out.
        self._sent.append(sent_s - due_s)

    def _fold_lateness(self) -> None:
        add = self.lateness_ms.add
        for late in self._sent:
            add(late * 1000.0 if late > 0 else 0.0)
        self._sent.clear()

    def _run(self) -> None:
        # While requests run, the cyclic GC runs only where it delays nothing (``_collect``): a
        # collection costs milliseconds with thousands of live requests, and would otherwise
        # land on token send times or stretch the engine's clock.
        gc_enabled = gc.isenabled()
        try:
            self._steps(gc_enabled)
        finally:
            if gc_enabled:
                gc.enable()

    def _steps(self, gc_enabled: bool) -> None:
        engine = self.engine
        clock = time.perf_counter
        prev_due = None
        while True:
            now = clock()
            # The engine's clock is the model's: a busy engine starts its next step when the last
            # one ended, however long this loop's writes and bookkeeping took (milliseconds at
            # 1,000 streams), and an idle one when the first request arrived (its kernel receive
            # stamp), however long this process took to wake and parse it. The step takes what had
            # arrived by then; later arrivals wait for the next one, as in vLLM. What the loop's
            # own delays cost shows as token lateness, never as a slower GPU.
            start = engine.next_start(prev_due)
            if start is not None and now - start > _MAX_BEHIND_S:
                self.clock_restarts += 1
                start = now
            plan = engine.schedule(start) if start is not None else None
            if plan is None:
                prev_due = None
                if gc_enabled:
                    gc.enable()
                self._wake.clear()
                self._wake.wait()
                gc.disable()
                continue
            gc.disable()
            due = prev_due = start + plan.duration_s
            self.model_s += plan.duration_s
            if gc_enabled:
                _collect()
            # The step's outputs are fixed by its plan, so they are computed and formatted
            # before the step's end (the engine's clock still says ``due``); at ``due`` only the
            # writes remain. Preparing takes milliseconds at 1,000 streams and varies: it starts
            # as early as the slowest of the recent ones needed.
            # Sleep in short slices: a timer's clock may run at a slightly different rate than
            # perf_counter (a VM's clock being slewed: 2 % seen here, 35 ms on a 1.75 s prefill),
            # and a slice bounds that error to a fraction of a millisecond.
            while (delay := due - clock() - self._prep_max_s) > _SPIN_S:
                gevent.sleep(min(delay - _SPIN_S, _MAX_SLEEP_MS / 1000.0))
            t_prep = clock()
            outputs: list[RequestOutput] = engine.complete(plan, due)
            self.steps += 1
            sinks = self._sinks
            writes: list[Write] = []
            for out in outputs:
                sink = sinks.get(out.request_id)
                if sink is not None:
                    if out.finished:
                        del sinks[out.request_id]
                    write = sink.prepare(out)
                    if write is not None:
                        writes.append(write)
            self._prep_s.append(clock() - t_prep)
            self._prep_max_s = max(self._prep_s)
            # Then spin so tokens leave on time. When this preparation was much quicker than the
            # slowest, first sleep again (if for 2 ms at least: each wake-up is a chance for a
            # busy machine to hand the core back late). The spin does not yield: another
            # greenlet (a request being parsed) could run past ``due``; a request waiting for
            # these moments loses nothing, its arrival being the kernel's receive stamp.
            _sleep_until(due - _WAKE_BEFORE_S, min_ms=2)
            while clock() < due:
                pass
            # Hand tokens out before planning the next step: this is where lateness is made.
            sent_s = self._write_all(writes, due)
            self._finish_writes(writes, sent_s, due)
            self._fold_lateness()

    @staticmethod
    def _write_all(writes: list[Write], due: float) -> list[float | None]:
        """Make the step's writes, in order; returns each one's start time where the loop wrote
        all of it itself (None where a sink did, or the socket took less)."""
        clock = time.perf_counter
        sent_s: list[float | None] = []
        append = sent_s.append
        for send, data, sink in writes:
            if send is None:
                sink.deliver(data, due)
                append(None)
                continue
            t = clock()
            try:
                n = send(data)
            except OSError as exc:  # BlockingIOError (a full socket) included
                sink.short_write(data, exc, t, due)
                append(None)
                continue
            if n == len(data):
                append(t)
            else:
                sink.short_write(data, n, t, due)
                append(None)
        return sent_s

    def _finish_writes(self, writes: list[Write], sent_s: list[float | None], due: float) -> None:
        add = self.lateness_ms.add
        for (_, _, sink), t in zip(writes, sent_s, strict=True):
            if t is not None:
                sink.written(t)
                late = t - due
                add(late * 1000.0 if late > 0 else 0.0)


def _collect() -> None:
    """What the cyclic GC would have done by now, as it would have chosen the generation; called
    with automatic collection off, where a pause delays nothing (before sleeping until a step's
    end). A full collection skips CPython's extra condition (long-lived objects up by 25 %)."""
    c0, c1, c2 = gc.get_count()
    t0, t1, t2 = gc.get_threshold()
    if t0 and c0 > t0:
        gc.collect(2 if c2 > t2 else 1 if c1 > t1 else 0)


def _sleep_until(t: float, min_ms: int = 1) -> None:
    """Sleep on gevent timers until shortly before perf_counter ``t``, not after it (but for the
    OS scheduler): as many whole milliseconds as end by then (see ``_TIMER_LATE_S``), if at least
    ``min_ms``, in slices of at most ``_MAX_SLEEP_MS``."""
    clock = time.perf_counter
    while (ms := int((t - clock() - _TIMER_LATE_S) * 1000.0)) >= min_ms:
        gevent.sleep(min(ms, _MAX_SLEEP_MS) / 1000.0)

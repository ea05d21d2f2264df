"""Open-loop pacing in one process: hands users the intended send time of their next request.

In a rate step the master announces the step's schedule (rate, process, seed, start time ``t0``
on the master's clock) and gives each worker its slot (``slot`` of ``of``); every process then
walks its share of the one global schedule (see arrivals.py). A user asks :meth:`Pacer.acquire`
for its next send time and sleeps until then. When every user is busy, arrivals fall due with
no one to send them: the next free user takes the oldest one at once, and the wait counts as
*send lag* (``t_send - t_intended``), which is part of the latency tokenload reports (so
coordinated omission is counted, not hidden). Lag that arrives while a user *was* waiting for
its slot is the client's own lateness (a busy CPU, a stalled event loop): ``client_bound``.

Closed-loop steps (concurrency) never touch the pacer: ``acquire`` returns None at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gevent.event import Event

from tokenload.loadgen.arrivals import ArrivalSpec, SlotSchedule
from tokenload.workload.trace import mean_rate

__all__ = ["OPEN_LOOP_OPTION", "Pacer", "Slot"]

#: Set on the parsed options by a rate shape before any user starts; Locust ships the options to
#: the workers with the spawn message, so no user sends an unscheduled request.
OPEN_LOOP_OPTION = "tokenload_open_loop"

#: How often a user with no schedule to follow looks again (between open-loop steps).
_IDLE_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class Slot:
    """One arrival handed to a user: its intended time (perf_counter seconds) and step."""

    intended: float
    step: int
    #: True when no user was free at the intended time (the pool of users was exhausted).
    queued: bool
    #: The arrival's index in the step's global schedule (a trace's row).
    index: int = -1


class Pacer:
    def __init__(self) -> None:
        #: The run is open-loop (a rate shape): users wait for arrivals even between steps.
        self.open_loop = False
        self._schedule: SlotSchedule | None = None
        #: The schedule is a trace's rows (users make each row's request once they take it).
        self._trace = False
        self._step: int | None = None
        self._generation = 0
        #: Set (and replaced) whenever the schedule changes: wakes users waiting on a void slot.
        self._changed = Event()
        self.handed = 0
        #: A trace step's arrival times (seconds from its start), loaded by whoever knows the
        #: run's trace options (the run context); None: no trace in this process.
        self.trace_times: Callable[[], list[float]] | None = None

    def _bump(self) -> None:
        self._generation += 1
        changed, self._changed = self._changed, Event()
        changed.set()

    def apply(self, rate: dict[str, Any] | None, step: int | None) -> None:
        """A phase announcement. ``rate`` (for rate steps) holds ``rps``, ``arrival``,
        ``burstiness``, ``seed``, ``t0`` (master wall clock), ``age_s`` (how long before the
        master sent it the schedule started; negative: starts after), ``slot`` and ``of``."""
        if rate is None:
            if step is None:  # between steps: keep open_loop, drop the schedule
                self._schedule, self._step = None, None
                self._bump()
            return
        self.open_loop = True
        if step == self._step and self._schedule is not None and self._schedule.of == rate["of"]:
            return  # the same step's next phase: the schedule runs on
        # The schedule's start on this process's perf_counter clock, once per schedule: from its
        # age when the master sent it (clock-safe: only the message's transit, a few ms on a
        # LAN, shifts it later), else from the master's wall clock (a master without age_s).
        if rate.get("age_s") is not None:
            start = time.perf_counter() - float(rate["age_s"])
        else:
            start = rate["t0"] + time.perf_counter() - time.time()
        if rate["arrival"] == "trace":
            if self.trace_times is None:
                raise RuntimeError("a trace step was announced to a process without a trace")
            times = self.trace_times()
            first = 0
            if rate.get("rows") is not None:  # a window of the trace, at its own times
                first, end = rate["rows"]
                times = times[first:end]
            else:
                # Played at the step's rate (an SLO probe over a trace; a plain replay is at its
                # own mean rate): every gap scaled alike, the bursts keep their shape.
                mean = mean_rate(len(times), times[-1] - times[0]) if times else None
                if mean and rate.get("rps"):
                    k = mean / float(rate["rps"])
                    times = [t * k for t in times]
            sched = SlotSchedule(
                None, float(rate["rps"]), 0, start, rate["slot"], rate["of"], times=times, first_index=first
            )
        else:
            spec = ArrivalSpec(rate["arrival"], rate.get("burstiness", 1.0))
            sched = SlotSchedule(spec, float(rate["rps"]), int(rate["seed"]), start, rate["slot"], rate["of"])
        if step == self._step and self._schedule is not None:
            # The set of workers changed mid-step (one was lost): continue from now on.
            now = time.perf_counter()
            while sched.peek() < now:
                sched.next()
        self._schedule, self._step, self._trace = sched, step, rate["arrival"] == "trace"
        self._bump()

    def acquire(self, before_wait: Callable[[int], None] | None = None) -> Slot | None:
        """Block until this user's next arrival is due; None in a closed-loop run.
        In a trace step, ``before_wait(index)`` runs once the arrival is taken and before its
        time (the user makes that row's request then: off the request's path unless it runs
        late, which is then the client's own lateness)."""
        if not self.open_loop:
            return None
        while True:
            sched = self._schedule
            if sched is None:
                self._changed.wait(timeout=_IDLE_POLL_S)
                continue
            gen, step, changed = self._generation, self._step, self._changed
            intended = sched.next()
            if intended == math.inf:  # a trace this worker has sent all of: wait for the next step
                changed.wait(timeout=_IDLE_POLL_S * 10)
                continue
            index = sched.last_index
            # Queued: no user was free when it fell due. Time spent making the request below is
            # the client's own lateness, not a queue.
            queued = intended < time.perf_counter()
            if before_wait is not None and self._trace:
                before_wait(index)
            now = time.perf_counter()
            if intended > now:
                changed.wait(timeout=intended - now)
                if self._generation != gen:
                    continue  # the step ended while this user waited: its arrival is void
            self.handed += 1
            assert step is not None
            return Slot(intended, step, queued, index)

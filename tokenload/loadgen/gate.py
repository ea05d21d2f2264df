"""``--drain``: between steps no user of this process starts a request.

The master (or local runner) closes the gate when a step ends and opens it when the next step's
clock starts; the state travels with each phase announcement (``hold``). A user that finds the
gate closed waits before its next request, in Locust's *waiting* state, so stopping users (a
knee search going down) end at once instead of sending one more request.

A closed-loop step's users, released together, would start their requests together; with
requests of one length they would then end in waves, and a measured part a few requests long
would count a whole number of waves (throughput off by up to one wave). So the gate opens with
a *spread*: each waiting user starts after a random delay up to it (half the step's warm-up), as
a ramp would. Open-loop steps open with none: their arrivals set the start.

The spread is drawn from an unseeded generator on purpose: which user draws which delay depends
on the order gevent wakes them, so a seed would not make it repeat; the arrivals of open-loop
steps (``--arrival-seed``) are the part of the load that is reproducible.
"""

from __future__ import annotations

import random

import gevent
from gevent.event import Event

__all__ = ["Gate"]


class Gate:
    def __init__(self) -> None:
        self._open = Event()
        self._open.set()
        #: Seconds over which the users waiting when the gate opened start again.
        self.spread_s = 0.0

    @property
    def closed(self) -> bool:
        return not self._open.is_set()

    def set_closed(self, closed: bool, spread_s: float = 0.0) -> None:
        if closed:
            self._open.clear()
        else:
            self.spread_s = max(0.0, spread_s)
            self._open.set()

    def wait(self) -> None:
        """Block until the gate is open, then for a random part of its spread (at once when it
        is open already)."""
        if self._open.is_set():
            return
        self._open.wait()
        if self.spread_s > 0:
            gevent.sleep(random.uniform(0.0, self.spread_s))

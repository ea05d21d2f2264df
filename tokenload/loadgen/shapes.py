"""Locust load shapes built from tokenload steps.

A step's clock starts only once the runner reports the step's user count (on a master: the sum
the workers report), its warm-up part is announced, then its measured part, each with master
timestamps; the run context tags every request with the step and phase it *started* in.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust import LoadTestShape

import time

from tokenload.loadgen import plugin
from tokenload.loadgen.steps import Step, parse_concurrency_list, staircase

__all__ = ["StaircaseShape"]

#: After the users have stopped: long enough for one more worker report (Locust's is 3 s).
_REPORT_GRACE_S = 3.5


class StaircaseShape(LoadTestShape):
    """Concurrency steps from ``--concurrency`` (``1,2,4,8`` or ``1:64:x2``), each held for
    ``--step-duration`` seconds with a ``--warmup`` left out of its statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[Step] | None = None
        self.index = 0
        self.reached_at: float | None = None
        self.drained_at: float | None = None

    def _plan(self) -> list[Step]:
        opts = self.runner.environment.parsed_options
        return staircase(
            parse_concurrency_list(getattr(opts, "concurrency", "1,2,4,8")),
            float(getattr(opts, "step_duration", 30.0)),
            float(getattr(opts, "warmup", 0.2)),
        )

    def tick(self) -> tuple[int, float] | None:
        if self.steps is None:
            self.steps = self._plan()
            plugin.context_of(self.runner.environment).planned_steps = self.steps
        if self.index >= len(self.steps):
            return self._drain()
        ctx = plugin.context_of(self.runner.environment)
        step = self.steps[self.index]
        now = time.time()
        spawn = (step.concurrency, float(max(step.concurrency, 10)))
        if self.reached_at is None:
            if self.runner.user_count >= step.concurrency:
                self.reached_at = now
                ctx.begin_step(step, now)
            return spawn
        elapsed = now - self.reached_at
        if elapsed >= step.duration_s:
            ctx.end_step(step, now)
            self.index += 1
            self.reached_at = None
            if self.index >= len(self.steps):
                return self._drain()
            nxt = self.steps[self.index]
            return nxt.concurrency, float(max(nxt.concurrency, 10))
        if elapsed >= step.warmup_s:
            ctx.measure_step(step, now)
        return spawn

    def _drain(self) -> tuple[int, float] | None:
        """After the last step: stop the users (gracefully, within --stop-timeout) so requests
        in flight finish and are counted, give the workers one report to ship them, then end."""
        if self.runner.user_count > 0:
            return 0, 1000.0
        if self.drained_at is None:
            self.drained_at = time.time()
        if time.time() - self.drained_at < _REPORT_GRACE_S:
            return 0, 1000.0
        return None

"""The step state machine every tokenload load shape runs (:class:`StepShape`).

A shape is a sequence of steps (a concurrency, or a request rate, held for a duration), each
run in three phases:

1. *ramp*: ask Locust for the step's users and wait until the runner reports them all (on a
   master: the sum the workers report); only then does the step's clock start;
2. *run*: a warm-up part (left out of the step's statistics), then the measured part, each
   announced to the workers with master timestamps; every request is tagged with the step and
   phase it *started* in;
3. *settle*: the step has ended; the master asks every worker for its report and waits until
   every request that started in the step's measured part has ended and been reported (at most
   ``--settle-timeout``; the step records how many the bound cut), so the next step is chosen,
   and a stop condition judged, on exactly the figures summary.json reports. Load goes on at the
   step's level meanwhile; those requests start outside any measured part. With ``--drain`` no
   user starts a request in the settle, and it lasts until nothing at all is in flight (same
   bound), so the next step starts from an idle server.

A step's clock starts when the runner holds exactly its users: going down (a knee search
bisecting), the previous step's extra users must have stopped first.

Locust asks a shape for its user count once a second (``tick``). Within a tick the machine waits,
looking every few tens of milliseconds, for what the step waits on (its users, the end of its
warm-up or of the step, the workers' reports), so each phase begins when it is due, not at the
next tick. Locust starts or stops the users a tick asks for after the tick returns; when they are
all running (its ``spawning_complete`` event), the machine goes on at once in a greenlet of its
own, up to where that tick's second ends. Only a new user count waits for the next tick.

The shapes differ only in how they choose the next step. Stop conditions (all shapes): an SLO
broken for N steps in a row (``--stop-slo``), a failed share (``--stop-error-rate``), and a time
budget (``--time-budget``: no step starts that would end past it).
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust import LoadTestShape

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent.lock import Semaphore

from tokenload.loadgen import plugin
from tokenload.loadgen.option_table import forwarded_argv, option_value
from tokenload.loadgen.pacing import OPEN_LOOP_OPTION
from tokenload.loadgen.steps import SHRINK_MAX_S, Step, spawn_rate
from tokenload.metrics.failures import failed_share, requests_ended
from tokenload.report.redact import redact

__all__ = ["RECORDED_OPTION_GROUPS", "StepShape", "shape_option"]

log = logging.getLogger("tokenload")

#: After the users have stopped, the most the run waits for the workers' last reports, asked for
#: at once (transport.request_reports); Locust's own report comes every 3 s. Nothing to wait for
#: without workers.
_REPORT_GRACE_S = 3.5
#: The most a step's settle waits for the workers' reports (the measured requests' end is
#: bounded by --settle-timeout instead).
_SETTLE_MAX_S = 5.0
#: Locust calls a shape's tick() once a second. A tick waits up to _TICK_WAIT_S of it for what the
#: step waits on (its users, a boundary of its clock, the workers' reports, the end of its measured
#: requests), looking every _POLL_S, so a step starts, measures and ends when it should, not at the
#: next tick. Measured (bench/step_clock.py, bench/RESULTS.md): 3 steps of 2 s with one worker,
#: 22.9 s from start to end with the clock on ticks (steps 4.8 s apart, each measuring 1 s of its
#: 2 at --warmup 0), 16.2 s with this (3.0 s apart, all 2 s measured).
_TICK_WAIT_S = 0.95
_POLL_S = 0.02
#: While a step settles, the workers are asked for fresh reports every _REASK_S, or less often
#: with many workers: at most _REASKS_PER_S reports a second in all, and never less often than
#: once a second (what a tick did before).
_REASK_S = 0.2
_REASKS_PER_S = 100


def _reask_interval_s(workers: int) -> float:
    """Seconds between a settling step's requests for the workers' reports."""
    return min(1.0, max(_REASK_S, workers / _REASKS_PER_S))


class _DeliberateRamp(logging.Filter):
    """Drops Locust's "spawn rate is very high" warning while a tokenload shape sets the rate: a
    step's clock starts only once all its users run, so the ramp is fast on purpose (``_spawn``:
    the step's users in about a second; ``_drain``: stop them at once, their requests finish within
    --stop-timeout). A user's own ``-r`` in a run without a tokenload shape still gets it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


_RAMP_FILTER = _DeliberateRamp()


#: The option groups (loadgen.option_table) a shape's summary.json ``search.argv`` records: every
#: run option a sweep forwards (the internal ones, the run directory and the emulator's command
#: line, are not in a sweep's command).
RECORDED_OPTION_GROUPS = ("load", "server", "steps", "knee", "trace", "slo", "stop")


def shape_option(shape: LoadTestShape, name: str) -> Any:
    """A run option's value, or its default from the option table (library use, no parsing)."""
    return option_value(shape.runner.environment.parsed_options, name)


_T = TypeVar("_T")


def _wait(until: float, probe: Callable[[], _T | None]) -> _T | None:
    """``probe()`` once it is not None, looking every _POLL_S until ``until`` (time.monotonic);
    None if it never was. Other greenlets (the workers' reports) run meanwhile."""
    while True:
        found = probe()
        if found is not None or time.monotonic() + _POLL_S > until:
            return found
        gevent.sleep(_POLL_S)


class StepShape(LoadTestShape):
    """The step state machine; subclasses choose steps with :meth:`next_step`."""

    abstract = True
    #: Open-loop steps (request rates): users send only scheduled arrivals.
    open_loop = False

    def __init__(self) -> None:
        super().__init__()
        self.step: Step | None = None
        self.done: list[Step] = []
        self.finished = False
        self.stop_reason: str | None = None
        self.reached_at: float | None = None
        self.ended_at: float | None = None
        self.drained_at: float | None = None
        self.first_start: float | None = None
        self._shrink_since: float | None = None
        self._slo_breaches = 0
        self._moe: dict[str, float] | None = None
        self._asked_at = 0.0  # when the settling step last asked the workers for their reports
        self._told: int | None = None  # the user count tick() last returned to Locust
        self._tick_at = 0.0  # time.monotonic() when the last tick began
        self._busy = Semaphore()  # one greenlet at a time runs the machine (a tick, or _on_spawned)
        self._listening = False
        logging.getLogger("locust.runners").addFilter(_RAMP_FILTER)  # once: a filter is a set member

    # -- what subclasses provide -----------------------------------------------------------------
    def next_step(self, index: int, steps: list[dict[str, Any]]) -> Step | None:
        """The step to run next (``index`` is its position), given the finished steps'
        summaries (``summary.json`` form, verdicts included); None ends the run."""
        raise NotImplementedError

    def planned(self) -> list[Step]:
        """Steps known in advance (for the web UI and progress), if any."""
        return []

    def drains(self) -> bool:
        """Whether each step starts from an idle server (``--drain``)."""
        return bool(shape_option(self, "drain"))

    # -- the state machine -----------------------------------------------------------------------
    @property
    def ctx(self) -> plugin.RunContext:
        return plugin.context_of(self.runner.environment)

    def _spawn(self, step: Step) -> tuple[int, float]:
        return step.concurrency, spawn_rate(step.concurrency)

    def tick(self) -> tuple[int, float] | None:
        self._tick_at = time.monotonic()
        if not self._listening:
            self._listening = True
            self.runner.environment.events.spawning_complete.add_listener(self._on_spawned)
        with self._busy:  # waits for an _on_spawned that runs into this tick (by a few ms at most)
            until = time.monotonic() + _TICK_WAIT_S
            spawn = self._advance(until)
        self._told = None if spawn is None else spawn[0]
        return spawn

    def _on_spawned(self, **_kw: Any) -> None:
        """Locust's ``spawning_complete`` (the master: every worker has started or stopped its
        share): a step waiting for its users goes on now, in a greenlet of its own, not at the next
        tick, up to where the tick it falls in would have stopped. Measured by bench/step_clock.py
        (bench/RESULTS.md, "A sweep's clock"): 3 steps of 2 s, 9.7 s from start to end instead of
        12.7 alone, 13.4 instead of 15.9 with a worker."""
        if (self.step is not None and self.reached_at is None) or self.finished:
            gevent.spawn(self._advance_now)

    def _advance_now(self) -> None:
        if not self._busy.acquire(blocking=False):
            return  # a tick is running: it sees the users itself
        try:
            until = self._tick_at + _TICK_WAIT_S
            if time.monotonic() + _POLL_S < until:
                self._advance(until)  # what it asks of Locust waits for the next tick
        finally:
            self._busy.release()

    def _advance(self, until: float) -> tuple[int, float] | None:
        """Run the machine until ``until`` (time.monotonic) or until Locust must act; the user
        count to ask Locust for (None: end the run)."""
        if self.step is None and not self.finished:
            if self.open_loop:
                setattr(self.runner.environment.parsed_options, OPEN_LOOP_OPTION, True)
            self._choose(time.time(), [])
        if self.finished:
            return self._drain(until)
        while True:  # each pass runs one step as far as this tick allows
            step = self.step
            assert step is not None
            if self.reached_at is None:
                if self.runner.user_count != step.concurrency and self._told != step.concurrency:
                    return self._spawn(step)  # Locust starts the step's users after this tick
                if not _wait(until, lambda s=step: self._users_reached(s, time.time()) or None):
                    return self._spawn(step)
                self.reached_at = now = time.time()
                if self.first_start is None:
                    self.first_start = now
                self.ctx.begin_step(step, now)
            if self.ended_at is None and not self._run(step, until):
                return self._spawn(step)
            settled = _wait(until, lambda s=step: self._settled(s))
            if settled is None:
                return self._spawn(step)
            self._close_step(step, *settled)
            if self.finished:
                return self._drain(until)
            # The next step: with its users already running (a context or rate sweep) it starts now.

    def _run(self, step: Step, until: float) -> bool:
        """The step's clock: its warm-up, then its measured part, each boundary kept to the
        moment it falls on within the tick. True once the step has ended."""
        assert self.reached_at is not None
        while True:
            now = time.time()
            elapsed = now - self.reached_at
            budget = shape_option(self, "time_budget")
            budget_end = (
                None if budget is None else (self.first_start or now) + float(budget) - self.reached_at
            )
            over_budget = budget_end is not None and elapsed >= budget_end
            precise = elapsed >= step.warmup_s and self._precise(step)
            if (
                elapsed >= step.duration_s or over_budget or precise
            ):  # the budget cuts a step its ramp delayed
                if precise and elapsed < step.duration_s:
                    self.ctx.steps.note_precise(step.index)
                self.ctx.end_step(step, now, drain=self.drains())
                self.ended_at = now
                self._asked_at = now
                self.ctx.request_reports()
                return True
            if elapsed >= step.warmup_s:
                self.ctx.measure_step(step, now)
            self.ctx.reannounce_if_workers_changed()
            boundary = step.warmup_s if elapsed < step.warmup_s else step.duration_s
            if budget_end is not None:
                boundary = min(boundary, budget_end)
            if time.monotonic() + boundary - elapsed > until:
                return False
            gevent.sleep(max(boundary - elapsed, 0.0))

    def _settled(self, step: Step) -> tuple[int, int] | None:
        """Settling: the step's figures are complete once every worker has reported and every
        request of its measured part has ended (each report refreshes the workers' counts).
        The requests still unfinished and (--drain) in flight once settled, or None."""
        assert self.ended_at is not None
        now = time.time()
        if self.ctx.fleet.awaiting_reports and now - self.ended_at < _SETTLE_MAX_S:
            return None
        unfinished = self.ctx.unfinished(step.index)
        # --drain: nothing may be in flight either (no user starts one meanwhile).
        busy = self.ctx.in_flight_total() if self.drains() else 0
        if (unfinished or busy) and now - self.ended_at < float(shape_option(self, "settle_timeout")):
            workers = getattr(self.runner, "worker_count", 0)  # a master: its workers (never asked locally)
            if not self.ctx.fleet.awaiting_reports and now - self._asked_at >= _reask_interval_s(workers):
                self._asked_at = now
                self.ctx.request_reports()
            return None
        return unfinished, busy

    def _close_step(self, step: Step, unfinished: int, busy: int) -> None:
        """The settled step's summary and verdict; then the choice of the next step (or the end)."""
        now = time.time()
        settle_s = float(shape_option(self, "settle_timeout"))
        if self.drains():
            assert self.ended_at is not None
            self.ctx.steps.note_drained(step.index, now - self.ended_at, busy)
            if busy:
                log.warning(
                    "tokenload: step %d: %d requests still in flight after --settle-timeout %g s; "
                    "the next step starts with them",
                    step.index,
                    busy,
                    settle_s,
                )
        if unfinished:
            self.ctx.steps.note_unfinished(step.index, unfinished)
            log.warning(
                "tokenload: step %d judged with %d of its measured requests still streaming "
                "(--settle-timeout %g s)",
                step.index,
                unfinished,
                settle_s,
            )
        from tokenload.results.summary import step_summaries

        steps = step_summaries(self.ctx.step_sources())
        judged = next((s for s in steps if s.get("index") == step.index), None)
        if judged is not None:
            self.ctx.step_judged(judged)
        self.done.append(step)
        self._choose(now, steps)

    def _precise(self, step: Step) -> bool:
        """--target-moe: the step's figures are known well enough to end it now."""
        if self._moe is None:
            from tokenload.metrics.precision import parse_target_moe

            text = shape_option(self, "target_moe")
            self._moe = parse_target_moe(text) if text else {}  # parsed once: it holds for the run
        return bool(self._moe) and self.ctx.steps.precise(step.index, self._moe)

    def _users_reached(self, step: Step, now: float) -> bool:
        """The runner holds the step's users: all of them, and no more (going down, the extra
        users of the previous step have stopped, or SHRINK_MAX_S passed)."""
        count = self.runner.user_count
        if count < step.concurrency:
            return False
        if count == step.concurrency:
            return True
        if self._shrink_since is None:
            self._shrink_since = now
        if now - self._shrink_since >= SHRINK_MAX_S:
            log.warning(
                "tokenload: step %d: %d users still running after %g s (want %d); starting its clock",
                step.index,
                count,
                SHRINK_MAX_S,
                step.concurrency,
            )
            return True
        return False

    def _choose(self, now: float, steps: list[dict[str, Any]]) -> None:
        """The next step (``self.step``), or the end of the run (``self.finished``)."""
        self.step, self.reached_at, self.ended_at = None, None, None
        self._shrink_since = None
        reason = self._stop_condition(steps)
        nxt = None if reason else self.next_step(len(self.done), steps)
        budget = shape_option(self, "time_budget")
        start = self.first_start if self.first_start is not None else now
        if nxt is not None and budget is not None and now + nxt.duration_s > start + float(budget):
            reason = f"--time-budget: {budget:g} s would be exceeded by the next step"
            nxt = None
        if nxt is None:
            self.stop_reason = self.stop_reason or reason
            if reason:
                log.warning("tokenload: stopping: %s", reason)  # once: the log reaches the console
            self.finished = True
            self._record_result()
            return
        self.step = nxt
        self.ctx.prepare_step(nxt)

    def _stop_condition(self, steps: list[dict[str, Any]]) -> str | None:
        if not steps:
            return None
        last = steps[-1]
        max_err = float(shape_option(self, "stop_error_rate"))
        share = failed_share(last)
        if share is not None and share > max_err:
            failed, ended = last["requests"]["failed"], requests_ended(last)
            return f"--stop-error-rate: step {last['index']} failed {failed} of {ended} (> {max_err:g})"
        if "oversaturated" in (last.get("flags") or []) and not shape_option(self, "no_stop_oversaturated"):
            t = last.get("waiting_trend") or {}
            return (
                f"over-saturated: the server's waiting queue grew from {t.get('first')} to {t.get('last')} "
                f"through step {last['index']} (--no-stop-oversaturated to go on)"
            )
        slo_text = shape_option(self, "stop_slo")
        if slo_text:
            from tokenload.report.capacity import check_steps, parse_slo

            check = check_steps([last], parse_slo(slo_text))[0]
            self._slo_breaches = 0 if check.meets else self._slo_breaches + 1
            n = int(shape_option(self, "stop_slo_steps"))
            if self._slo_breaches >= n:
                broke = f"{n} steps in a row broke it" if n > 1 else "the step broke it"
                return f"--stop-slo: {broke} ({'; '.join(check.failed_items)})"
        return None

    def _record_result(self) -> None:
        result = self.result()
        if self.stop_reason:
            result["stop_reason"] = self.stop_reason
        opts = self.runner.environment.parsed_options
        # The run's options as given (those not at the sweep's default): the report's
        # equivalent command, a tokenload sweep line, gives them again.
        argv = forwarded_argv(opts, RECORDED_OPTION_GROUPS, sweep_defaults=True) if opts is not None else []
        result["argv"] = redact(argv)  # a URL's credentials are no option to keep
        self.ctx.plan.search = result

    def result(self) -> dict[str, Any]:
        """Shape-specific findings for summary.json's ``search``."""
        return {"shape": type(self).__name__}

    def _drain(self, until: float) -> tuple[int, float] | None:
        """After the last step: stop the users (gracefully, within --stop-timeout) so requests
        in flight finish and are counted, ask the workers for the report that ships them, then
        end once every worker has reported (at most _REPORT_GRACE_S); as far as ``until``
        (time.monotonic) allows, then the next tick goes on."""
        if self.drained_at is None:
            if self.runner.user_count > 0:
                if self._told != 0:  # Locust stops them after this tick
                    return 0, 1000.0
                if not _wait(until, lambda: self.runner.user_count == 0 or None):
                    return 0, 1000.0
            self.drained_at = time.time()
            self.ctx.request_reports()
        assert self.drained_at is not None
        drained_at = self.drained_at
        reported = _wait(
            until,
            lambda: (
                not self.ctx.fleet.awaiting_reports or time.time() - drained_at >= _REPORT_GRACE_S or None
            ),
        )
        return None if reported else (0, 1000.0)

"""Locust load shapes built from tokenload steps: ``StaircaseShape``, ``RateShape``, ``KneeShape``.

Every shape is a sequence of steps (a concurrency, or a request rate, held for a duration),
driven by one state machine (:class:`StepShape`):

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

The shapes differ only in how they choose the next step. Stop conditions (all shapes): an SLO
broken for N steps in a row (``--stop-slo``), a failed share (``--stop-error-rate``), and a time
budget (``--time-budget``: no step starts that would end past it).
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust import LoadTestShape

import dataclasses
import logging
import math
import time
from typing import Any

from tokenload.analysis.knee import judged_as_server
from tokenload.loadgen import plugin
from tokenload.loadgen.option_table import forwarded_argv, option_value
from tokenload.loadgen.pacing import OPEN_LOOP_OPTION
from tokenload.loadgen.steps import (
    SHRINK_MAX_S,
    Step,
    parse_concurrency_list,
    parse_rate_list,
    rate_staircase,
    spawn_rate,
    staircase,
)
from tokenload.report.redact import redact
from tokenload.report.tables import users

__all__ = ["ContextSweepShape", "KneeShape", "RateShape", "StaircaseShape", "StepShape"]

log = logging.getLogger("tokenload")

#: After the users have stopped, the most the run waits for the workers' last reports, asked for
#: at once (transport.request_reports); Locust's own report comes every 3 s. Nothing to wait for
#: without workers.
_REPORT_GRACE_S = 3.5
#: The most a step's settle waits for the workers' reports (the measured requests' end is
#: bounded by --settle-timeout instead).
_SETTLE_MAX_S = 5.0


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


def _opt(shape: LoadTestShape, name: str) -> Any:
    """A run option's value, or its default from the option table (library use, no parsing)."""
    return option_value(shape.runner.environment.parsed_options, name)


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
        return bool(_opt(self, "drain"))

    # -- the state machine -----------------------------------------------------------------------
    @property
    def ctx(self) -> plugin.RunContext:
        return plugin.context_of(self.runner.environment)

    def _spawn(self, step: Step) -> tuple[int, float]:
        return step.concurrency, spawn_rate(step.concurrency)

    def tick(self) -> tuple[int, float] | None:
        now = time.time()
        if self.finished:
            return self._drain()
        if self.step is None:
            if self.open_loop:
                setattr(self.runner.environment.parsed_options, OPEN_LOOP_OPTION, True)
            return self._choose(now, [])
        step = self.step
        if self.reached_at is None:
            if self._users_reached(step, now):
                self.reached_at = now
                if self.first_start is None:
                    self.first_start = now
                self.ctx.begin_step(step, now)
            return self._spawn(step)
        if self.ended_at is None:
            elapsed = now - self.reached_at
            budget = _opt(self, "time_budget")
            over_budget = budget is not None and now >= (self.first_start or now) + float(budget)
            precise = elapsed >= step.warmup_s and self._precise(step)
            if (
                elapsed >= step.duration_s or over_budget or precise
            ):  # the budget cuts a step its ramp delayed
                if precise and elapsed < step.duration_s:
                    self.ctx.steps.note_precise(step.index)
                self.ctx.end_step(step, now, drain=self.drains())
                self.ended_at = now
                self.ctx.request_reports()
            else:
                if elapsed >= step.warmup_s:
                    self.ctx.measure_step(step, now)
                self.ctx.reannounce_if_workers_changed()
            return self._spawn(step)
        # Settling: the step's figures are complete once every worker has reported and every
        # request of its measured part has ended (each report refreshes the workers' counts).
        if self.ctx.fleet.awaiting_reports and now - self.ended_at < _SETTLE_MAX_S:
            return self._spawn(step)
        unfinished = self.ctx.unfinished(step.index)
        # --drain: nothing may be in flight either (no user starts one meanwhile).
        busy = self.ctx.in_flight_total() if self.drains() else 0
        settle_s = float(_opt(self, "settle_timeout"))
        if (unfinished or busy) and now - self.ended_at < settle_s:
            if not self.ctx.fleet.awaiting_reports:
                self.ctx.request_reports()
            return self._spawn(step)
        if self.drains():
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
                float(_opt(self, "settle_timeout")),
            )
        from tokenload.results.summary import step_summaries

        steps = step_summaries(self.ctx.step_sources())
        judged = next((s for s in steps if s.get("index") == step.index), None)
        if judged is not None:
            self.ctx.step_judged(judged)
        self.done.append(step)
        return self._choose(now, steps)

    def _precise(self, step: Step) -> bool:
        """--target-moe: the step's figures are known well enough to end it now."""
        if self._moe is None:
            from tokenload.metrics.precision import parse_target_moe

            text = _opt(self, "target_moe")
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

    def _choose(self, now: float, steps: list[dict[str, Any]]) -> tuple[int, float] | None:
        self.step, self.reached_at, self.ended_at = None, None, None
        self._shrink_since = None
        reason = self._stop_condition(steps)
        nxt = None if reason else self.next_step(len(self.done), steps)
        budget = _opt(self, "time_budget")
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
            return self._drain()
        self.step = nxt
        self.ctx.prepare_step(nxt)
        return self._spawn(nxt)

    def _stop_condition(self, steps: list[dict[str, Any]]) -> str | None:
        if not steps:
            return None
        last = steps[-1]
        reqs = last.get("requests") or {}
        total = (reqs.get("ok") or 0) + (reqs.get("failed") or 0)
        max_err = float(_opt(self, "stop_error_rate"))
        if total and reqs["failed"] / total > max_err:
            return (
                f"--stop-error-rate: step {last['index']} failed {reqs['failed']} of {total} (> {max_err:g})"
            )
        if "oversaturated" in (last.get("flags") or []) and not _opt(self, "no_stop_oversaturated"):
            t = last.get("waiting_trend") or {}
            return (
                f"over-saturated: the server's waiting queue grew from {t.get('first')} to {t.get('last')} "
                f"through step {last['index']} (--no-stop-oversaturated to go on)"
            )
        slo_text = _opt(self, "stop_slo")
        if slo_text:
            from tokenload.report.capacity import check_steps, parse_slo

            check = check_steps([last], parse_slo(slo_text))[0]
            self._slo_breaches = 0 if check.meets else self._slo_breaches + 1
            n = int(_opt(self, "stop_slo_steps"))
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

    def _drain(self) -> tuple[int, float] | None:
        """After the last step: stop the users (gracefully, within --stop-timeout) so requests
        in flight finish and are counted, ask the workers for the report that ships them, then
        end once every worker has reported (at most _REPORT_GRACE_S)."""
        if self.runner.user_count > 0:
            return 0, 1000.0
        if self.drained_at is None:
            self.drained_at = time.time()
            self.ctx.request_reports()
        if self.ctx.fleet.awaiting_reports and time.time() - self.drained_at < _REPORT_GRACE_S:
            return 0, 1000.0
        return None


class _PlannedShape(StepShape):
    abstract = True

    def __init__(self) -> None:
        super().__init__()
        self._plan: list[Step] | None = None

    def make_plan(self) -> list[Step]:
        raise NotImplementedError

    def planned(self) -> list[Step]:
        if self._plan is None:
            self._plan = self.make_plan()
            self.ctx.plan.planned = self._plan
        return self._plan

    def next_step(self, index: int, steps: list[dict[str, Any]]) -> Step | None:
        plan = self.planned()
        return plan[index] if index < len(plan) else None


class StaircaseShape(_PlannedShape):
    """Concurrency steps from ``--concurrency`` (``1,2,4,8`` or ``1:64:x2``), each held for
    ``--step-duration`` seconds with a ``--warmup`` left out of its statistics."""

    abstract = True

    def make_plan(self) -> list[Step]:
        return staircase(
            parse_concurrency_list(_opt(self, "concurrency")),
            float(_opt(self, "step_duration")),
            float(_opt(self, "warmup")),
        )

    def result(self) -> dict[str, Any]:
        return {"shape": "staircase"}


class RateShape(_PlannedShape):
    """Open-loop request-rate steps from ``--rate`` (``0.5,1,2`` or ``1:16:x2`` requests/s),
    arrivals by ``--arrival`` (constant, poisson, gamma:B) over ``--max-in-flight`` users."""

    abstract = True
    open_loop = True

    def make_plan(self) -> list[Step]:
        return rate_staircase(
            parse_rate_list(_opt(self, "rate")),
            float(_opt(self, "step_duration")),
            float(_opt(self, "warmup")),
            int(_opt(self, "max_in_flight")),
        )

    def result(self) -> dict[str, Any]:
        return {"shape": "rate", "arrival": str(_opt(self, "arrival"))}


class ContextSweepShape(_PlannedShape):
    """The prompt-length experiment: for each length of ``--prompt-lengths`` (in the target's
    tokens, made exact through its /tokenize), each concurrency of ``--concurrency``, one step.
    Steps of different lengths are judged as separate series."""

    abstract = True

    def make_plan(self) -> list[Step]:
        lengths = [s.strip() for s in str(_opt(self, "prompt_lengths")).split(",")]
        levels = parse_concurrency_list(_opt(self, "concurrency"))
        base = staircase(
            levels * len(lengths), float(_opt(self, "step_duration")), float(_opt(self, "warmup"))
        )
        pairs = [(n, c) for n in lengths for c in levels]
        return [dataclasses.replace(s, prompt_tokens=n) for s, (n, _) in zip(base, pairs, strict=True)]

    def result(self) -> dict[str, Any]:
        return {"shape": "context_sweep"}


class KneeShape(StepShape):
    """Adaptive search for the saturation concurrency.

    Climb: probe steps (``--probe-duration``, default half a step) from ``--knee-start``, each
    ``--knee-factor`` times the last, until a step is saturated (the same verdicts as the
    report: throughput gain per load growth under its threshold, latency blown up while the
    throughput lags, requests waiting for capacity, errors) or ``--knee-max`` is reached.
    Bisect: full steps at the geometric midpoint of the highest unsaturated and the lowest
    saturated concurrency, until their ratio is at most ``--knee-resolution``. Then stop.
    """

    abstract = True

    def __init__(self) -> None:
        super().__init__()
        self.lo: int | None = None  # highest unsaturated concurrency so far
        self.hi: int | None = None  # lowest saturated concurrency so far
        self.probes: list[dict[str, Any]] = []
        self.outcome = "running"

    def _step_of(self, index: int, concurrency: int, probe: bool) -> Step:
        duration = float(_opt(self, "step_duration"))
        if probe:
            duration = float(_opt(self, "probe_duration") or duration / 2)
        return dataclasses.replace(
            staircase([concurrency], duration, float(_opt(self, "warmup")))[0], index=index
        )

    def next_step(self, index: int, steps: list[dict[str, Any]]) -> Step | None:
        start = int(_opt(self, "knee_start"))
        cap = int(_opt(self, "knee_max"))
        factor = float(_opt(self, "knee_factor"))
        resolution = float(_opt(self, "knee_resolution"))
        if not steps:
            return self._step_of(index, min(start, cap), probe=True)
        last = steps[-1]
        conc = int(last["concurrency"])
        verdict = last.get("verdict") or {}
        name = verdict.get("bottleneck", "none")
        self.probes.append(
            {
                "concurrency": conc,
                "bottleneck": name,
                "measured_s": last.get("measured_s"),
                # What the decision saw: summary.json's step reports the same once it is complete.
                "requests_ok": (last.get("requests") or {}).get("ok"),
                "unfinished_at_decision": last.get("unfinished_at_decision", 0),
                "flags": list(last.get("flags") or []),
            }
        )
        if name == "client":
            self.outcome = "client_bound"
            self.stop_reason = (
                f"the client could not keep up at {users(conc)}: add workers (--workers) before judging"
            )
            return None
        if not judged_as_server(verdict):
            # Neither side of the bracket: the step could not be judged, so the search cannot go on.
            missing = next((e.get("rule") for e in verdict.get("evidence") or [] if e.get("rule")), None)
            self.outcome = "undecided"
            self.stop_reason = f"the step at {users(conc)} could not be judged" + (
                f" ({missing})" if missing else ""
            )
            return None
        if name == "none":
            self.lo = conc if self.lo is None else max(self.lo, conc)
        else:
            self.hi = conc if self.hi is None else min(self.hi, conc)
        if self.hi is None:  # still climbing
            if conc >= cap:
                self.outcome = "not_saturated"
                self.stop_reason = f"not saturated up to --knee-max {cap} users"
                return None
            return self._step_of(index, min(cap, max(conc + 1, math.ceil(conc * factor))), probe=True)
        if self.lo is None:
            self.outcome = "saturated_at_start"
            self.stop_reason = f"already saturated at the first step ({users(self.hi)}): lower --knee-start"
            return None
        if self.hi / self.lo <= resolution or self.hi - self.lo <= 1:
            self.outcome = "found"
            return None
        mid = round(math.sqrt(self.lo * self.hi))
        mid = min(max(mid, self.lo + 1), self.hi - 1)
        return self._step_of(index, mid, probe=False)

    def result(self) -> dict[str, Any]:
        return {
            "shape": "knee",
            "outcome": self.outcome,
            "last_unsaturated_concurrency": self.lo,
            "first_saturated_concurrency": self.hi,
            "probes": self.probes,
        }

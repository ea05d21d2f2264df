"""Locust load shapes built from tokenload steps: ``StaircaseShape``, ``RateShape``,
``ContextSweepShape``, ``KneeShape``. Each chooses its steps; the one state machine that runs
them, and its stop conditions, is :class:`~tokenload.loadgen.step_machine.StepShape`."""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)

import dataclasses
import math
from typing import Any

from tokenload.analysis.knee import find_knee, judged_as_server
from tokenload.loadgen.step_machine import StepShape, shape_option
from tokenload.loadgen.steps import (
    Step,
    parse_concurrency_list,
    parse_rate_list,
    rate_staircase,
    staircase,
)
from tokenload.report.tables import users

__all__ = ["ContextSweepShape", "KneeShape", "RateShape", "StaircaseShape", "StepShape"]


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
            parse_concurrency_list(shape_option(self, "concurrency")),
            float(shape_option(self, "step_duration")),
            float(shape_option(self, "warmup")),
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
            parse_rate_list(shape_option(self, "rate")),
            float(shape_option(self, "step_duration")),
            float(shape_option(self, "warmup")),
            int(shape_option(self, "max_in_flight")),
        )

    def result(self) -> dict[str, Any]:
        return {"shape": "rate", "arrival": str(shape_option(self, "arrival"))}


class ContextSweepShape(_PlannedShape):
    """The prompt-length experiment: for each length of ``--prompt-lengths`` (in the target's
    tokens, made exact through its /tokenize), each concurrency of ``--concurrency``, one step.
    Steps of different lengths are judged as separate series."""

    abstract = True

    def make_plan(self) -> list[Step]:
        lengths = [s.strip() for s in str(shape_option(self, "prompt_lengths")).split(",")]
        levels = parse_concurrency_list(shape_option(self, "concurrency"))
        base = staircase(
            levels * len(lengths),
            float(shape_option(self, "step_duration")),
            float(shape_option(self, "warmup")),
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

    The bracket is the report's knee, worked out at each decision from every step's verdict as
    judged then (a step is judged against the steps around it, so a bisection step can change the
    verdict of the step above it): the lowest saturated load that the next higher one does not
    contradict, and the highest unsaturated load below it. When a new step undoes the bracket
    (the saturated end, judged again, is not), the climb goes on from the highest load run.
    """

    abstract = True

    def __init__(self) -> None:
        super().__init__()
        self.lo: int | None = None  # highest unsaturated concurrency so far
        self.hi: int | None = None  # lowest saturated concurrency so far
        self.probes: list[dict[str, Any]] = []
        self.outcome = "running"

    def _step_of(self, index: int, concurrency: int, probe: bool) -> Step:
        duration = float(shape_option(self, "step_duration"))
        if probe:
            duration = float(shape_option(self, "probe_duration") or duration / 2)
        return dataclasses.replace(
            staircase([concurrency], duration, float(shape_option(self, "warmup")))[0], index=index
        )

    def next_step(self, index: int, steps: list[dict[str, Any]]) -> Step | None:
        start = int(shape_option(self, "knee_start"))
        cap = int(shape_option(self, "knee_max"))
        factor = float(shape_option(self, "knee_factor"))
        resolution = float(shape_option(self, "knee_resolution"))
        if not steps:
            return self._step_of(index, min(start, cap), probe=True)
        last = steps[-1]
        conc = int(last["concurrency"])
        verdict = last.get("verdict") or {}
        name = verdict.get("bottleneck", "none")
        probe = {
            "concurrency": conc,
            "bottleneck": name,
            "measured_s": last.get("measured_s"),
            # What the decision saw: summary.json's step reports the same once it is complete.
            "requests_ok": (last.get("requests") or {}).get("ok"),
            "unfinished_at_decision": last.get("unfinished_at_decision", 0),
            "flags": list(last.get("flags") or []),
        }
        self.probes.append(probe)
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
        self.lo, self.hi = _bracket(steps)
        probe["bracket"] = [self.lo, self.hi]
        if self.hi is None:  # still climbing, from the highest load run so far
            top = max(int(s["concurrency"]) for s in steps)
            if top >= cap:
                self.outcome = "not_saturated"
                self.stop_reason = f"not saturated up to --knee-max {cap} users"
                return None
            return self._step_of(index, min(cap, max(top + 1, math.ceil(top * factor))), probe=True)
        if self.lo is None:
            self.outcome = "saturated_at_start"
            self.stop_reason = f"already saturated at the first step ({users(self.hi)}): lower --knee-start"
            return None
        if self.hi / self.lo <= resolution or self.hi - self.lo <= 1:
            self.outcome = "found"
            return None
        mid = round(math.sqrt(self.lo * self.hi))
        mid = min(max(mid, self.lo + 1), self.hi - 1)
        if any(int(s["concurrency"]) == mid for s in steps):
            # Only a step the bracket skips (not judged as the server's) can sit inside it.
            self.outcome = "found"
            self.stop_reason = f"the step at {users(mid)} inside the bracket could not be judged"
            return None
        return self._step_of(index, mid, probe=False)

    def result(self) -> dict[str, Any]:
        return {
            "shape": "knee",
            "outcome": self.outcome,
            "last_unsaturated_concurrency": self.lo,
            "first_saturated_concurrency": self.hi,
            "probes": self.probes,
        }


def _bracket(steps: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """The knee search's bracket from the verdicts of every step so far, as judged now: each
    decision re-judges the earlier steps (a step's verdict depends on the steps around it), and the
    bracket is the report's knee (:func:`~tokenload.analysis.knee.find_knee`), so the two agree.
    No knee: no upper end, and the lower end is the highest unsaturated load."""
    verdicts = [{"bottleneck": "none"} | (s.get("verdict") or {}) for s in steps]
    knee = find_knee(steps, verdicts)
    if knee is not None:
        return knee["last_unsaturated_concurrency"], knee["concurrency"]
    calm = [int(s["concurrency"]) for s, v in zip(steps, verdicts, strict=True) if v["bottleneck"] == "none"]
    return (max(calm) if calm else None), None

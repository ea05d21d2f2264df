"""What the load shape decided for the run, as the processes need it: the steps it planned (the
live page's progress), the current step's workload options and, in a rate step, its arrival
schedule as announced to the workers (loadgen/transport.py); and, for summary.json, what it
found beyond its steps (the knee search's probes, a replayed trace's statistics). Pure (no
Locust, no I/O): the shapes (loadgen/shapes.py) and the run's context (loadgen/plugin.py) set
it, the users read the workload options, transport.py carries it to the workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenload.loadgen.steps import Step

__all__ = ["StepPlan"]


@dataclass(slots=True)
class StepPlan:
    #: The steps the shape planned, in order (master or local runner).
    planned: list[Step] = field(default_factory=list)
    #: Workload options of the coming or current step (its prompt length), on every process.
    overrides: dict[str, str] = field(default_factory=dict)
    #: The current rate step's arrival schedule as announced (master or local runner); None in
    #: closed-loop steps and between steps.
    rate_schedule: dict[str, Any] | None = None
    #: What a shape found beyond its steps (the knee or SLO search's probes), for summary.json.
    search: dict[str, Any] | None = None
    #: The replayed trace's own statistics (workload/trace.py), for summary.json.
    trace: dict[str, Any] | None = None

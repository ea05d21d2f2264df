"""Trace replay (``--shape trace``, ``locustfiles/trace.py``): the trace, read once per process,
and the shape that plays it.

The trace (``--trace``, cut by ``--trace-window``, ``--trace-speed`` times faster, rescaled to
``--trace-scale-rate``) is one open-loop step: its rows are the step's global schedule, split
exactly across the workers as a rate step's arrivals are (worker i of N sends rows i, i+N, ...),
each sent at its time with its own lengths and timed from that time (coordinated omission
counted). Every process reads the file itself, so the path must be readable on every worker.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)

import dataclasses
from typing import TYPE_CHECKING, Any

from tokenload.loadgen import workload
from tokenload.loadgen.option_table import option_value
from tokenload.loadgen.step_machine import StepShape, shape_option
from tokenload.loadgen.steps import Step, staircase
from tokenload.workload.errors import WorkloadError
from tokenload.workload.spec import TraceSpec, load_workload_file
from tokenload.workload.trace import (
    REPLAY_TAIL_S,
    Trace,
    TraceWindow,
    load_trace,
    parse_window,
    replay_stats,
    replay_trace,
)
from tokenload.workload.trace_prompts import TracePrompts

if TYPE_CHECKING:
    from tokenload.loadgen.plugin import RunContext

__all__ = ["TraceShape", "load_run_trace", "prompts_for", "replays_trace", "trace_of", "trace_steps"]


def load_run_trace(options: Any) -> Trace:
    """The run's trace from its options, transformed. Raises WorkloadError (one line)."""
    path = str(option_value(options, "trace") or "")
    if not path:  # a workload file's trace section (kind: trace)
        spec = _workload_trace(options)
        trace = load_trace(spec.path, spec.format, spec.block_size)
        return trace.transformed(
            window=parse_window(spec.window, "trace.window") if spec.window else None,
            speed=spec.speed,
            rate=spec.scale_rate,
        )
    rate = option_value(options, "trace_scale_rate")
    return replay_trace(
        path,
        str(option_value(options, "trace_format")),
        int(option_value(options, "trace_block_size")),
        str(option_value(options, "trace_window") or ""),
        float(option_value(options, "trace_speed")),
        float(rate) if rate is not None else None,
    )


def _workload_trace(options: Any) -> TraceSpec:
    """The ``trace:`` section of the ``--workload`` file, its path resolved against the file."""
    workload_file = str(option_value(options, "workload") or "")
    spec = load_workload_file(workload_file) if workload_file else None
    if spec is None or spec.trace is None:
        raise WorkloadError(
            "--trace: the trace shape needs a trace (--trace FILE, or kind: trace in --workload)"
        )
    return spec.trace.model_copy(update={"path": str(spec.resolve_path(spec.trace.path))})


def replays_trace(ctx: RunContext) -> bool:
    """Whether this run's open-loop steps send a trace's rows (``--trace``, or a ``--workload``
    file of kind trace); decided once per process."""
    known = ctx.cache.replays_trace
    if known is None:
        options = ctx.environment.parsed_options
        known = bool(option_value(options, "trace"))
        if not known and option_value(options, "workload"):
            try:
                known = load_workload_file(str(option_value(options, "workload"))).kind == "trace"
            except WorkloadError:
                known = False  # the workload's own error is reported where it is used
        ctx.cache.replays_trace = known
    return known


def trace_of(ctx: RunContext) -> Trace:
    """This process's trace (read on first use)."""
    trace = ctx.cache.trace
    if trace is None:
        trace = ctx.cache.trace = load_run_trace(ctx.environment.parsed_options)
    return trace


def prompts_for(ctx: RunContext, chat: bool, host: str, api_key: str | None, model: str) -> TracePrompts:
    """This process's request builder for trace rows (its prompt maker is the workload's: the
    target's /tokenize when it has one)."""
    built = ctx.cache.trace_prompts.get(chat)
    if built is None:
        planner = workload.planner_for(ctx, chat, host, api_key, model)
        built = ctx.cache.trace_prompts[chat] = TracePrompts(
            planner.maker, chat=chat, block_size=trace_of(ctx).block_size, seed=planner.spec.seed
        )
    return built


def trace_steps(options: Any) -> int:
    """How many steps the trace is replayed in: ``--trace-steps``, else the workload file's
    ``trace.steps``."""
    n = int(option_value(options, "trace_steps") or 1)
    if n == 1 and not option_value(options, "trace") and option_value(options, "workload"):
        return _workload_trace(options).steps
    return n


class TraceShape(StepShape):
    """The trace's rows sent at their times: one open-loop step, or with ``--trace-steps N`` one
    step per window of the trace (N consecutive windows of equal duration, each replayed from its
    first row at that row's gaps, each judged on its own measured part)."""

    abstract = True
    open_loop = True

    def __init__(self) -> None:
        super().__init__()
        self._windows: list[TraceWindow] | None = None

    def windows(self) -> list[TraceWindow]:
        if self._windows is None:
            trace = trace_of(self.ctx)
            n = trace_steps(self.runner.environment.parsed_options)
            self._windows = trace.windows(n) if n > 1 else []
            self.ctx.plan.trace = replay_stats(trace, self._windows)
        return self._windows

    def next_step(self, index: int, steps: list[dict[str, Any]]) -> Step | None:
        trace, windows = trace_of(self.ctx), self.windows()
        users, warmup = int(shape_option(self, "max_in_flight")), float(shape_option(self, "warmup"))
        if not windows:
            if index > 0:
                return None
            base = staircase([users], trace.duration_s + REPLAY_TAIL_S, warmup)[0]
            return dataclasses.replace(base, rate_rps=trace.mean_rate_rps or 0.0, arrival="trace")
        if index >= len(windows):
            return None
        w = windows[index]
        base = staircase([users], w.end_s - w.start_s + REPLAY_TAIL_S, warmup)[0]
        return dataclasses.replace(
            base,
            index=index,
            rate_rps=w.mean_rate_rps or 0.0,
            arrival="trace",
            trace_rows=(w.first_row, w.end_row),
        )

    def result(self) -> dict[str, Any]:
        return {"shape": "trace"}

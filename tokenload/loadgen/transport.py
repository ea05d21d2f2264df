"""How the master and the workers talk: the message names, the payloads' shapes, and the code
that sends and takes them. Locust carries everything (custom messages one way, its periodic
worker report the other); this module is the only one that knows their fields.

Master -> worker:

* :data:`PHASE_MESSAGE` (:class:`PhaseAnnouncement`): the step and phase now in force, the
  step's workload overrides, whether users are held (``--drain``), and in a rate step the
  worker's share of the one global arrival schedule (``rate``: slot ``i`` of ``of``);
* :data:`FLUSH_MESSAGE`: send your report now, not at the next tick (a step's figures are
  complete moments after it ends).

Worker -> master: Locust's ``report_to_master`` payload gains a ``tokenload`` entry
(:class:`WorkerReport`): the process's statistics and records since its last report (then
cleared there), its per-step statistics, health samples, live counts and what its workload
planner did to the lengths it drew (``fit``, counts so far). Records carry their own
``request_id`` (worker name and a per-process sequence number), so the master can tell them
apart whatever order reports arrive in.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust.runners import MasterRunner, WorkerRunner

import time
from typing import TYPE_CHECKING, Any, TypedDict

import gevent

from tokenload.loadgen import exporter, workload
from tokenload.loadgen.locust_private import send_report_now
from tokenload.loadgen.phases import PHASE_MESSAGE
from tokenload.metrics.aggregate import LLMStats

if TYPE_CHECKING:
    from tokenload.loadgen.plugin import RunContext

__all__ = [
    "FLUSH_MESSAGE",
    "PHASE_MESSAGE",
    "PhaseAnnouncement",
    "WorkerReport",
    "announce",
    "fill_worker_report",
    "listen_as_worker",
    "live_workers",
    "request_reports",
    "take_worker_report",
]

#: Master -> worker: send your report now.
FLUSH_MESSAGE = "tokenload_report_now"


class PhaseAnnouncement(TypedDict):
    step: int | None
    phase: str | None  # "warmup" | "measure" | None between steps
    #: A rate step's schedule (rps, arrival, burstiness, seed, t0, age_s) and this worker's share
    #: of it (slot, of); None in closed-loop steps.
    rate: dict[str, Any] | None
    overrides: dict[str, str]
    hold: bool
    hold_spread_s: float


class WorkerReport(TypedDict):
    stats: dict[str, Any]
    records: list[dict[str, Any]]
    steps: dict[int, dict[str, Any]]
    health: dict[int, Any]
    live: dict[str, Any]
    #: The worker's workload draw counts so far (workload.plan.FIT_COUNTS), None before any.
    fit: dict[str, int | None] | None


def live_workers(runner: MasterRunner) -> list[str]:
    """The ids of the workers the master can hand load to, sorted (a stable slot order)."""
    clients = runner.clients
    return sorted(c.id for c in clients.ready + clients.spawning + clients.running)


def announce(ctx: RunContext) -> None:
    """Tell every process the step, phase and schedule now in force (a local runner applies it
    at once). In a rate step each worker gets its own slot of the schedule."""
    runner = ctx.environment.runner
    msg: PhaseAnnouncement = {
        "step": ctx.steps.step,
        "phase": ctx.steps.phase,
        "rate": None,
        "overrides": ctx.plan.overrides,
        "hold": ctx.gate.closed,
        "hold_spread_s": ctx.gate.spread_s,
    }
    rate = ctx.plan.rate_schedule
    if rate is not None:
        # How long the schedule has run on this (the master's) clock when it is sent: a worker
        # anchors it to its own clock on receipt, so a worker whose wall clock is skewed from
        # the master's does not start the step with its arrivals overdue (or idle).
        rate = {**rate, "age_s": time.time() - rate["t0"]}
    if not isinstance(runner, MasterRunner):
        ctx.pacer.apply(None if rate is None else {**rate, "slot": 0, "of": 1}, ctx.steps.step)
    elif rate is None:
        runner.send_message(PHASE_MESSAGE, msg)
    else:
        # Each worker walks its own share of the one global arrival schedule.
        ids = live_workers(runner)
        ctx.fleet.announced_workers = ids
        for slot, client_id in enumerate(ids):
            runner.send_message(
                PHASE_MESSAGE, {**msg, "rate": {**rate, "slot": slot, "of": len(ids)}}, client_id=client_id
            )


def request_reports(ctx: RunContext) -> None:
    """Ask every worker for its report now; ``ctx.fleet.awaiting_reports`` empties as they arrive."""
    runner = ctx.environment.runner
    if isinstance(runner, MasterRunner):
        ids = live_workers(runner)
        ctx.fleet.expect_reports(ids)
        for client_id in ids:
            runner.send_message(FLUSH_MESSAGE, None, client_id=client_id)


def listen_as_worker(runner: WorkerRunner, ctx: RunContext) -> None:
    """A worker applies each announcement and reports on request."""

    def on_phase(msg: Any, **_: Any) -> None:
        data: PhaseAnnouncement = msg.data
        ctx.steps.apply(data["step"], data["phase"])
        ctx.plan.overrides = data.get("overrides") or {}
        ctx.pacer.apply(data.get("rate"), data["step"])
        ctx.gate.set_closed(bool(data.get("hold")), float(data.get("hold_spread_s") or 0.0))

    runner.register_message(PHASE_MESSAGE, on_phase)
    # Locust's worker report, sent now rather than at its next tick.
    runner.register_message(FLUSH_MESSAGE, lambda msg, **_: gevent.spawn(send_report_now, runner))


def fill_worker_report(ctx: RunContext, data: dict[str, Any]) -> None:
    """On a worker: add what it measured since its last report to Locust's payload, then clear
    it here (each record travels once)."""
    health = ctx.health.take() if ctx.health is not None else {}
    report: WorkerReport = {
        "stats": ctx.stats.to_dict(),
        "records": ctx.pending,
        "steps": ctx.steps.take_stats(),
        "health": health,
        "live": exporter.worker_report(ctx),
        "fit": workload.fit_counts(ctx),
    }
    data["tokenload"] = report
    ctx.stats = LLMStats()
    ctx.pending = []


def take_worker_report(ctx: RunContext, client_id: str, report: WorkerReport) -> None:
    """On the master: merge a worker's report and keep its records (requests.jsonl at once)."""
    ctx.fleet.note_report(client_id, report.get("live") or {})
    ctx.stats.merge_dict(report["stats"])
    ctx.steps.merge_stats(report["steps"])
    ctx.steps.note_health(report["health"])
    exporter.note_worker(ctx, client_id, report.get("live"))
    if report.get("fit"):
        ctx.fleet.worker_fit[client_id] = report["fit"]
    for record in report["records"]:
        ctx.steps.note_completion(record)
    ctx.pending.extend(report["records"])
    ctx.flush()

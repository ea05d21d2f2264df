"""What ``summary.json`` is made from, as typed values: the steps' measurements
(:class:`StepSources`) and the run's facts (:class:`RunFacts`). Pure: the run context
(``loadgen/plugin.RunContext``) builds them (``step_sources()``, ``run_facts()``); the functions
that summarize and judge (``results/summary.py``) take them, never the context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenload.loadgen.phases import StepTracker

__all__ = ["ReplicaWindows", "RunFacts", "ServerWindow", "StepSources"]

#: The server's figures over ``[t0, t1]`` (scraped points or Prometheus), None when unknown.
ServerWindow = Callable[[float, float], "dict[str, Any] | None"]
#: Each replica's own server figures over a window (name -> what a ServerWindow gives), or None.
ReplicaWindows = Callable[[float, float], "dict[str, dict[str, Any]] | None"]


def _no_server(_t0: float, _t1: float) -> dict[str, Any] | None:
    return None


@dataclass(frozen=True, slots=True)
class StepSources:
    """Everything the step summaries read: the client's per-step tallies, the server's figures
    by window, the scraped points (for the waiting-queue trend), the GPU peaks the judge uses and
    the workers lost mid-run (their steps are flagged)."""

    tracker: StepTracker
    server_window: ServerWindow = _no_server
    #: The scraped points (servermetrics.scraper), None without a scraper (e.g. --prometheus-url).
    points: Sequence[Any] | None = None
    #: Each replica's figures from elsewhere than scraped points (Prometheus, by its replica label).
    replica_windows: ReplicaWindows | None = None
    gpu_peaks: dict[str, float] | None = None
    #: The engine's cap on running requests (--server-max-num-seqs), when the user gave it.
    max_num_seqs: int | None = None
    workers_lost: Sequence[dict[str, Any]] = ()
    #: Replicas that appeared or vanished during the run (Scraper.events): their steps are flagged.
    target_events: Sequence[dict[str, Any]] = ()


@dataclass(frozen=True, slots=True)
class RunFacts:
    """The run's identity and what its shape found, for ``summary.json``'s top level."""

    run_id: str | None = None
    host: str | None = None
    #: The model the run sent to: --model, else the first of the target's /v1/models.
    model: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    #: The run's options without secrets (RunConfig.public_dict()).
    config: dict[str, Any] = field(default_factory=dict)
    workers: Sequence[str] = ()
    #: The shape's own findings (a search's probes and outcome, a stop reason).
    search: dict[str, Any] | None = None
    #: The trace's own statistics when a trace was replayed (workload/trace.py).
    trace: dict[str, Any] | None = None
    scrape_failures: int | None = None
    #: What the workload planners did to the lengths they drew, summed over the workers
    #: (workload.plan.FIT_COUNTS); None when no planner was built (one that drew nothing gives
    #: zero counts).
    workload_fit: dict[str, int | None] | None = None
    #: What was scraped when --metrics-discover looked the replicas up during the run.
    scrape_targets: dict[str, Any] | None = None

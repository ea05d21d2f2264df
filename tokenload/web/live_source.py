"""What the live page (tokenload.web.live) reads of a run, as a typed interface: the run's
context (tokenload.loadgen.plugin.RunContext) is one, a test's stand-in another."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from locust.env import Environment

    from tokenload.loadgen.fleet import Fleet
    from tokenload.loadgen.phases import StepTracker
    from tokenload.loadgen.step_plan import StepPlan
    from tokenload.metrics.aggregate import LLMStats
    from tokenload.results.run_inputs import StepSources
    from tokenload.servermetrics.prometheus_source import PrometheusSource
    from tokenload.servermetrics.scraper import Scraper

__all__ = ["LiveSource"]


class LiveSource(Protocol):
    """What the live page reads of a run: :class:`tokenload.loadgen.plugin.RunContext` is one."""

    stats: LLMStats
    fleet: Fleet
    steps: StepTracker
    plan: StepPlan
    scraper: Scraper | None
    #: With --prometheus-url: the server's figures from Prometheus (then ``scraper`` is None).
    prometheus: PrometheusSource | None
    environment: Environment
    model: str | None
    start_time: float | None
    finished: bool
    results_written_at: float | None

    @property
    def run_dir(self) -> Path | None: ...

    def elapsed_s(self) -> float: ...

    def rows(self) -> list[dict[str, Any]]: ...

    def step_sources(self) -> StepSources: ...

"""Which step and phase the run is in, on the master and on every worker, and the per-step
statistics that hang off it.

The master (or local runner) decides step boundaries with its own clock and announces each
phase change to the workers (a Locust custom message); a request is tagged with the step and
phase it started in, so in-flight requests at a boundary belong to the step they started in and
requests started during a warm-up are left out of that step's statistics.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tokenload.metrics.aggregate import LLMStats

__all__ = ["PHASE_MESSAGE", "StepTracker", "StepWindow"]

PHASE_MESSAGE = "tokenload_phase"


@dataclass(slots=True)
class StepWindow:
    index: int
    concurrency: int | None
    target_rate_rps: float | None
    #: Unix times on the master: the target was reached, the warm-up ended, the step ended.
    start: float
    measure_start: float | None = None
    end: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StepTracker:
    def __init__(self) -> None:
        self.step: int | None = None
        self.phase: str | None = None  # "warmup" | "measure" | None between steps
        self.windows: list[StepWindow] = []
        self.stats: dict[int, LLMStats] = {}
        #: Per step: the client's health reports (max CPU %, loop-lag samples in ms).
        self.cpu_max: dict[int, float] = {}
        self.lag_ms: dict[int, list[float]] = {}

    # -- phase changes (decided on the master, applied everywhere) ---------------------------
    def apply(self, step: int | None, phase: str | None) -> None:
        self.step, self.phase = step, phase

    def begin(self, index: int, concurrency: int | None, rate: float | None, now: float) -> None:
        self.windows.append(StepWindow(index, concurrency, rate, start=now))
        self.apply(index, "warmup")

    def measure(self, index: int, now: float) -> bool:
        w = self.windows[-1]
        if w.index != index or w.measure_start is not None:
            return False
        w.measure_start = now
        self.apply(index, "measure")
        return True

    def end(self, index: int, now: float) -> None:
        w = self.windows[-1]
        if w.index == index and w.end is None:
            if w.measure_start is None:
                w.measure_start = now
            w.end = now
        self.apply(None, None)

    # -- statistics -----------------------------------------------------------------------------
    def record(self, rec: dict[str, Any], itl_ms: list[tuple[float, int]]) -> None:
        if rec.get("phase") == "measure" and rec.get("step") is not None:
            self.stats.setdefault(rec["step"], LLMStats()).record(rec, itl_ms)

    def note_health(self, by_step: dict[int, Any]) -> None:
        """Health samples of one process, by the step they were taken in (see health.py)."""
        for step, (cpu_max, lags) in by_step.items():
            step = int(step)
            self.cpu_max[step] = max(self.cpu_max.get(step, 0.0), cpu_max)
            self.lag_ms.setdefault(step, []).extend(lags)

    def take_stats(self) -> dict[int, dict[str, Any]]:
        """For a worker's report: the per-step stats since the last report, then cleared."""
        out = {step: s.to_dict() for step, s in self.stats.items()}
        self.stats = {}
        return out

    def merge_stats(self, data: dict[int, dict[str, Any]]) -> None:
        for step, d in data.items():
            self.stats.setdefault(int(step), LLMStats()).merge_dict(d)

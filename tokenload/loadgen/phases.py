"""Which step and phase the run is in, on the master and on every worker, and the per-step
statistics that hang off it.

The master (or local runner) decides step boundaries with its own clock and announces each
phase change to the workers (a Locust custom message); a request is tagged with the step and
phase it started in, so in-flight requests at a boundary belong to the step they started in and
requests started during a warm-up are left out of that step's statistics.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.histogram import LogHistogram
from tokenload.metrics.step_tally import new_tally, record_times, tally_record

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
    #: Workload options the step set (e.g. its prompt length), {} when none.
    overrides: dict[str, str] = field(default_factory=dict)
    #: Requests started in the measured part still streaming when the step was judged (the
    #: settle's bound cut the wait); 0 when the decision had every one of them.
    unfinished_at_decision: int = 0
    #: --target-moe: the margins of error asked for ({} when none), and whether the step ended
    #: early because every one was met.
    target_moe: dict[str, float] = field(default_factory=dict)
    ended_on_precision: bool = False
    #: --drain: seconds from the step's end until nothing was in flight (None without it), and
    #: how many requests were still in flight when --settle-timeout cut that wait.
    drain_s: float | None = None
    in_flight_after_drain: int = 0

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
        #: Per step: what *ended* in its measured part (ok requests, input and output tokens),
        #: how many requests were *sent* in it and the tokens *received* in it
        #: (metrics.step_tally), tallied as records arrive where they are kept.
        self.done: dict[int, dict[str, float]] = {}
        #: Per step, for its steady-state check (metrics.steady): (send time, TTFT ms) of the
        #: successful requests sent in its measured part, and when those that ended in it ended.
        self.ttft_by_send: dict[int, list[tuple[float, float]]] = {}
        self.ends: dict[int, list[float]] = {}
        #: Fields of every request tallied per step (a shape that judges requests asks:
        #: :meth:`keep`); empty: nothing is kept.
        self.kept_fields: tuple[str, ...] = ()
        self.kept: dict[int, list[dict[str, Any]]] = {}
        self._future: list[dict[str, Any]] = []
        #: Per step: when this process saw its measured part open and close (perf_counter
        #: seconds; inf while open), the spans a request's tokens are counted in as they arrive
        #: (metrics.step_tally.tokens_by_step).
        self.measured_spans: dict[int, tuple[float, float]] = {}

    # -- phase changes (decided on the master, applied everywhere) ---------------------------
    def apply(self, step: int | None, phase: str | None) -> None:
        if (step, phase) != (self.step, self.phase):
            now = time.perf_counter()
            if self.phase == "measure" and self.step is not None and self.step in self.measured_spans:
                self.measured_spans[self.step] = (self.measured_spans[self.step][0], now)
            if phase == "measure" and step is not None:
                self.measured_spans[step] = (now, float("inf"))
        self.step, self.phase = step, phase

    def begin(
        self,
        index: int,
        concurrency: int | None,
        rate: float | None,
        now: float,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.windows.append(StepWindow(index, concurrency, rate, start=now, overrides=dict(overrides or {})))
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
        future, self._future = self._future, []
        for rec in future:
            self.note_completion(rec, now=float("inf"))

    def precise(self, index: int, targets: dict[str, float]) -> bool:
        """Whether the step's measured requests so far meet every margin of error in ``targets``
        (its window keeps them, for the summary)."""
        from tokenload.metrics.precision import targets_met

        w = self.windows[-1]
        if w.index == index and not w.target_moe:
            w.target_moe = dict(targets)  # the run's targets: kept once per step, not each tick
        stats = self.stats.get(index)
        return stats is not None and targets_met(stats.total.hist, targets)[0]

    def _window(self, index: int) -> StepWindow | None:
        """The window of step ``index`` (the latest, should an index repeat)."""
        return next((w for w in reversed(self.windows) if w.index == index), None)

    def note_precise(self, index: int) -> None:
        if (w := self._window(index)) is not None:
            w.ended_on_precision = True

    def note_drained(self, index: int, seconds: float, left: int) -> None:
        if (w := self._window(index)) is not None:
            w.drain_s, w.in_flight_after_drain = seconds, left

    def note_unfinished(self, index: int, n: int) -> None:
        """The step was judged with ``n`` of its measured requests still streaming."""
        if (w := self._window(index)) is not None:
            w.unfinished_at_decision = n

    # -- statistics -----------------------------------------------------------------------------
    def record(self, rec: dict[str, Any], itl_ms: list[tuple[float, int]] | LogHistogram) -> None:
        if rec.get("phase") == "measure" and rec.get("step") is not None:
            self.stats.setdefault(rec["step"], LLMStats()).record(rec, itl_ms)

    def keep(self, fields: tuple[str, ...]) -> None:
        """From now on, keep ``fields`` (with the step, phase, status and send time) of every
        request the master sees, by step: a shape judging a step's requests reads
        :meth:`requests_of` instead of the records file."""
        self.kept_fields = tuple(dict.fromkeys((*self.kept_fields, *fields)))

    def requests_of(self, index: int) -> list[dict[str, Any]]:
        """The kept requests of step ``index`` (see :meth:`keep`), in the order they arrived."""
        return self.kept.get(index, [])

    def _keep(self, rec: dict[str, Any]) -> None:
        step = rec.get("step")
        if step is None:
            return
        row = {k: rec.get(k) for k in ("step", "phase", "status", "wall_start", *self.kept_fields)}
        self.kept.setdefault(int(step), []).append(row)

    def note_completion(self, rec: dict[str, Any], now: float | None = None) -> None:
        """Tally a finished request into the measured windows it was sent in, ended in and
        received tokens in (:func:`tokenload.metrics.step_tally.tally_record`). A record dated
        after ``now`` (a worker's clock ahead of the master's) waits until the open window has
        ended, so it is judged against the window's real end."""
        if rec.get("status") == "cancelled" or rec.get("wall_start") is None:
            if self.kept_fields:
                self._keep(rec)
            return
        sent, _, end = record_times(rec)
        now = time.time() if now is None else now
        if max(sent, end or sent) > now and self.windows and self.windows[-1].end is None:
            self._future.append(rec)
            return
        if self.kept_fields:
            self._keep(rec)  # here, not above: a record put off to the window's end comes back
        for w in reversed(self.windows):
            a = w.measure_start
            if a is None:
                continue
            b = w.end if w.end is not None else float("inf")
            sent_in, ended_in = tally_record(self._done(w.index), rec, a, b, w.index)
            if sent_in and rec.get("status") == "ok" and rec.get("ttft_ms") is not None:
                self.ttft_by_send.setdefault(w.index, []).append((sent, rec["ttft_ms"]))
            if ended_in:
                self.ends.setdefault(w.index, []).append(end)
            if w.start <= min(sent, end if end is not None else sent):
                break

    def _done(self, index: int) -> dict[str, float]:
        d = self.done.get(index)
        if d is None:
            d = self.done[index] = new_tally()
        return d

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

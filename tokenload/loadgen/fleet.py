"""What a Locust process knows of the run's requests in flight and of its workers: this
process's own counts, and on the master each worker's as of its latest report. Pure (no Locust,
no I/O): loadgen/transport.py feeds it from the workers' reports, loadgen/user.py counts this
process's requests, and the shapes ask it whether a step's requests are all in.

It also counts the output tokens that have arrived, in-flight streams included
(:meth:`Fleet.arrived_tokens`), for the live page's and the exporter's tokens/s: a count taken
only as requests end puts all of a long stream's tokens in the second it ended."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Fleet", "TokenCount"]


class TokenCount(Protocol):
    """A stream in progress, as the fleet reads it (client.openai_stream.StreamState is one)."""

    @property
    def chunk_tokens(self) -> int: ...


@dataclass(slots=True)
class Fleet:
    #: Requests sent and not yet complete in this process (tokenload's /metrics).
    in_flight: int = 0
    #: Of those, the ones started in a step's measured part, by step (this process).
    measured_in_flight: dict[int, int] = field(default_factory=dict)
    #: On the master: each worker's ``measured_in_flight`` and ``in_flight`` as of its latest
    #: report.
    worker_measured_in_flight: dict[str, dict[int, int]] = field(default_factory=dict)
    worker_in_flight: dict[str, int] = field(default_factory=dict)
    #: This process's streams in progress, by identity, each with the tokens it has received.
    streams: set[TokenCount] = field(default_factory=set)
    #: Output tokens received by this process's streams that have ended (counted by chunk).
    ended_tokens: int = 0
    #: On the master: each worker's :meth:`arrived_tokens` as of its latest report (lost workers'
    #: stay: their tokens did arrive).
    worker_arrived_tokens: dict[str, int] = field(default_factory=dict)
    #: On the master: each worker's workload draw counts as of its latest report
    #: (workload.plan.FIT_COUNTS; lost workers' stay).
    worker_fit: dict[str, dict[str, int | None]] = field(default_factory=dict)
    #: On the master: every worker that sent a report.
    workers_seen: set[str] = field(default_factory=set)
    #: On the master: workers lost mid-run (loadgen/workers.py), for summary.json.
    workers_lost: list[dict[str, Any]] = field(default_factory=list)
    #: On the master: workers asked for an immediate report that have not sent it yet.
    awaiting_reports: set[str] = field(default_factory=set)
    #: On the master: the workers the current rate step's schedule was split over, by slot.
    announced_workers: list[str] = field(default_factory=list)

    def started(self, step: int | None, stream: TokenCount | None = None) -> None:
        """A request was sent; ``step`` when it started in that step's measured part; ``stream``
        its state, whose tokens count as they arrive."""
        self.in_flight += 1
        if stream is not None:
            self.streams.add(stream)
        if step is not None:
            self.measured_in_flight[step] = self.measured_in_flight.get(step, 0) + 1

    def ended(self, step: int | None, stream: TokenCount | None = None) -> None:
        """The request :meth:`started` with ``step`` (and ``stream``) ended (however it ended)."""
        self.in_flight -= 1
        if stream is not None and stream in self.streams:
            self.streams.discard(stream)
            self.ended_tokens += stream.chunk_tokens
        if step is not None:
            left = self.measured_in_flight[step] - 1
            if left:
                self.measured_in_flight[step] = left
            else:
                del self.measured_in_flight[step]

    def expect_reports(self, workers: Iterable[str]) -> None:
        self.awaiting_reports = set(workers)

    def note_report(self, worker: str, live: dict[str, Any]) -> None:
        """A worker's report arrived, with its in-flight counts (``live``, see
        :meth:`live_report`)."""
        self.workers_seen.add(worker)
        self.awaiting_reports.discard(worker)
        self.worker_measured_in_flight[worker] = {
            int(step): int(n) for step, n in live.get("measured_in_flight") or []
        }
        self.worker_in_flight[worker] = int(live.get("in_flight") or 0)
        if "arrived_tokens" in live:
            self.worker_arrived_tokens[worker] = int(live["arrived_tokens"])

    def live_report(self) -> dict[str, Any]:
        """This process's counts as a worker sends them ([step, n] pairs: msgpack maps want
        string keys)."""
        return {
            "in_flight": self.in_flight,
            "measured_in_flight": [[step, n] for step, n in self.measured_in_flight.items()],
            "arrived_tokens": self.arrived_tokens(),
        }

    def arrived_tokens(self) -> int:
        """Output tokens this process has received so far, counted by chunk as they arrived:
        those of ended streams and those of the streams in progress. Never decreases."""
        return self.ended_tokens + sum(s.chunk_tokens for s in self.streams)

    def arrived_tokens_total(self) -> int:
        """:meth:`arrived_tokens` of this process plus every worker's as of its latest report
        (a master's own count is zero; a worker's lags its report interval, 3 s)."""
        return self.arrived_tokens() + sum(self.worker_arrived_tokens.values())

    def unfinished(self, step: int, live_workers: Collection[str] = ()) -> int:
        """Requests started in ``step``'s measured part not yet ended: this process's, plus each
        live worker's as of its latest report (a lost worker's are never coming)."""
        n = self.measured_in_flight.get(step, 0)
        return n + sum(c.get(step, 0) for w, c in self.worker_measured_in_flight.items() if w in live_workers)

    def in_flight_total(self, live_workers: Collection[str] = ()) -> int:
        """Requests sent and not yet ended anywhere: this process's, plus each live worker's as
        of its latest report."""
        return self.in_flight + sum(c for w, c in self.worker_in_flight.items() if w in live_workers)

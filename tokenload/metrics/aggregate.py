"""Run-level LLM statistics: per request name, mergeable histograms and counters.

Workers send :meth:`LLMStats.to_dict` and clear; the master merges with :meth:`merge_dict`.
Nothing here averages percentiles: they are always computed from merged buckets.
"""

from __future__ import annotations

from typing import Any

from tokenload.metrics.definitions import (
    coalesced_first_is_late,
    coalesced_first_lateness_ms,
    is_short_output,
)
from tokenload.metrics.histogram import LogHistogram

__all__ = ["AGGREGATE", "LATENCY_METRICS", "LLMStats", "NameStats", "itl_histogram"]

#: The latency metrics kept as histograms, in milliseconds (defined in metrics.definitions).
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
AGGREGATE = "Aggregated"


def itl_histogram(itl_ms: list[tuple[float, int]]) -> LogHistogram:
    """One request's inter-token latencies (``(ms, tokens)`` pairs), binned."""
    h = LogHistogram()
    h.add_pairs(itl_ms)
    return h


class NameStats:
    """Statistics of one request name (or the aggregate)."""

    __slots__ = (
        "backoff_ms",
        "coalesced_first",
        "coalesced_first_late",
        "coalesced_first_late_ms_max",
        "failures",
        "first_reads",
        "hist",
        "input_tokens",
        "ok",
        "output_tokens",
        "send_lag",
        "send_queued",
        "short_outputs",
        "sized_outputs",
        "token_count_mismatches",
    )

    def __init__(self) -> None:
        self.hist = {m: LogHistogram() for m in LATENCY_METRICS}
        self.ok = 0
        self.failures: dict[str, int] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        #: Requests whose server usage and client chunk count disagreed.
        self.token_count_mismatches = 0
        #: Open loop: send lag (ms) of every request sent, and how many waited for a free user.
        self.send_lag = LogHistogram()
        self.send_queued = 0
        #: Closed loop: the pauses (ms) users took after turn-aways before these requests.
        self.backoff_ms = 0.0
        #: Successful requests sent with ignore_eos and a max_tokens, and those that came back
        #: shorter (metrics.definitions.is_short_output).
        self.sized_outputs = 0
        self.short_outputs = 0
        #: Successful requests whose first read is known, those read coalesced, those that may
        #: be dated later than the client's tolerance, and the most lateness a coalesced one
        #: implies (metrics.definitions: coalesced_first_share, coalesced_first_late_share).
        self.first_reads = 0
        self.coalesced_first = 0
        self.coalesced_first_late = 0
        self.coalesced_first_late_ms_max: float | None = None

    @property
    def requests(self) -> int:
        return self.ok + sum(self.failures.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "hist": {m: h.to_dict() for m, h in self.hist.items() if h.count},
            "ok": self.ok,
            "failures": dict(self.failures),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "mismatch": self.token_count_mismatches,
            "send_lag": self.send_lag.to_dict() if self.send_lag.count else None,
            "send_queued": self.send_queued,
            "backoff_ms": self.backoff_ms,
            "sized_outputs": self.sized_outputs,
            "short_outputs": self.short_outputs,
            "first_reads": self.first_reads,
            "coalesced_first": self.coalesced_first,
            "coalesced_first_late": self.coalesced_first_late,
            "coalesced_first_late_ms_max": self.coalesced_first_late_ms_max,
        }

    def merge_dict(self, data: dict[str, Any]) -> None:
        for m, h in data["hist"].items():
            self.hist[m].merge(LogHistogram.from_dict(h))
        self.ok += data["ok"]
        for cls, n in data["failures"].items():
            self.failures[cls] = self.failures.get(cls, 0) + n
        self.input_tokens += data["input_tokens"]
        self.output_tokens += data["output_tokens"]
        self.token_count_mismatches += data["mismatch"]
        if data.get("send_lag"):
            self.send_lag.merge(LogHistogram.from_dict(data["send_lag"]))
        self.send_queued += data.get("send_queued", 0)
        self.backoff_ms += data.get("backoff_ms", 0.0)
        self.sized_outputs += data.get("sized_outputs", 0)
        self.short_outputs += data.get("short_outputs", 0)
        self.first_reads += data.get("first_reads", 0)
        self.coalesced_first += data.get("coalesced_first", 0)
        self.coalesced_first_late += data.get("coalesced_first_late", 0)
        self._late(data.get("coalesced_first_late_ms_max"))

    def _late(self, ms: float | None) -> None:
        if ms is not None and (
            self.coalesced_first_late_ms_max is None or ms > self.coalesced_first_late_ms_max
        ):
            self.coalesced_first_late_ms_max = ms


class LLMStats:
    """All names plus the aggregate. ``record`` is called once per finished request."""

    def __init__(self) -> None:
        self.by_name: dict[str, NameStats] = {}
        self.total = NameStats()
        #: Requests abandoned by the load generator (users stopped mid-stream); not failures.
        self.cancelled = 0

    def _targets(self, name: str) -> tuple[NameStats, NameStats]:
        ns = self.by_name.get(name)
        if ns is None:
            ns = self.by_name[name] = NameStats()
        return ns, self.total

    def record(self, rec: dict[str, Any], itl_ms: list[tuple[float, int]] | LogHistogram) -> None:
        """Count one request record (see :mod:`tokenload.metrics.records`). Its inter-token
        latencies come as ``(ms, tokens)`` pairs or already binned (:func:`itl_histogram`: a
        request's ITL is binned once, then merged into every histogram that counts it)."""
        itl = itl_ms if isinstance(itl_ms, LogHistogram) else itl_histogram(itl_ms)
        for ns in self._targets(rec["name"]):
            fc = rec["failure_class"]
            if fc is None:
                ns.ok += 1
            else:
                ns.failures[fc] = ns.failures.get(fc, 0) + 1
            ns.input_tokens += rec["input_tokens"] or 0
            ns.output_tokens += rec["output_tokens"] or 0
            if rec["token_count_diff"]:
                ns.token_count_mismatches += 1
            lag = rec.get("send_lag_ms")
            if lag is not None:
                ns.send_lag.add(lag)
                if rec.get("send_queued"):
                    ns.send_queued += 1
            ns.backoff_ms += rec.get("backoff_ms") or 0.0
            short = is_short_output(
                fc is None,
                rec.get("ignore_eos"),
                rec.get("requested_output_tokens"),
                rec["output_tokens"] or 0,
            )
            if short is not None:
                ns.sized_outputs += 1
                ns.short_outputs += short
            coalesced = rec.get("first_read_coalesced")
            if fc is None and coalesced is not None:
                ns.first_reads += 1
                if coalesced:
                    events, tpot = rec.get("first_read_events"), rec["tpot_ms"]
                    ns.coalesced_first += 1
                    ns.coalesced_first_late += coalesced_first_is_late(True, events, tpot)
                    ns._late(coalesced_first_lateness_ms(True, events, tpot))
            # Latencies of failed requests would mix two populations: only successes count.
            if fc is None:
                for m in ("ttft_ms", "tpot_ms", "e2e_ms"):
                    v = rec[m]
                    if v is not None:
                        ns.hist[m].add(v)
                ns.hist["itl_ms"].merge(itl)

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": {n: s.to_dict() for n, s in self.by_name.items()},
            "total": self.total.to_dict(),
            "cancelled": self.cancelled,
        }

    def merge_dict(self, data: dict[str, Any]) -> None:
        for name, d in data["names"].items():
            ns = self.by_name.get(name)
            if ns is None:
                ns = self.by_name[name] = NameStats()
            ns.merge_dict(d)
        self.total.merge_dict(data["total"])
        self.cancelled += data.get("cancelled", 0)

    def clear(self) -> None:
        self.by_name.clear()
        self.total = NameStats()
        self.cancelled = 0

    @property
    def empty(self) -> bool:
        return self.total.requests == 0

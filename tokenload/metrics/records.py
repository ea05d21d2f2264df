"""The per-request record: one flat dict per request, ok or failed, with its partial timings."""

from __future__ import annotations

import math
from typing import Any

from tokenload.metrics.definitions import Timing

__all__ = ["RECORD_FIELDS", "itl_summary", "make_record"]

#: Column order of requests.jsonl / requests.parquet. Times in ms; wall_start in Unix seconds.
RECORD_FIELDS = (
    "request_id",
    "worker",
    "name",
    "wall_start",
    "start_monotonic_s",
    "response_id",
    "step",
    "phase",
    "status",
    "failure_class",
    "http_status",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "input_tokens",
    "requested_input_tokens",
    "output_tokens",
    "output_tokens_source",
    "token_count_diff",
    "content_chunks",
    "itl_count",
    "itl_mean_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "itl_max_ms",
    "finish_reason",
    "detail",
    "measured_tokens_by_step",
)


def itl_summary(itl_ms: list[tuple[float, int]]) -> dict[str, float | int | None]:
    """Exact per-request ITL summary (weighted by tokens per chunk)."""
    n = sum(k for _, k in itl_ms)
    if not n:
        return {
            "itl_count": 0,
            "itl_mean_ms": None,
            "itl_p50_ms": None,
            "itl_p99_ms": None,
            "itl_max_ms": None,
        }
    ordered = sorted(itl_ms)

    def at(q: float) -> float:
        rank = max(1, math.ceil(q * n - 1e-9))  # nearest rank; the epsilon absorbs float drift
        seen = 0
        for v, k in ordered:
            seen += k
            if seen >= rank:
                return v
        return ordered[-1][0]

    return {
        "itl_count": n,
        "itl_mean_ms": sum(v * k for v, k in itl_ms) / n,
        "itl_p50_ms": at(0.5),
        "itl_p99_ms": at(0.99),
        "itl_max_ms": ordered[-1][0],
    }


def make_record(
    *,
    request_id: str,
    worker: str,
    name: str,
    wall_start: float,
    start_monotonic_s: float,
    response_id: str | None,
    timing: Timing,
    step: int | None = None,
    phase: str | None = None,
    requested_input_tokens: int | None = None,
    requested_output_tokens: int | None = None,
    ignore_eos: bool | None = None,
    send_queued: bool | None = None,
    backoff_ms: float | None = None,
    first_read_events: int | None = None,
    first_read_coalesced: bool | None = None,
    failure_class: str | None,
    http_status: int | None,
    input_tokens: int | None,
    usage_output_tokens: int | None,
    chunk_tokens: int,
    content_chunks: int,
    finish_reason: str | None,
    detail: str,
) -> dict[str, Any]:
    if usage_output_tokens is not None:
        output_tokens, source = usage_output_tokens, "usage"
        diff = usage_output_tokens - chunk_tokens
    else:
        output_tokens, source, diff = chunk_tokens, "chunks", 0
    rec: dict[str, Any] = {
        "request_id": request_id,
        "worker": worker,
        "name": name,
        "wall_start": wall_start,
        # perf_counter at send: CLOCK_MONOTONIC on Linux, shared by every process on the host,
        # so records can be joined with a local server's trace (see bench/client_overhead.py).
        "start_monotonic_s": start_monotonic_s,
        "response_id": response_id,
        "step": step,
        "phase": phase,
        "status": "ok" if failure_class is None else "failed",
        "failure_class": failure_class,
        "http_status": http_status,
        "ttft_ms": timing.ttft_ms,
        "tpot_ms": timing.tpot_ms,
        "e2e_ms": timing.e2e_ms,
        "send_lag_ms": timing.send_lag_ms,
        # Open loop: no user was free at the intended time (the pool of users was exhausted).
        "send_queued": send_queued,
        # Closed loop: the pause before this request after a turn-away (FORMULAS["backoff_ms"]).
        "backoff_ms": backoff_ms,
        "input_tokens": input_tokens,
        # The exact prompt length the workload asked for (None when it could only estimate).
        "requested_input_tokens": requested_input_tokens,
        "output_tokens": output_tokens,
        # What the request asked for: max_tokens, and whether ignore_eos was sent (then a
        # conforming server returns exactly max_tokens; see short_output_share).
        "requested_output_tokens": requested_output_tokens,
        "ignore_eos": ignore_eos,
        "output_tokens_source": source,
        "token_count_diff": diff,
        "content_chunks": content_chunks,
        # Events waiting at the read that brought the first token, and whether that read came
        # late with tokens behind it (metrics.definitions: coalesced_first_share).
        "first_read_events": first_read_events,
        "first_read_coalesced": first_read_coalesced,
        "finish_reason": finish_reason,
        "detail": detail,
    }
    rec.update(itl_summary(timing.itl_ms))
    return rec

"""What one request adds to a step's measured part: the counts behind a step's rates
(``requests_per_s``, ``input_tokens_per_s``, ``output_tokens_per_s``; their formulas are in
:data:`tokenload.metrics.definitions.FORMULAS`). One place, used by a run's master and by the
virtual sweep, so both tally a record the same way.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from tokenload.metrics.definitions import tokens_in_window

__all__ = ["new_tally", "record_times", "tally_record", "tokens_by_step"]


def new_tally() -> dict[str, float]:
    """A step's tally: ok requests that *ended* in its measured part and their input and output
    tokens (per-request means come from these), requests *sent* in it, and the input and output
    tokens *received* in it (the rates)."""
    return {
        "requests": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "sent": 0,
        "input_tokens_received": 0.0,
        "output_tokens_received": 0.0,
    }


def record_times(rec: dict[str, Any]) -> tuple[float, float | None, float | None]:
    """A record's send time, first-token time and end time (Unix seconds; None when unknown).
    ``wall_start`` is when the wait began (an open loop's intended time), the origin of TTFT
    and E2E; the send itself was ``send_lag_ms`` later."""
    t0 = rec["wall_start"]
    sent = t0 + (rec.get("send_lag_ms") or 0.0) / 1000.0
    first = t0 + rec["ttft_ms"] / 1000.0 if rec.get("ttft_ms") is not None else None
    end = t0 + rec["e2e_ms"] / 1000.0 if rec.get("e2e_ms") is not None else None
    return sent, first, end


def tally_record(
    d: dict[str, float], rec: dict[str, Any], a: float, b: float, step: int | None = None
) -> tuple[bool, bool]:
    """Add ``rec`` to the tally ``d`` of step ``step``'s measured part ``[a, b)``; returns
    whether it was sent in it and whether it ended in it (ok). Only ok requests count towards
    the rates. Its output tokens are those the client counted in the step's measured part as
    they arrived (``measured_tokens_by_step``, :func:`tokens_by_step`); a record without that
    field has its tokens spread evenly between its first and last token
    (:func:`tokenload.metrics.definitions.tokens_in_window`)."""
    sent, first, end = record_times(rec)
    sent_in = a <= sent < b
    if sent_in:
        d["sent"] += 1
    if rec.get("status") != "ok" or end is None:
        return sent_in, False
    ended_in = a <= end < b
    if ended_in:
        d["requests"] += 1
        d["input_tokens"] += rec.get("input_tokens") or 0
        d["output_tokens"] += rec.get("output_tokens") or 0
    if first is None and (rec.get("output_tokens") or 0) > 0:
        first = end  # a record without its TTFT: its tokens count at its end
    if first is not None:
        if a <= first < b:
            d["input_tokens_received"] += rec.get("input_tokens") or 0
        by_step = rec.get("measured_tokens_by_step")
        if by_step is not None:
            d["output_tokens_received"] += by_step.get(str(step), 0.0) if step is not None else 0.0
        else:  # a record without its arrivals (an older run): spread evenly
            d["output_tokens_received"] += tokens_in_window(first, end, rec.get("output_tokens") or 0, a, b)
    return sent_in, ended_in


def tokens_by_step(
    content_times: Sequence[float],
    content_tokens: Sequence[int],
    spans: dict[int, tuple[float, float]],
    output_tokens: int,
    chunk_tokens: int | None = None,
) -> dict[str, float]:
    """The output tokens a request received in each step's measured part: its content chunks'
    tokens by their arrival times (``content_times``, the clock of ``spans``: perf_counter
    seconds), scaled so they sum to ``output_tokens`` (the server's usage count, when it differs
    from the chunks'; ``chunk_tokens``: their sum, when the caller has it). Keys are step indices
    as strings; {} when no chunk fell in a span."""
    out: dict[str, float] = {}
    if not content_times or not spans:
        return out
    first, last = content_times[0], content_times[-1]
    chunk_total = sum(content_tokens) if chunk_tokens is None else chunk_tokens
    scale = output_tokens / chunk_total if chunk_total else 0.0
    for step, (a, b) in spans.items():
        if b <= first or a > last:
            continue
        i, j = bisect_left(content_times, a), bisect_left(content_times, b)
        n = sum(content_tokens[i:j])
        if n:
            out[str(step)] = n * scale
    return out

"""The one definition of every per-request latency metric. Reports print ``FORMULAS`` verbatim.

All times are ``time.perf_counter()`` seconds taken by the client; results are milliseconds.

* ``t_start``: just before the request is sent (connection set-up included: the user waits for it).
* content chunk: an SSE chunk that carries output tokens. Role-only and usage-only chunks do not
  count. A chunk whose text is "" because its token is an incomplete UTF-8 piece (vLLM sends
  those) does count; a chunk with "" text *and* a finish_reason is the stream's terminator and
  does not. When the server reports usage on every chunk (vLLM's ``continuous_usage_stats``) the
  token count of a chunk is the change in ``completion_tokens``; with logprobs it is the number
  of tokens listed; otherwise 1.
* ``t_end``: when the last byte of the stream arrived (``[DONE]`` or the end of the body).
* ``t_intended`` (open-loop rate steps only): when the arrival schedule meant the request to be
  sent. The user's wait starts then, so TTFT and E2E are measured from it and the send lag is
  reported beside them; a load generator that falls behind cannot hide it (coordinated omission).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "CLIENT_CPU_LIMIT_PERCENT",
    "CLIENT_LAG_LIMIT_MS",
    "CLIENT_SEND_LAG_LIMIT_MS",
    "COALESCED_FIRST_SHARE",
    "FORMULAS",
    "Timing",
    "coalesced_first_is_late",
    "coalesced_first_lateness_ms",
    "compute_timing",
    "is_short_output",
    "tokens_in_window",
    "ttft_outside_engine_ms",
]

#: How late (ms) the client may be before its own timing is not trusted: its event loop's lag p95
#: (results.summary: ``client_bound``) and the lateness a coalesced first read may give a TTFT
#: (``coalesced_first_late_share``) share this one tolerance. A first token dated by the next
#: one's packet (k = 2) at a TPOT of 6.7-8.3 ms is late by no more than a loop lag the client
#: already accepts; one CI run of 3c7ca13 on a busy host judged two such steps 'client' when every
#: coalesced read counted (2026-12-05).
CLIENT_LAG_LIMIT_MS = 10.0
#: Above this CPU share (of what the process may use) the client's own timing is not trusted:
#: the step is flagged ``client_bound`` (results.summary).
CLIENT_CPU_LIMIT_PERCENT = 90.0
#: Open loop: send lag p99 above this, with users free to send, means the client fell behind.
CLIENT_SEND_LAG_LIMIT_MS = 10.0
#: Above this share of successful requests had their first token read coalesced and possibly
#: dated later than the client's tolerance (by a later token's packet, (k - 1) x TPOT > CLIENT_LAG_LIMIT_MS:
#: FORMULAS["coalesced_first_late_share"]), beyond sampling noise
#: (intervals.share_exceeds: one late read among 50 requests is not a pattern), the step is
#: flagged ``client_bound``: the TTFT p99 rests on the slowest 1 % of requests, so when more than
#: 1 % may be dated late the p99 itself may be one of them.
COALESCED_FIRST_SHARE = 0.01

FORMULAS: dict[str, str] = {
    "ttft_ms": "TTFT = t_first_content_chunk - t_start",
    "e2e_ms": "E2E = t_end - t_start",
    "tpot_ms": "TPOT = (E2E - TTFT) / (output_tokens - 1), for output_tokens >= 2",
    "itl_ms": "ITL = (t_chunk_i - t_chunk_{i-1}) / k_i, counted k_i times, for content chunk i of k_i tokens",
    "output_tokens": "server usage.completion_tokens when reported, else the sum of k_i over content chunks",
    "input_tokens": "server usage.prompt_tokens when reported, else the client's own count (may be unknown)",
    "send_lag_ms": "open loop: send lag = t_start - t_intended; TTFT and E2E then count from t_intended",
    "queue_time_ms": "server-side: vllm:request_queue_time_seconds (taken in by the engine -> first "
    "scheduled; vLLM V1 takes requests in between steps, so the wait for a running step is not in it)",
    "ttft_outside_queue_and_prefill_ms": "server-side: mean of vllm:time_to_first_token_seconds - mean of "
    "vllm:request_queue_time_seconds - mean of vllm:request_prefill_time_seconds over the step: the API "
    "server's time and, on V1 under load, the wait for the engine's running step",
    "short_output_share": "short outputs / sized requests: successful requests sent with ignore_eos whose "
    "output_tokens < max_tokens, over successful requests sent with ignore_eos",
    "output_tokens_per_s": "step output tokens/s = output tokens of ok requests received in the measured "
    "part / its seconds, each content chunk's k_i counted when it arrived (scaled to usage); a record "
    "without its chunks' counts: its first token at t_start + TTFT, the other output_tokens - 1 spread "
    "evenly over (t_start + TTFT, t_start + E2E]",
    "input_tokens_per_s": "step input tokens/s = input_tokens of ok requests whose first token arrived in "
    "the measured part / its seconds (the prompt is consumed by then)",
    "requests_per_s": "step requests/s = ok requests that ended in the measured part / its seconds",
    "backoff_ms": "closed loop: the pause a user took before this request because the target turned its last "
    "one away (HTTP 429 or 503) or could not be reached: 50 ms, doubling to 1 s while it lasts",
    "backoff_share": "closed loop: the backoff_ms of the measured part's requests / (users x the measured "
    "part's seconds): the share of the asked concurrency the users spent waiting out turn-aways",
    "coalesced_first_share": "successful requests whose first content was read with k >= 2 events waiting "
    "and more than 1 ms after its bytes arrived (or with no receive stamp), over successful requests; "
    "such a first token may be dated up to (k - 1) x TPOT late (coalesced_first_late_ms)",
    "coalesced_first_late_share": "coalesced first reads that may be dated more than the client's "
    f"lag limit late ((k - 1) x TPOT > {CLIENT_LAG_LIMIT_MS:g} ms, or TPOT unknown), over successful "
    f"requests whose first read is known; above {COALESCED_FIRST_SHARE * 100:g} % beyond sampling noise the "
    "step is client_bound",
}


def is_short_output(
    ok: bool, ignore_eos: bool | None, requested: int | None, output_tokens: int
) -> bool | None:
    """Whether a request stopped short of the length it asked for (see ``short_output_share``);
    None when the request does not count (failed, no ignore_eos, or no requested length)."""
    if not ok or not ignore_eos or requested is None:
        return None
    return output_tokens < requested


def coalesced_first_lateness_ms(
    coalesced: bool | None, events: int | None, tpot_ms: float | None
) -> float | None:
    """How late a coalesced first read may date the first token: (k - 1) x TPOT, the first of k
    tokens a token gap apart dated by the last (see ``coalesced_first_share``); None when the
    read was not coalesced or TPOT is unknown."""
    if not coalesced or events is None or tpot_ms is None:
        return None
    return (events - 1) * tpot_ms


def coalesced_first_is_late(coalesced: bool | None, events: int | None, tpot_ms: float | None) -> bool:
    """Whether a first read may date its token later than the client's tolerance
    (``coalesced_first_late_share``): coalesced, and (k - 1) x TPOT above CLIENT_LAG_LIMIT_MS or
    unknown (a lateness that cannot be bounded counts)."""
    if not coalesced:
        return False
    late = coalesced_first_lateness_ms(True, events, tpot_ms)
    return late is None or late > CLIENT_LAG_LIMIT_MS


@dataclass(slots=True)
class Timing:
    """Derived metrics of one request. ``None`` where a metric is undefined for it."""

    ttft_ms: float | None
    e2e_ms: float | None
    tpot_ms: float | None
    #: ITL as (gap_ms, count) pairs: a chunk carrying k tokens contributes (gap / k, k).
    itl_ms: list[tuple[float, int]]
    #: Open loop: how late the request was sent against its schedule. None: closed loop.
    send_lag_ms: float | None = None


def compute_timing(
    t_start: float,
    content_times: list[float],
    content_tokens: list[int],
    t_end: float | None,
    output_tokens: int,
    t_intended: float | None = None,
) -> Timing:
    """Apply the formulas above to one request's raw timestamps (seconds)."""
    send_lag_ms = None
    if t_intended is not None:
        send_lag_ms = max(0.0, (t_start - t_intended) * 1000.0)
        t_start = min(t_start, t_intended)
    ttft_ms = (content_times[0] - t_start) * 1000.0 if content_times else None
    e2e_ms = (t_end - t_start) * 1000.0 if t_end is not None else None
    tpot_ms = None
    if ttft_ms is not None and e2e_ms is not None and output_tokens >= 2:
        tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1)
    itl: list[tuple[float, int]] = []
    prev = content_times[0] if content_times else 0.0
    for i in range(1, len(content_times)):
        t = content_times[i]
        k = content_tokens[i]
        if k > 0:
            itl.append(((t - prev) * 1000.0 / k, k))
        prev = t
    return Timing(ttft_ms, e2e_ms, tpot_ms, itl, send_lag_ms)


def tokens_in_window(first_s: float, last_s: float, tokens: int, a: float, b: float) -> float:
    """A request's output tokens received in ``[a, b)`` (``FORMULAS["output_tokens_per_s"]``):
    its first token at ``first_s``, the other ``tokens - 1`` spread evenly over
    ``(first_s, last_s]``. A request's records carry its first and last token times, not each
    token's, so a window edge inside a stream splits its tokens pro rata; summed over requests
    this counts what arrived in a window even when requests outlive it, where counting a request
    when it ends puts all its tokens in the window it ended in."""
    if tokens <= 0:
        return 0.0
    first = 1.0 if a <= first_s < b else 0.0
    rest = tokens - 1
    if rest == 0:
        return first
    if last_s <= first_s:  # every token in one read
        return float(tokens) if a <= first_s < b else 0.0
    overlap = min(last_s, b) - max(first_s, a)
    return first + (rest * overlap / (last_s - first_s) if overlap > 0 else 0.0)


def ttft_outside_engine_ms(step: dict[str, Any]) -> float | None:
    """A step's server TTFT mean less its queue and prefill means, ms (None without them):
    ``FORMULAS["ttft_outside_queue_and_prefill_ms"]``."""
    server = step.get("server") or {}
    parts = [(server.get(k) or {}).get("mean") for k in ("ttft_ms", "queue_time_ms", "prefill_time_ms")]
    if any(p is None for p in parts):
        return None
    return parts[0] - parts[1] - parts[2]

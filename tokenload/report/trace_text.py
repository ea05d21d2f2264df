"""A trace replay in sentences and a table, for report.md and report.html: the trace's own
statistics next to what was sent and what the server saw, and offered against achieved
arrivals over time. Pure: from summary.json's ``trace``, its steps and the request records."""

from __future__ import annotations

from typing import Any

from tokenload.report.tables import fmt
from tokenload.workload.trace import mean_rate

__all__ = ["trace_arrivals_table", "trace_lines"]


def _dist(d: dict[str, float]) -> str:
    return f"mean {d['mean']:.0f}, p50 {d['p50']:.0f}, p90 {d['p90']:.0f}, p99 {d['p99']:.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def trace_lines(
    trace: dict[str, Any], steps: list[dict[str, Any]], requests: list[dict[str, Any]] | None = None
) -> list[str]:
    """A trace replay in sentences: the trace's own statistics next to what was sent (the
    replay's request records) and what the server saw."""
    sends = sorted(
        r["wall_start"] + (r.get("send_lag_ms") or 0.0) / 1000.0
        for r in requests or []
        if r.get("wall_start") is not None and r.get("status") != "cancelled"
    )
    sent = len(sends) if requests is not None else None
    # Sent as the trace's rate is offered: gaps per second from the first send to the last (a
    # step's achieved_rate_rps divides by its measured part, which runs on past the trace's end).
    achieved = mean_rate(len(sends), sends[-1] - sends[0]) if len(steps) == 1 and len(sends) > 1 else None
    left = trace.get("skipped_rows")
    lines = [
        f"Trace {trace['source']} ({trace['format']}): {trace['rows']} rows over {trace['duration_s']:.1f} s"
        + (f", {left} left out (failed in the trace, or outside --trace-window)" if left else "")
        + f"; mean rate {fmt(trace.get('mean_rate_rps'), 2)} req/s offered"
        + (f", {fmt(achieved, 2)} req/s sent (first send to last)" if achieved is not None else "")
        + ".",
        f"Input tokens {_dist(trace['input_tokens'])}; output tokens {_dist(trace['output_tokens'])}.",
    ]
    if sent is not None and sent < trace["rows"]:
        lines.append(
            f"Only {sent} of the {trace['rows']} rows were sent: the rest were still waiting for a free "
            "user when the replay ended (every --max-in-flight user was busy: the server fell behind the "
            "trace, or raise --max-in-flight). The load measured is less than the trace's."
        )
    windows = trace.get("windows") or []
    if windows:
        by_index = {st.get("index"): st for st in steps}
        parts = []
        for w in windows:
            st = by_index.get(w["window"]) or {}
            verdict = (st.get("verdict") or {}).get("bottleneck") or "not run"
            parts.append(
                f"step {w['window']}: {w['start_s']:.1f}-{w['end_s']:.1f} s, rows {w['rows'][0]}-"
                f"{w['rows'][1] - 1}, {fmt(w.get('mean_rate_rps'), 2)} req/s, {verdict}"
            )
        lines.append(
            f"Replayed as {len(windows)} steps (--trace-steps), each a window of the trace played from "
            f"its first row and judged on its own measured part, the windows compared as rate steps "
            f"ordered by rate (their length mixes may differ): {'; '.join(parts)}."
        )
    implied, server = trace.get("implied_prefix_hit_rate"), trace.get("server_prefix_hit_rate")
    if implied is not None or server is not None:
        lines.append(
            f"Prefix reuse: the trace's hash_ids imply a hit rate of {_pct(implied)} of prompt tokens "
            f"(a cache of unbounded size, {trace['block_size']}-token blocks); the server's prefix "
            f"cache hit {_pct(server)} (vllm:prefix_cache_hits / vllm:prefix_cache_queries)."
        )
    return lines


def trace_arrivals_table(
    trace: dict[str, Any], requests: list[dict[str, Any]], bins: int = 10
) -> tuple[list[str], list[list[str]]]:
    """Offered against achieved arrivals over the replay: per time bin, the requests the trace
    scheduled in it and the requests that were sent in it (``wall_start`` is when a request was
    due, plus its ``send_lag_ms`` when it was sent), each as req/s, and the send lag p99."""
    sent = [r for r in requests if r.get("wall_start") is not None and r.get("status") != "cancelled"]
    if not sent:
        return [], []
    # Trace time: from the replay's first arrival, or with --trace-steps from each window's own
    # first arrival (the steps are apart by their settles) plus the window's start in the trace.
    windows = {w["window"]: w["start_s"] for w in trace.get("windows") or []}
    firsts: dict[Any, float] = {}
    for r in sent:
        key = r.get("step") if windows else None
        firsts[key] = min(firsts.get(key, r["wall_start"]), r["wall_start"])

    def trace_time(r: dict[str, Any]) -> float:
        key = r.get("step") if windows else None
        return r["wall_start"] - firsts[key] + windows.get(key, 0.0)

    width = max(trace.get("duration_s") or 0.0, 1e-9) / bins
    due = [0] * bins
    done = [0] * bins
    lags: list[list[float]] = [[] for _ in range(bins)]
    for r in sent:
        t = trace_time(r)
        i = min(bins - 1, int(t / width))
        due[i] += 1
        lag = r.get("send_lag_ms") or 0.0
        j = min(bins - 1, max(0, int((t + lag / 1000.0) / width)))
        done[j] += 1
        lags[i].append(lag)
    rows = []
    for i in range(bins):
        ls = sorted(lags[i])
        p99 = ls[min(len(ls) - 1, int(0.99 * len(ls)))] if ls else None
        rows.append(
            [
                f"{i * width:.1f}-{(i + 1) * width:.1f}",
                fmt(due[i] / width, 2),
                fmt(done[i] / width, 2),
                fmt(p99, 1),
            ]
        )
    return ["seconds", "offered req/s", "sent req/s", "send lag p99 ms"], rows

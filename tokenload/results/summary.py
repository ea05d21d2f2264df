"""``summary.json``: the documented contract of a run (see SUMMARY.md), and ``steps.csv``.

Per step: the client's latencies over requests that *started* in the step's measured part, its
rates over requests that *ended* in that part, the server's figures over the same window, and
the load generator's own health.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Sequence
from typing import Any

from tokenload import __version__
from tokenload.analysis.judge import judge_steps
from tokenload.analysis.knee import find_knee
from tokenload.analysis.oversaturation import waiting_trend
from tokenload.loadgen.phases import StepWindow
from tokenload.metrics.aggregate import LLMStats, NameStats
from tokenload.metrics.definitions import (
    CLIENT_CPU_LIMIT_PERCENT,
    CLIENT_LAG_LIMIT_MS,
    CLIENT_SEND_LAG_LIMIT_MS,
    COALESCED_FIRST_SHARE,
    FORMULAS,
)
from tokenload.metrics.histogram import LogHistogram
from tokenload.metrics.intervals import mean_interval, quantile_interval, share_exceeds
from tokenload.metrics.precision import targets_met
from tokenload.metrics.steady import steady_state
from tokenload.metrics.step_tally import new_tally
from tokenload.report.redact import redact
from tokenload.results.run_inputs import RunFacts, StepSources
from tokenload.servermetrics.summary import END_SCRAPE_GRACE_S, summarize_window, tick_series

__all__ = [
    "READABLE_SCHEMA_VERSIONS",
    "SCHEMA_VERSION",
    "SHORT_OUTPUT_SHARE",
    "build_summary",
    "step_summaries",
    "step_summary",
    "steps_csv",
]

#: 2: steps gained ci95, low_sample_percentiles, short_output_share and unfinished_at_decision;
#: later, within 2 (fields added, none changed): steady_state, precision, drain and the client's
#: coalesced_first_share, coalesced_first_late_ms_max and bound_by (version 1 files are read too).
#: 3: output_tokens_per_s and input_tokens_per_s count tokens as they arrived in the measured
#: part (metrics.step_tally), not when their requests ended; steps gained tokens_per_request
#: (tokenload compare leaves output_tokens_per_s out between a version 3 run and an older one);
#: later, within 3: the client's coalesced_first_late_share.
SCHEMA_VERSION = 3
#: Every schema version this tokenload reads.
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
#: Open loop: above this share of arrivals waited for a free user: the offered rate was not sent.
POOL_EXHAUSTED_SHARE = 0.01
#: Above this share of requests sent with ignore_eos came back shorter than max_tokens: the
#: server (or a gateway dropping ignore_eos) did not produce the load that was asked for. A
#: conforming vLLM returns exactly max_tokens with ignore_eos (the planner keeps every request
#: inside max_model_len), so any short output is non-conformance; 1 % leaves room for a rare
#: abort without hiding a systematic one.
SHORT_OUTPUT_SHARE = 0.01
#: Closed loop: above this share of the asked concurrency spent waiting out turn-aways
#: (FORMULAS["backoff_share"]: HTTP 429/503 or an unreachable target) the step did not offer the
#: load it names (flag ``turned_away``). 1 % as for the two flags above: a 429 now and then
#: costs a user 50 ms; a server that keeps refusing costs its users whole seconds.
TURNED_AWAY_SHARE = 0.01

_SERVER_KEYS = {
    "kv_cache_usage_ratio": "kv_cache_usage_ratio",
    "requests_running": "requests_running",
    "requests_waiting": "requests_waiting",
    "requests_waiting_capacity": "requests_waiting_capacity",
    "queue_time_ms": "queue_time_ms",
    "prefill_time_ms": "prefill_time_ms",
    "decode_time_ms": "decode_time_ms",
    "ttft_ms": "ttft_ms",
    "itl_ms": "itl_ms",
    "preemptions": "preemptions",
    "generation_tokens": "generation_tokens",
    "prompt_tokens": "prompt_tokens",
    "estimated_flops": "estimated_flops",
    "estimated_read_bytes": "estimated_read_bytes",
    "iteration_tokens": "iteration_tokens",
    "prefix_cache_hits": "prefix_cache_hits",
    "prefix_cache_queries": "prefix_cache_queries",
    "scraped_s": "scraped_s",
}


def trace_block(stats: dict[str, Any] | None, steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """summary.json's ``trace``: the trace's own statistics (workload/trace.py) and, next to its
    implied prefix reuse, the server's = prefix-cache hit tokens / queried tokens over the steps
    (None when the server does not export them)."""
    if stats is None:
        return None

    def total(key: str) -> float | None:
        vals = [((st.get("server") or {}).get(key) or {}).get("increase") for st in steps]
        return sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None

    hits, queries = total("prefix_cache_hits"), total("prefix_cache_queries")
    return {**stats, "server_prefix_hit_rate": hits / queries if hits is not None and queries else None}


def _hist(h: LogHistogram) -> dict[str, float | None]:
    if not h.count:
        return {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "max": None}
    return {
        "mean": h.mean,
        "p50": h.quantile(0.5),
        "p90": h.quantile(0.9),
        "p95": h.quantile(0.95),
        "p99": h.quantile(0.99),
        "max": h.max,
    }


_QUANTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def _intervals(h: LogHistogram) -> dict[str, Any]:
    """The 95 % interval of each reported mean and percentile (metrics/intervals.py): ``[low,
    high]``, a side ``None`` where the data cannot bound it; ``n``, the requests it rests on."""
    out: dict[str, Any] = {"n": h.count, "mean": mean_interval(h)}
    for name, q in _QUANTILES.items():
        out[name] = quantile_interval(h, q) if h.count else [None, None]
    return out


def _low_sample(ci: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Per metric, the percentiles whose interval is open on a side: too few requests for them."""
    out = {}
    for metric, c in ci.items():
        weak = [name for name in _QUANTILES if c["n"] and None in c[name]]
        if weak:
            out[metric] = weak
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def step_summary(
    window: StepWindow,
    stats: LLMStats | None,
    done: dict[str, float],
    server: dict[str, Any] | None,
    cpu: float | None,
    lag: list[float],
) -> dict[str, Any]:
    ns = stats.total if stats else NameStats()
    start = window.measure_start if window.measure_start is not None else window.start
    end = window.end if window.end is not None else time.time()
    span = max(end - start, 1e-9)
    lag_p99, lag_p95 = _pct(lag, 0.99), _pct(lag, 0.95)
    sent = ns.send_lag.count
    queued_share = ns.send_queued / sent if sent else 0.0
    send_lag_p99 = ns.send_lag.quantile(0.99) if sent else None
    flags = []
    reads = ns.first_reads
    coalesced_share = ns.coalesced_first / reads if reads else None
    late_share = ns.coalesced_first_late / reads if reads else None
    # What made the client's own timing untrustworthy; a sustained stall, not one hiccup in a
    # short step: the loop lag's p95 decides.
    bound_by = [
        name
        for name, over in (
            ("cpu_percent_max", cpu is not None and cpu > CLIENT_CPU_LIMIT_PERCENT),
            ("loop_lag_ms_p95", lag_p95 is not None and lag_p95 > CLIENT_LAG_LIMIT_MS),
            (
                "send_lag_ms_p99",
                send_lag_p99 is not None
                and send_lag_p99 > CLIENT_SEND_LAG_LIMIT_MS
                and queued_share <= POOL_EXHAUSTED_SHARE,
            ),
            (
                "coalesced_first_late_share",
                share_exceeds(ns.coalesced_first_late, reads, COALESCED_FIRST_SHARE),
            ),
        )
        if over
    ]
    if bound_by:
        flags.append("client_bound")
    if queued_share > POOL_EXHAUSTED_SHARE:
        flags.append("pool_exhausted")
    short_share = ns.short_outputs / ns.sized_outputs if ns.sized_outputs else None
    if short_share is not None and short_share > SHORT_OUTPUT_SHARE:
        flags.append("short_output")
    backoff_share = (
        ns.backoff_ms / 1000.0 / (window.concurrency * span) if window.concurrency else None
    )  # FORMULAS["backoff_share"]
    if backoff_share is not None and backoff_share > TURNED_AWAY_SHARE:
        flags.append("turned_away")
    failures = dict(ns.failures)
    ci = {m: _intervals(ns.hist[m]) for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}
    targets = window.target_moe
    precision = None
    if targets:  # --target-moe: each figure's margin of error against what was asked
        met, margins = targets_met(ns.hist, targets)
        precision = {
            "target_moe": dict(targets),
            "margin_of_error": margins,
            "met": met,
            "ended_early": window.ended_on_precision,
        }
        if not met:
            flags.append("imprecise")
    step: dict[str, Any] = {
        "index": window.index,
        "concurrency": window.concurrency,
        "target_rate_rps": window.target_rate_rps,
        # The step's own prompt length spec (a context sweep), null when it used the run's.
        "prompt_tokens": window.overrides.get("prompt_tokens"),
        "start": window.start,
        "measure_start": start,
        "end": end,
        "measured_s": span,
        "requests": {"ok": ns.ok, "failed": sum(failures.values()), "by_failure_class": failures},
        "ttft_ms": _hist(ns.hist["ttft_ms"]),
        "tpot_ms": _hist(ns.hist["tpot_ms"]),
        "itl_ms": _hist(ns.hist["itl_ms"]),
        "e2e_ms": _hist(ns.hist["e2e_ms"]),
        "send_lag_ms": _hist(ns.send_lag) if sent else None,
        # 95 % intervals of the latencies above (independent requests assumed; see intervals.py),
        # and the percentiles too few requests stand behind (an interval open on a side).
        "ci95": ci,
        "low_sample_percentiles": _low_sample(ci),
        # FORMULAS["requests_per_s"], ["input_tokens_per_s"], ["output_tokens_per_s"]: requests
        # that ended in the measured part, tokens that arrived in it (metrics.step_tally).
        "requests_per_s": done["requests"] / span,
        "input_tokens_per_s": done["input_tokens_received"] / span,
        "output_tokens_per_s": done["output_tokens_received"] / span,
        # Means over the ok requests that ended in the measured part (null when none did).
        "tokens_per_request": (
            {
                "input": done["input_tokens"] / done["requests"],
                "output": done["output_tokens"] / done["requests"],
            }
            if done["requests"]
            else None
        ),
        # Open loop: requests sent in the measured part per second, against the target.
        "achieved_rate_rps": done["sent"] / span if window.target_rate_rps is not None else None,
        "queued_for_user_share": queued_share if sent else None,
        # Requests of the measured part still streaming when the step was judged (0: complete).
        "unfinished_at_decision": window.unfinished_at_decision,
        # Of the successful requests sent with ignore_eos: the share that came back shorter than
        # max_tokens (metrics.definitions FORMULAS["short_output_share"]); null when none counted.
        "short_output_share": short_share,
        # Closed loop: the share of the asked concurrency its users spent waiting out turn-aways
        # (FORMULAS["backoff_share"]); null in open loop.
        "backoff_share": backoff_share,
        # --target-moe: the margins asked for and reached (null without it).
        "precision": precision,
        # --drain: how long after the step's end nothing was in flight, and what was left when
        # --settle-timeout cut the wait (null without it).
        "drain": (
            None
            if window.drain_s is None
            else {"s": window.drain_s, "left_in_flight": window.in_flight_after_drain}
        ),
        "server": _server_fields(server) if server else None,
        "client": {
            "cpu_percent_max": cpu,
            "loop_lag_ms_p95": lag_p95,
            "loop_lag_ms_p99": lag_p99,
            "send_lag_ms_p99": send_lag_p99,
            # First tokens read late with later ones waiting (FORMULAS["coalesced_first_share"]),
            # those of them that may be late by more than the client's tolerance
            # (FORMULAS["coalesced_first_late_share"]), and the most lateness one implies.
            "coalesced_first_share": coalesced_share,
            "coalesced_first_late_share": late_share,
            "coalesced_first_late_ms_max": ns.coalesced_first_late_ms_max,
            # The limits passed (the client_bound flag's evidence); empty when none.
            "bound_by": bound_by,
        },
        "flags": flags,
    }
    return step


def _flag_worker_loss(steps: list[dict[str, Any]], lost: list[dict[str, Any]]) -> None:
    """Flag ``worker_lost`` on every step open between a lost worker's last sign of life and the
    moment it was found missing: its load was short and its last requests were never reported."""
    for step in steps:
        if any(w["last_seen_at"] < step["end"] and step["start"] <= w["lost_at"] for w in lost):
            step["flags"].append("worker_lost")


def _flag_target_changes(steps: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
    """Flag ``replicas_changed`` on every step during whose measured part a scraped replica
    appeared or vanished, with those changes (``replica_events``): the server's figures for it
    sum a different set of replicas before and after (a counter's increase counts from the
    replica's first scrape), so they are not the figures of one server set."""
    for step in steps:
        inside = [e for e in events if step["measure_start"] <= e["t"] <= step["end"]]
        if inside:
            step["flags"].append("replicas_changed")
            step["replica_events"] = [dict(e) for e in inside]


def replica_windows(points: Sequence[Any], t0: float, t1: float) -> dict[str, dict[str, Any]] | None:
    """Each scraped replica's own server figures over ``[t0, t1]`` (the fields of a step's
    ``server``), when at least two replicas answered in it; None otherwise. Keyed by the
    replica's /metrics URL without its credentials: the keys reach verdicts and reports."""
    # The window's points, once (summarize_window reads nothing outside [t0, t1 + grace]),
    # failed scrapes included: it counts them.
    window = [p for p in points if t0 <= p.t <= t1 + END_SCRAPE_GRACE_S]
    targets = sorted({p.target for p in window if p.ok})
    if len(targets) < 2:
        return None
    out = {}
    for target in targets:
        own = summarize_window([p for p in window if p.target == target], t0, t1)
        out[redact(target)] = _server_fields(own)
    return out


def _server_fields(window: dict[str, Any]) -> dict[str, Any]:
    """A window's server figures (summarize_window's or Prometheus') as a step's ``server``."""
    return {k: window.get(v) for k, v in _SERVER_KEYS.items()}


def step_summaries(src: StepSources) -> list[dict[str, Any]]:
    """The steps so far (the last one may be open), each with its verdict. Called at the end of
    a run and, by the shapes that choose steps from their results, at the end of each step."""
    tracker = src.tracker
    windows = [w for w in tracker.windows if w.end is not None or w is tracker.windows[-1]]
    spans = [(w.measure_start or w.start, w.end or time.time()) for w in windows]
    empty = new_tally()
    points = src.points
    steps = []
    for w, (a, b) in zip(windows, spans, strict=True):
        steps.append(
            step_summary(
                w,
                tracker.stats.get(w.index),
                tracker.done.get(w.index, empty),
                src.server_window(a, b),  # scraped points or Prometheus (--prometheus-url)
                tracker.cpu_max.get(w.index),
                tracker.lag_ms.get(w.index, []),
            )
        )
        # Several replicas scraped: each one's own figures, for its own verdict (analysis.replicas).
        replicas = replica_windows(points, a, b) if points else None
        if replicas is None and src.replica_windows is not None:
            own = src.replica_windows(a, b)  # Prometheus, by its replica label
            replicas = {name: _server_fields(w) for name, w in own.items()} if own else None
        if replicas is not None:
            steps[-1]["server_replicas"] = replicas
        # Over-saturation: the server's waiting queue grew through the step (scraped series).
        trend = waiting_trend(tick_series(points, "requests_waiting", a, b)) if points else None
        steps[-1]["waiting_trend"] = trend
        if trend and trend["oversaturated"]:
            steps[-1]["flags"].append("oversaturated")
        # Steady state: the measured part's first and last thirds agree (metrics.steady).
        steady = steady_state(tracker.ttft_by_send.get(w.index, []), tracker.ends.get(w.index, []), a, b)
        steps[-1]["steady_state"] = steady
        if steady and steady["drifting"]:
            steps[-1]["flags"].append("drifting")
    _flag_worker_loss(steps, list(src.workers_lost))
    _flag_target_changes(steps, list(src.target_events))
    judge_steps(steps, peaks=src.gpu_peaks, max_num_seqs=src.max_num_seqs)
    return steps


def build_summary(src: StepSources, facts: RunFacts, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of a finished run: its steps (judged), the knee and the run's facts."""
    steps = step_summaries(src)
    knee = find_knee(steps, [s["verdict"] for s in steps])  # step_summaries judged them
    return {
        "schema_version": SCHEMA_VERSION,
        "tokenload_version": __version__,
        "run_id": facts.run_id,
        "host": facts.host,
        "model": facts.model,
        "started_at": facts.started_at,
        "ended_at": facts.ended_at,
        "config": facts.config,
        "formulas": FORMULAS,
        "steps": steps,
        "knee": knee,
        "gpu_peaks": src.gpu_peaks,
        "server_max_num_seqs": src.max_num_seqs,
        "totals": rows[-1] if rows else None,
        "workers": sorted(facts.workers) or ["local"],
        "workers_lost": list(src.workers_lost),
        # The shape's own findings (the knee search's probes and outcome, a stop reason).
        "search": facts.search,
        "trace": trace_block(facts.trace, steps),
        "scrape_failures": facts.scrape_failures,
        "scrape_targets": facts.scrape_targets,
        "workload_fit": facts.workload_fit,
    }


_CSV_COLUMNS = [
    ("index", lambda s: s["index"]),
    ("concurrency", lambda s: s["concurrency"]),
    ("target_rate_rps", lambda s: s["target_rate_rps"]),
    ("measured_s", lambda s: round(s["measured_s"], 3)),
    ("ok", lambda s: s["requests"]["ok"]),
    ("failed", lambda s: s["requests"]["failed"]),
    ("requests_per_s", lambda s: s["requests_per_s"]),
    ("output_tokens_per_s", lambda s: s["output_tokens_per_s"]),
    ("input_tokens_per_s", lambda s: s["input_tokens_per_s"]),
]
for _m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
    for _q in ("p50", "p90", "p99"):
        _CSV_COLUMNS.append((f"{_m}_{_q}", lambda s, m=_m, q=_q: s[m][q]))
for _m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
    for _q in ("mean", "p50", "p99"):
        for _side, _i in (("lo", 0), ("hi", 1)):
            _CSV_COLUMNS.append(
                (
                    f"{_m}_{_q}_ci95_{_side}",
                    lambda s, m=_m, q=_q, i=_i: (
                        (((s.get("ci95") or {}).get(m) or {}).get(q)) or [None, None]
                    )[i],
                )
            )
for _k in ("kv_cache_usage_ratio", "requests_running", "requests_waiting"):
    _CSV_COLUMNS.append((f"server_{_k}_mean", lambda s, k=_k: ((s["server"] or {}).get(k) or {}).get("mean")))
_CSV_COLUMNS.append(
    ("server_preemptions", lambda s: ((s["server"] or {}).get("preemptions") or {}).get("increase"))
)
_CSV_COLUMNS.append(
    ("server_queue_time_ms_p50", lambda s: ((s["server"] or {}).get("queue_time_ms") or {}).get("p50"))
)
_CSV_COLUMNS.append(("client_bound", lambda s: "client_bound" in s["flags"]))
_CSV_COLUMNS.append(("short_output_share", lambda s: s.get("short_output_share")))
_CSV_COLUMNS.append(("backoff_share", lambda s: s.get("backoff_share")))
_CSV_COLUMNS.append(("bottleneck", lambda s: (s.get("verdict") or {}).get("bottleneck")))


def steps_csv(summary: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([name for name, _ in _CSV_COLUMNS])
    for s in summary["steps"]:
        w.writerow(["" if (v := f(s)) is None else v for _, f in _CSV_COLUMNS])
    return buf.getvalue()

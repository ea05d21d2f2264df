"""The per-step table, verdicts in words and failure counts, shared by report.md, report.html
and the terminal. Pure: rows from summary.json's steps, formatted as text or markdown."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tokenload.analysis.knee import judged_as_server
from tokenload.analysis.signals import load_of
from tokenload.analysis.thresholds import CLOSE_CALL
from tokenload.results.prediction import prediction_label, prediction_profile

__all__ = [
    "BOTTLENECK_WORDS",
    "COLUMNS",
    "INTERVAL_NOTE",
    "VERDICT_FLAGS",
    "evidence_words",
    "failure_counts",
    "flag_warnings",
    "fmt",
    "interval_table",
    "load_label",
    "markdown_table",
    "no_knee_sentence",
    "prediction_sentence",
    "rate_text",
    "replica_table",
    "scrape_target_lines",
    "slo_search_table",
    "step_cells",
    "text_table",
    "verdict_label",
    "verdict_notes",
    "verdict_sentence",
    "what_if_table",
]

#: Each diagnosis label in plain words (tokenload.analysis.diagnosis.BOTTLENECKS).
BOTTLENECK_WORDS = {
    "none": "not saturated: still scaling",
    "compute": "saturated: compute-bound (FLOP/s)",
    "memory_bandwidth": "saturated: memory-bandwidth-bound (weights and KV reads)",
    "kv_capacity": "saturated: the KV cache is full",
    "scheduler_limit": "saturated: running requests pinned at the scheduler's cap",
    "frontend": "saturated: the API server (HTTP, tokenization) before the engine's queue",
    "imbalance": "saturated replicas while others have room: the router's split",
    "client": "the load generator could not keep up: latencies are not the server's",
    "errors": "failing: failures crossed the threshold",
    "unknown": "not judged, or saturated with no resource the evidence can name",
}

COLUMNS = (
    "step",
    "load",
    "req/s",
    "out tok/s",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "KV use mean/max",
    "waiting",
    "preempt",
    "verdict",
)


def fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:.{digits}f}"


def _g(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def users(n: Any) -> str:
    """A count of users as a person reads it: '1 user', '8 users'."""
    return f"{n} user" + ("" if n == 1 else "s")


def load_label(step: dict[str, Any]) -> str:
    """A step's load as a person reads it; a context sweep's step adds its prompt length."""
    prompt = f", prompt {step['prompt_tokens']}" if step.get("prompt_tokens") else ""
    if step.get("concurrency") is not None:
        return users(step["concurrency"]) + prompt
    rate = step.get("target_rate_rps")
    return "-" if rate is None else f"{rate_text(rate)} req/s{prompt}"


def rate_text(rps: float) -> str:
    """A request rate to four significant figures (a trace window's mean rate, a searched one:
    3.66, not 3.65981), whole numbers from 1,000 up."""
    return f"{rps:,.0f}" if rps >= 1000 else f"{rps:.4g}"


#: The step flags said next to its verdict, in the reports and on the console: the load was
#: not the one asked for, or the figures it was judged on need care.
VERDICT_FLAGS = (
    "client_bound",
    "pool_exhausted",
    "short_output",
    "turned_away",
    "replicas_changed",
    "drifting",
)


def verdict_label(step: dict[str, Any]) -> str:
    """A step's verdict with the flags that qualify it and whether it was a close call
    (tokenload.analysis.thresholds.Thresholds.saturation_margin)."""
    name = _g(step, "verdict", "bottleneck") or "-"
    flags = step.get("flags") or []
    said = [f for f in VERDICT_FLAGS if f in flags and not (f == "client_bound" and name == "client")]
    if _g(step, "verdict", "close_call"):
        said.append("close call")
    return name + (f" ({', '.join(said)})" if said else "")


def verdict_notes(flags: list[str], verdict: dict[str, Any] | None) -> list[str]:
    """What the live page says next to a step's verdict (its own label beside it): every flag of
    the step, a step whose throughput was not judged (too few requests), and a close call in the
    reports' words (:data:`~tokenload.analysis.thresholds.CLOSE_CALL`)."""
    notes = list(flags)
    if verdict and verdict.get("low_sample"):
        notes.append("few requests: throughput not judged")
    if verdict and verdict.get("close_call"):
        notes.append(f"close call: {CLOSE_CALL}")
    return notes


#: (metric, statistic) pairs the interval table shows.
INTERVAL_CELLS = (
    ("ttft_ms", "p50"),
    ("ttft_ms", "p99"),
    ("tpot_ms", "p50"),
    ("tpot_ms", "p99"),
    ("e2e_ms", "p50"),
)


def _interval_cell(step: dict[str, Any], metric: str, stat: str, digits: int) -> str:
    value = _g(step, metric, stat)
    ci = _g(step, "ci95", metric, stat)
    if value is None:
        return "-"
    if not ci:
        return fmt(value, digits)
    lo, hi = ci
    low_n = " (low n)" if lo is None or hi is None else ""
    left = "?" if lo is None else fmt(lo, digits)
    right = "?" if hi is None else fmt(hi, digits)
    return f"{fmt(value, digits)} [{left}, {right}]{low_n}"


def interval_table(steps: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: each step's latency figures with their 95 % intervals (``?``: a side the
    data cannot bound, too few requests); no rows for steps of summaries without intervals."""
    header = ["step", "load", "n", *(f"{m.split('_')[0].upper()} {q} ms [95 %]" for m, q in INTERVAL_CELLS)]
    rows = []
    for step in steps:
        if not step.get("ci95"):
            continue
        n = _g(step, "ci95", "ttft_ms", "n")
        cells = [_interval_cell(step, m, q, 2 if m == "tpot_ms" else 1) for m, q in INTERVAL_CELLS]
        rows.append([str(step.get("index", "")), load_label(step), str(n if n is not None else "-"), *cells])
    return header, rows


INTERVAL_NOTE = (
    "95 % intervals: a percentile's between two order statistics (binomial ranks, distribution-free), "
    "a mean's from the central limit theorem; both assume independent requests, so repeated runs can "
    "differ by more (tokenload compare --baseline-runs measures that). '?' and 'low n': too few "
    "requests to bound that side (a p99 needs about 370)."
)


def flag_warnings(steps: list[dict[str, Any]]) -> list[str]:
    """A sentence per step whose measured load is not the load that was asked for, or whose
    figures were still moving (not steady)."""
    out = []
    for step in steps:
        share = step.get("short_output_share")
        if "short_output" in (step.get("flags") or []) and share is not None:
            out.append(
                f"Step {step.get('index')} at {load_label(step)}: {100 * share:.0f} % of the requests sent "
                "with ignore_eos stopped before max_tokens (flagged short_output): the server, or a "
                "gateway that drops ignore_eos, produced fewer output tokens than asked, so this step "
                "measured a lighter load than the one requested."
            )
        backoff = step.get("backoff_share")
        if "turned_away" in (step.get("flags") or []) and backoff is not None:
            out.append(
                f"Step {step.get('index')} at {load_label(step)}: its users spent {100 * backoff:.0f} % of "
                "their time waiting out turn-aways (flagged turned_away): the server answered 429 or 503, "
                "or could not be reached, and each such user paused 50 ms to 1 s before its next request, "
                "so this step offered less than its concurrency."
            )
        queued = step.get("queued_for_user_share")
        if "pool_exhausted" in (step.get("flags") or []) and queued is not None:
            sent = step.get("achieved_rate_rps")
            out.append(
                f"Step {step.get('index')} at {load_label(step)}: {100 * queued:.0f} % of its arrivals "
                "waited for a free user (flagged pool_exhausted"
                + (f"; {fmt(sent, 2)} req/s sent" if sent is not None else "")
                + "): every --max-in-flight user was busy (the server fell behind, or users were "
                "still making their prompts), so the offered rate was not sent on time."
            )
        changes = step.get("replica_events") or []
        if "replicas_changed" in (step.get("flags") or []) and changes:
            said = ", ".join(
                f"{'+' if e.get('event') == 'target_added' else '-'} {e.get('target')}"
                f" at {e['t'] - step['measure_start']:.0f} s" for e in changes
            )  # fmt: skip
            out.append(
                f"Step {step.get('index')} at {load_label(step)}: the replicas scraped changed in its "
                f"measured part ({said}; flagged replicas_changed): its server figures sum two sets of "
                "replicas and a new replica's counters count only from its first scrape, so read them "
                "with care."
            )
        steady = step.get("steady_state") or {}
        if "drifting" in (step.get("flags") or []) and steady.get("drifting"):
            t1, t3 = steady.get("ttft_p50_ms") or [None, None]
            r1, r3 = steady.get("requests_per_s") or [None, None]
            moved = []
            if "ttft_p50" in steady["drifting"]:
                moved.append(f"TTFT p50 {fmt(t1)} -> {fmt(t3)} ms")
            if "completions" in steady["drifting"]:
                moved.append(f"completions {fmt(r1, 2)} -> {fmt(r3, 2)} req/s")
            # Not "a longer step settles it": make demo's 256-user step (192 users joining at once,
            # 64-token requests) still drifted with 18 s steps and a 7 s warmup (2026-12-06).
            out.append(
                f"Step {step.get('index')} at {load_label(step)} was still drifting (flagged drifting: "
                f"{', '.join(moved)} from the first to the last third of its measured part, beyond "
                "sampling noise and by more than 10 %): its figures depend on how long it ran. A longer "
                "--warmup or --step-duration lets a filling queue or cache settle; closed-loop users "
                "that joined together with requests of one length can stay in phase for many requests."
            )
    return out


def step_cells(step: dict[str, Any]) -> list[str]:
    """One row of COLUMNS for a step of summary.json."""
    srv = step.get("server") or {}
    kv_mean, kv_max = _g(srv, "kv_cache_usage_ratio", "mean"), _g(srv, "kv_cache_usage_ratio", "max")
    kv = "-" if kv_mean is None and kv_max is None else f"{fmt(kv_mean, 2)}/{fmt(kv_max, 2)}"
    return [
        str(step.get("index", "")),
        load_label(step),
        fmt(step.get("requests_per_s"), 2),
        fmt(step.get("output_tokens_per_s")),
        fmt(_g(step, "ttft_ms", "p50")),
        fmt(_g(step, "ttft_ms", "p99")),
        fmt(_g(step, "tpot_ms", "p50"), 2),
        fmt(_g(step, "tpot_ms", "p99"), 2),
        kv,
        fmt(_g(srv, "requests_waiting", "mean")),
        fmt(_g(srv, "preemptions", "increase"), 0),
        verdict_label(step),
    ]


def replica_table(steps: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Each replica's own figures and verdict per step, for a run that scraped several (the
    steps table's KV use is their mean: a full replica beside an empty one reads half full).
    No rows for one server."""
    header = ["step", "load", "replica", "KV use mean/max", "running", "waiting", "preempt", "verdict"]
    rows = []
    for step in steps:
        replicas = step.get("server_replicas") or {}
        if len(replicas) < 2:
            continue
        judged = (step.get("verdict") or {}).get("replicas") or {}
        for url, srv in sorted(replicas.items()):
            kv_mean, kv_max = _g(srv, "kv_cache_usage_ratio", "mean"), _g(srv, "kv_cache_usage_ratio", "max")
            rows.append(
                [
                    str(step.get("index", "")),
                    load_label(step),
                    url,
                    "-" if kv_mean is None and kv_max is None else f"{fmt(kv_mean, 2)}/{fmt(kv_max, 2)}",
                    fmt(_g(srv, "requests_running", "mean")),
                    fmt(_g(srv, "requests_waiting", "mean")),
                    fmt(_g(srv, "preemptions", "increase"), 0),
                    (judged.get(url) or {}).get("bottleneck") or "-",
                ]
            )
    return header, rows


def text_table(header: Iterable[str], rows: list[list[str]], left: int = 2) -> str:
    """Aligned columns for a terminal: the first ``left`` columns and the last left-aligned, the
    numbers between them right-aligned."""
    header = list(header)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        out = []
        for i, (c, w) in enumerate(zip(cells, widths, strict=True)):
            out.append(c.ljust(w) if i < left or i == len(cells) - 1 else c.rjust(w))
        return "  ".join(out).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def _md_cell(c: str) -> str:
    return c.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Iterable[str], rows: list[list[str]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def evidence_words(verdict: dict[str, Any] | None) -> list[str]:
    """``metric = value (rule)`` per piece of evidence."""
    out = []
    for ev in (verdict or {}).get("evidence") or []:
        value = ev.get("value")
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        out.append(f"{ev.get('metric')} = {f'{value:g}' if isinstance(value, float) else value} "
                   f"({ev.get('rule')})")  # fmt: skip
    return out


def verdict_sentence(step: dict[str, Any]) -> str:
    """One plain sentence: load, what it delivered, and the verdict."""
    name = _g(step, "verdict", "bottleneck")
    words = BOTTLENECK_WORDS.get(name, name or "no verdict")
    flags = step.get("flags") or []
    tail = " (flagged client_bound: the load generator was busy)" if "client_bound" in flags else ""
    secondary = _g(step, "verdict", "secondary")
    if secondary:
        tail += f" (a close second: {secondary})"
    if _g(step, "verdict", "close_call"):
        tail += f" (a close call: {CLOSE_CALL})"
    replicas = _g(step, "verdict", "replicas")
    if replicas:
        tail += " (replicas: " + ", ".join(f"{u} {r['bottleneck']}" for u, r in replicas.items()) + ")"
    return (
        f"Step {step.get('index')} at {load_label(step)}: {words}{tail} - "
        f"{fmt(step.get('output_tokens_per_s'))} output tokens/s, "
        f"{fmt(step.get('requests_per_s'), 2)} req/s, "
        f"TTFT p50 {fmt(_g(step, 'ttft_ms', 'p50'))} ms, TPOT p50 {fmt(_g(step, 'tpot_ms', 'p50'), 2)} ms."
    )


def failure_counts(
    steps: list[dict[str, Any]], requests: Iterable[dict[str, Any]]
) -> tuple[list[str], list[list[str]]]:
    """Failures by class: the whole run (every record in requests.jsonl, warm-ups included) and
    each step's measured part (summary.json). Header and rows; no rows when nothing failed."""
    run: Counter[str] = Counter(
        r.get("failure_class") or "unknown" for r in requests if r.get("status") not in ("ok", None)
    )
    per_step = [Counter(_g(s, "requests", "by_failure_class") or {}) for s in steps]
    classes = sorted(set(run).union(*per_step))
    header = ["class", "whole run", *(f"step {s.get('index')} (measured)" for s in steps)]
    rows = [[c, str(run.get(c, 0)), *(str(p.get(c, 0)) for p in per_step)] for c in classes]
    return header, rows


def no_knee_sentence(summary: dict[str, Any]) -> str:
    """Why a run has no knee: a context sweep has none to find (one load, longer prompts step by
    step: it measures the cost of length); steps that could not be judged say nothing either way
    (the highest judged load is the claim, and the unjudged ones are named); any other run was
    not saturated up to its highest load."""
    search = summary.get("search") or {}
    if search.get("shape") == "context_sweep":
        return "A context sweep: one load, prompt length changing by step (no knee to find)."
    steps = summary.get("steps") or []  # a search's are in the order it probed them
    judged = [s for s in steps if judged_as_server(s.get("verdict"))]
    top = max(judged, key=load_of, default=None)
    above = [
        s
        for s in steps
        if not judged_as_server(s.get("verdict")) and (top is None or load_of(s) > load_of(top))
    ]
    if above:
        names = ", ".join(f"step {s.get('index')} ({load_label(s)})" for s in above)
        upto = f" up to {load_label(top)}" if top else ""
        return (
            f"Not saturated at any judged step{upto}; {names} could not be judged (see its verdict): "
            "no knee can be claimed above it."
        )
    upto = f" up to {load_label(top)}" if top else ""
    return f"Not saturated at any step{upto}: raise the load to find the knee."


def prediction_sentence(summary: dict[str, Any]) -> str | None:
    """For a run directory ``tokenload plan --out`` wrote: that its figures are predicted, and by
    what (None for a measured run)."""
    label = prediction_label(summary)
    if label is None:
        return None
    return (
        f"Prediction, not a measurement: {label} "
        f"(profile {prediction_profile(summary) or '?'}). Every figure below is the emulator's."
    )


def what_if_table(what_if: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of ``tokenload plan --set``: per what-if, the top step's throughput, the
    knee, the capacity (under the SLO, when one was given) and the replicas for the target."""
    header = ["change", "top out tok/s", "knee", "capacity", "req/s there", "replicas"]
    rows = []
    for w in what_if:
        top = max((s["output_tokens_per_s"] for s in w.get("steps") or []), default=None)
        knee = w.get("knee")
        cap = w.get("slo_capacity")
        rep = w.get("replicas") or {}
        rows.append(
            [
                str(w.get("set")),
                fmt(top),
                f"step {knee['step']} {knee['bottleneck']}" if knee else "not reached",
                "-" if cap is None else f"{cap['load']:g} {str(cap['load_unit']).split()[0]}",
                "-" if cap is None else fmt(cap["requests_per_s"], 2),
                str(rep["replicas"]) if "replicas" in rep else "-",
            ]
        )
    return header, rows


def _check_cell(check: dict[str, Any]) -> str:
    lo, hi = (check.get("ci95") or [None, None])[:2]
    share = check["name"] in ("attainment", "failed_share")
    digits = 3 if share else 1
    ci = f" [{fmt(lo, digits)}, {fmt(hi, digits)}]" if lo is not None or hi is not None else ""
    return f"{fmt(check.get('value'), digits)}{ci} vs {check['limit']:g}: {check['outcome']}"


def slo_search_table(search: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The SLO search's probes in the order they ran: rate, outcome, each item's value with its
    95 % interval against the limit, and the step's verdict."""
    names: list[str] = []
    for p in search.get("probes") or []:
        for c in p.get("checks") or []:
            if c["name"] not in names:
                names.append(c["name"])
    header = ["step", "rate req/s", "outcome", *names, "verdict"]
    rows = []
    for p in search.get("probes") or []:
        by = {c["name"]: c for c in p.get("checks") or []}
        repeat = f" (repeat {p['repeat']})" if p.get("repeat") else " (screen)" if p.get("screen") else ""
        rows.append(
            [
                str(p["step"]),
                f"{p['rate_rps']:.4g}",
                p["outcome"] + repeat,
                *[_check_cell(by[n]) if n in by else "-" for n in names],
                p.get("bottleneck") or "-",
            ]
        )
    return header, rows


def scrape_target_lines(targets: dict[str, Any] | None) -> list[str]:
    """What --metrics-discover found, in sentences: the replicas at start and at the end, each
    change at its clock time, and the lookups that failed."""
    if not targets:
        return []
    start, end = targets.get("at_start") or [], targets.get("at_end") or []
    lines = [
        f"replicas scraped through `{targets.get('discover')}` (looked up every "
        f"{targets.get('every_s'):g} s): {len(start)} at start, {len(end)} at the end"
    ]
    for e in targets.get("events") or []:
        sign = "appeared" if e.get("event") == "target_added" else "vanished"
        when = (
            time.strftime("%H:%M:%S", time.localtime(e["t"])) if isinstance(e.get("t"), int | float) else "?"
        )
        lines.append(
            f"{e.get('target')} {sign} at {when} (scraped {'from' if sign == 'appeared' else 'until'} then)"
        )
    failed = targets.get("lookup_failures") or {}
    if failed:
        said = ", ".join(f"{n} {reason}" for reason, n in sorted(failed.items()))
        lines.append(f"failed lookups ({said}): the replicas found before were kept")
    return lines

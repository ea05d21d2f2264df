"""The per-step table, verdicts in words and failure counts, shared by report.md, report.html
and the terminal. Pure: rows from summary.json's steps, formatted as text or markdown."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = [
    "BOTTLENECK_WORDS",
    "COLUMNS",
    "evidence_words",
    "failure_counts",
    "fmt",
    "load_label",
    "markdown_table",
    "step_cells",
    "text_table",
    "verdict_sentence",
]

#: Each diagnosis label in plain words (tokenload.analysis.diagnosis.BOTTLENECKS).
BOTTLENECK_WORDS = {
    "none": "not saturated: still scaling",
    "compute": "saturated: compute-bound (FLOP/s)",
    "memory_bandwidth": "saturated: memory-bandwidth-bound (weights and KV reads)",
    "kv_capacity": "saturated: the KV cache is full",
    "scheduler_limit": "saturated: running requests pinned at the scheduler's cap",
    "frontend": "saturated: the API server (HTTP, tokenization) before the engine's queue",
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


def load_label(step: dict[str, Any]) -> str:
    if step.get("concurrency") is not None:
        n = step["concurrency"]
        return f"{n} user" + ("" if n == 1 else "s")
    rate = step.get("target_rate_rps")
    return "-" if rate is None else f"{rate:g} req/s"


def _verdict_name(step: dict[str, Any]) -> str:
    name = _g(step, "verdict", "bottleneck") or "-"
    if "client_bound" in (step.get("flags") or []) and name != "client":
        name += " (client_bound)"
    return name


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
        _verdict_name(step),
    ]


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

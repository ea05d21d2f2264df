"""The LLM metrics table: rows from :class:`LLMStats`, as text, CSV or web-UI rows. Pure."""

from __future__ import annotations

import csv
import io
from typing import Any

from tokenload.metrics.aggregate import AGGREGATE, LLMStats, NameStats

__all__ = ["COLUMNS", "format_text", "stats_rows", "to_csv"]

_PCTS = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"))

#: (key, title) of every column, in order.
COLUMNS: list[tuple[str, str]] = [
    ("name", "Name"),
    ("requests", "Requests"),
    ("failures", "Failures"),
    ("output_tokens_per_s", "Out tok/s"),
]
for _m, _title in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
    COLUMNS.append((f"{_m}_mean", f"{_title} mean ms"))
    COLUMNS.extend((f"{_m}_{label}", f"{_title} {label} ms") for _, label in _PCTS)
COLUMNS += [("input_tokens", "In tokens"), ("output_tokens", "Out tokens")]


def _row(name: str, ns: NameStats, elapsed_s: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name,
        "requests": ns.requests,
        "failures": sum(ns.failures.values()),
        "failure_classes": dict(ns.failures),
        "output_tokens_per_s": (ns.output_tokens / elapsed_s) if elapsed_s else None,
        "input_tokens": ns.input_tokens,
        "output_tokens": ns.output_tokens,
    }
    for m, h in ns.hist.items():
        row[f"{m}_mean"] = h.mean
        for q, label in _PCTS:
            row[f"{m}_{label}"] = h.quantile(q)
    return row


def stats_rows(stats: LLMStats, elapsed_s: float | None = None) -> list[dict[str, Any]]:
    rows = [_row(name, ns, elapsed_s) for name, ns in sorted(stats.by_name.items())]
    rows.append(_row(AGGREGATE, stats.total, elapsed_s))
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.2f}"
    return str(v)


def format_text(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table for the terminal, one metric per line block to stay readable."""
    lines = []
    head = f"{'Name':<28}{'reqs':>8}{'fails':>7}{'out tok/s':>11}"
    for title in ("TTFT", "TPOT", "ITL", "E2E"):
        head += f"{title + ' p50':>11}{title + ' p99':>11}"
    lines.append(head)
    lines.append("-" * len(head))
    for r in rows:
        line = f"{r['name'][:27]:<28}{r['requests']:>8}{r['failures']:>7}{_fmt(r['output_tokens_per_s']):>11}"
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            line += f"{_fmt(r[f'{m}_p50']):>11}{_fmt(r[f'{m}_p99']):>11}"
        lines.append(line)
    failures: dict[str, int] = rows[-1]["failure_classes"] if rows else {}
    if failures:
        lines.append("Failures by class: " + ", ".join(f"{k}={v}" for k, v in sorted(failures.items())))
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([title for _, title in COLUMNS])
    for r in rows:
        w.writerow(["" if r[k] is None else r[k] for k, _ in COLUMNS])
    return buf.getvalue()

"""report.md: a short summary of a run for a pull request or a ticket. Pure: model in, text out."""

from __future__ import annotations

import json
import time
from typing import Any

from tokenload.report.capacity import replicas_scraped
from tokenload.report.draws import draws_heading, draws_lines, draws_table
from tokenload.report.model import ReportModel, reconstructed_command
from tokenload.report.redact import redact
from tokenload.report.search_text import search_lines
from tokenload.report.tables import (
    COLUMNS,
    INTERVAL_NOTE,
    evidence_words,
    failure_counts,
    flag_warnings,
    fmt,
    interval_table,
    load_label,
    markdown_table,
    prediction_sentence,
    replica_table,
    scrape_target_lines,
    slo_search_table,
    step_cells,
    verdict_sentence,
    what_if_table,
)
from tokenload.report.trace_text import trace_arrivals_table, trace_lines
from tokenload.report.workload_text import fit_lines, one_length_line
from tokenload.results.prediction import prediction_label

__all__ = ["SEARCH_NOTE", "capacity_lines", "render_markdown", "slo_rows"]

#: How an SLO search judged its probes (analysis/slo_search.py), in words.
SEARCH_NOTE = (
    "Each probe is an open-loop rate step. An item passes when its 95 % interval lies at or under "
    "the limit, fails when it lies above, and is indeterminate when it straddles the limit; an "
    "indeterminate probe is repeated twice as long up to --slo-repeats times (default 0), then its "
    "point estimates decide where the search goes (it stays marked indeterminate). While the search "
    "climbs, probes are screens: one step long, never repeated, climbed past when their point "
    "estimates meet the SLO (latency does not fall as the rate rises); a screen is the answer only "
    "once probed again in full, or when the search stopped first (--time-budget), which the "
    "capacity line then says."
)


def slo_rows(model: ReportModel) -> tuple[list[str], list[list[str]]]:
    """Per step: each SLO item's value and whether the step meets it."""
    assert model.slo is not None and model.checks is not None
    header = ["step", "load", *(str(i) for i in model.slo.items), "meets SLO"]
    rows = []
    for step, check in zip(model.steps, model.checks, strict=True):
        cells = [f"{fmt(v)} {'ok' if ok else 'FAIL'}" for _, v, ok in check.results]
        rows.append([str(step.get("index")), load_label(step), *cells, "yes" if check.meets else "no"])
    return header, rows


def capacity_lines(model: ReportModel) -> list[str]:
    """The capacity, goodput and replica plan in sentences (what was computed, said plainly)."""
    lines = []
    cap = model.capacity
    if model.slo is not None:
        lines.append(f"SLO: {model.slo}. A step meets it when each of its percentiles is within the limit.")
    if cap is None:
        lines.append(
            "No step meets the SLO: no capacity at the loads run."
            if model.slo is not None
            else "No capacity: the first step is already saturated."
        )
    else:
        unit = cap.load_unit
        seen = "measured" if prediction_label(model.summary) is None else "predicted"
        n = replicas_scraped(model.steps)
        whose = "per replica" if n == 1 else f"of the {n} replicas scraped, together"
        lines.append(
            f"Capacity {whose}: {cap.load:g} {unit} (step {cap.step_index}; {cap.basis}): "
            f"{cap.requests_per_s:.2f} req/s, {cap.output_tokens_per_s:.1f} output tokens/s {seen}."
        )
        if cap.share is not None:
            share = cap.share.request_share
            if share is None:
                lines.append("Goodput: no measured requests in that step to judge one by one.")
            else:
                lines.append(
                    f"Goodput there: {cap.goodput_requests_per_s:.2f} req/s and "
                    f"{cap.goodput_output_tokens_per_s:.1f} output tokens/s = the step's {seen} rates "
                    f"x the share of its {cap.share.requests} {seen} requests that individually met every "
                    f"per-request limit (TTFT/TPOT/E2E; ITL limits judge steps only): "
                    f"{cap.share.good}/{cap.share.requests} = {100 * share:.1f} %."
                )
    if model.plan is not None:
        lines.append(f"Replicas for the target: {model.plan.formula}.")
    elif model.plan_error:
        lines.append(f"Replicas for the target: not computed: {model.plan_error}.")
    return lines


def _config_rows(config: dict[str, Any]) -> list[list[str]]:
    rows = []
    for k, v in redact(config).items():
        if v is None or v == "":  # not recorded, or not given (gpu_peaks, --model): nothing to quote
            rows.append([k, "-"])
            continue
        text = v if isinstance(v, str) else json.dumps(v, separators=(", ", ": "))
        rows.append([k, f"`{text}`" if text != "" else '`""`'])
    return rows


def decided_line(step: dict[str, Any]) -> str:
    """A step's verdict in a sentence, the signal that decided it, and that signal's evidence."""
    v = step.get("verdict") or {}
    decided = v.get("decided_by")
    deciding = [e for e in v.get("evidence") or [] if e.get("metric") == decided]
    words = evidence_words({"evidence": deciding[:1]})
    return verdict_sentence(step) + (
        f" Decided by {words[0]}." if words else f" Decided by {decided or '-'}."
    )


def render_markdown(model: ReportModel) -> str:
    s = model.summary
    out = [f"# tokenload report: {s.get('run_id') or 'run'}", ""]
    if (line := prediction_sentence(s)) is not None:
        out += [f"**{line}**", ""]
    out += [f"**{model.knee_sentence()}**", ""]
    if searched := search_lines(s):
        out += [f"- {line}" for line in searched] + [""]
    knee = model.knee
    if knee:
        step = model.steps[knee["step"]]
        out.append(f"Evidence at step {knee['step']} ({load_label(step)}):")
        out += [f"- {e}" for e in evidence_words(step.get("verdict"))]
        out.append("")
    advice = model.knee_advice()
    if advice:
        out.append(f"Advice ({knee['bottleneck'] if knee else 'none'}):")
        out += [f"- {a}" for a in advice]
    if s.get("what_if"):
        header, rows = what_if_table(s["what_if"])
        out += ["", "## What if (predicted)", "", markdown_table(header, rows)]
    if s.get("draws"):
        d = s["draws"]
        out += ["", "## Over the draws (predicted)", "", draws_heading(d), ""]
        out += [markdown_table(*draws_table(d, model.steps)), "", *draws_lines(d)]
    out += ["", "## Steps", "", markdown_table(COLUMNS, [step_cells(st) for st in model.steps]), ""]
    out.append(
        "Latencies in ms over requests that started in each step's measured part; rates over those "
        "that ended in it; KV use, waiting and preemptions from the server's /metrics."
    )
    out.append("")
    header, rows = replica_table(model.steps)
    if rows:
        out += ["### Per replica", "", markdown_table(header, rows), ""]
    verdicts = [f"- {line}" for line in map(decided_line, model.steps)] or ["No steps in this run."]
    out += ["## Verdicts", "", *verdicts, ""]
    warnings = flag_warnings(model.steps) + fit_lines(model.summary)
    if warnings:
        out += ["**Load not as asked:**", ""] + [f"- {w}" for w in warnings] + [""]
    ci_header, ci_rows = interval_table(model.steps)
    if ci_rows:
        out += [
            "### Latencies with 95 % intervals",
            "",
            markdown_table(ci_header, ci_rows),
            "",
            INTERVAL_NOTE,
            "",
        ]
    if (line := one_length_line(model.summary)) is not None:
        out += [line, ""]
    if model.slo is not None or model.plan is not None or model.plan_error:
        out += ["## SLO and capacity", ""]
        if model.slo is not None:
            out += [markdown_table(*slo_rows(model)), ""]
        out += [f"- {line}" for line in capacity_lines(model)]
        out.append("")
    if s.get("trace"):
        out += (
            ["## Trace replay", ""]
            + [f"- {line}" for line in trace_lines(s["trace"], model.steps, model.requests)]
            + [""]
        )
        header, rows = trace_arrivals_table(s["trace"], model.requests)
        if rows:
            out += [markdown_table(header, rows), ""]
    search = s.get("search") or {}
    if search.get("shape") == "slo":
        out += ["### SLO search probes", "", markdown_table(*slo_search_table(search)), "", SEARCH_NOTE, ""]
    out += ["## Failures by class", ""]
    header, rows = failure_counts(model.steps, model.requests)
    out += [markdown_table(header, rows) if rows else "No failed requests.", ""]
    out += ["## Metric definitions", ""]
    out += [markdown_table(["metric", "formula"], [[k, f"`{v}`"] for k, v in model.formulas.items()]), ""]
    out += ["## How it was produced", ""]
    started = s.get("started_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)) if started else "-"
    out += [
        f"- tokenload {s.get('tokenload_version', '?')}, run `{s.get('run_id')}`, started {when}, "
        f"workers: {', '.join(map(str, s.get('workers') or [])) or '-'}",
        f"- equivalent command (reconstructed from summary.json): `{reconstructed_command(s)}`",
        f"- thresholds: `{model.thresholds_text()}`",
        *[f"- {line}" for line in scrape_target_lines(s.get("scrape_targets"))],
        "",
        markdown_table(
            ["config", "value"],
            _config_rows({"host (target)": s.get("host"), "model (served)": s.get("model"), **model.config}),
        ),
        "",
        "No secret is recorded: only the API key's variable name (`api_key_env`) and whether it was set.",
        "",
    ]
    return "\n".join(out)

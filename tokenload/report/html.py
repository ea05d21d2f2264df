"""report.html: one self-contained page (inline CSS and SVG, no script, no external resource)
that opens offline. Pure: model in, markup out.

Top to bottom: each step's verdict in words, the knee and its advice, SLO and capacity, the
charts, the step table, failures, the metric definitions and the run's configuration.
"""

from __future__ import annotations

import json
import time
from html import escape
from typing import Any

from tokenload.report.charts import build_charts
from tokenload.report.draws import draws_heading, draws_lines, draws_table
from tokenload.report.markdown import SEARCH_NOTE, capacity_lines, slo_rows
from tokenload.report.model import ReportModel, reconstructed_command
from tokenload.report.redact import redact
from tokenload.report.search_text import search_lines
from tokenload.report.svg import render_chart
from tokenload.report.tables import (
    COLUMNS,
    INTERVAL_NOTE,
    evidence_words,
    failure_counts,
    flag_warnings,
    interval_table,
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

__all__ = ["render_html"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;
  margin:0 auto;max-width:1100px;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f4f4f4}td:first-child,th:first-child,td.l,th:last-child{text-align:left}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f6f6f6;padding:0 3px}
.verdicts li{margin:4px 0}.sat{color:#a4262c;font-weight:600}.ok{color:#2a7a2a;font-weight:600}
.knee{background:#fff6e5;border:1px solid #f0c36d;padding:8px 12px;border-radius:4px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:12px}
figure.chart{margin:0;border:1px solid #e4e4e4;border-radius:4px;padding:6px}
figure.chart figcaption{font-weight:600;margin:2px 4px 4px}
svg{width:100%;height:auto;display:block}
svg .grid{stroke:#eee}svg .tick{font-size:11px;fill:#555}svg .axis{font-size:12px;fill:#333}
svg .legend{font-size:12px;fill:#333}svg .bandlabel{font-size:10px;fill:#48648a}
svg .slolabel,svg .marklabel{font-size:11px;font-weight:600}svg .nodata{font-size:18px;fill:#888}
svg circle.point:hover{r:6}
.muted{color:#666;font-size:12px}
"""


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    h = "".join(f"<th>{escape(c)}</th>" for c in header)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="l">{escape(c)}</td>' if i < left or i == len(r) - 1 else f"<td>{escape(c)}</td>"
            for i, c in enumerate(r)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{h}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _verdicts(model: ReportModel) -> str:
    items = []
    for step in model.steps:
        v = step.get("verdict") or {}
        cls = "sat" if v.get("saturated") else "ok"
        ev = evidence_words(v)
        detail = f"<ul>{''.join(f'<li>{escape(e)}</li>' for e in ev)}</ul>" if ev else ""
        items.append(f'<li><span class="{cls}">{escape(verdict_sentence(step))}</span>{detail}</li>')
    if not items:
        items.append("<li>No steps in this run.</li>")
    return f'<ul class="verdicts">{"".join(items)}</ul>'


def _config_value(v: Any) -> str:
    """A config value as text: '-' for none (not recorded, or not given)."""
    return "-" if v is None or v == "" else v if isinstance(v, str) else json.dumps(v)


def render_html(model: ReportModel) -> str:
    s = model.summary
    title = f"tokenload report: {s.get('run_id') or 'run'}"
    knee = model.knee
    advice = "".join(f"<li>{escape(a)}</li>" for a in model.knee_advice())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        *(
            [f'<p class="prediction"><strong>{escape(line)}</strong></p>']
            if (line := prediction_sentence(s))
            else []
        ),
        "<h2>Verdict per step</h2>",
        _verdicts(model),
        f'<div class="knee"><p><strong>{escape(model.knee_sentence())}</strong></p>'
        + "".join(f"<p>{escape(line)}</p>" for line in search_lines(s))
        + f"<p>Advice ({escape(knee['bottleneck'] if knee else 'none')}):</p><ul>{advice}</ul></div>",
    ]
    if model.slo is not None or model.plan is not None or model.plan_error:
        parts.append('<h2 id="slo">SLO and capacity</h2>')
        if model.slo is not None:
            header, rows = slo_rows(model)
            parts.append(_table(header, rows, left=2))
        parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in capacity_lines(model)) + "</ul>")
    if s.get("trace"):
        parts.append('<h2 id="trace">Trace replay</h2>')
        parts.append(
            "<ul>"
            + "".join(f"<li>{escape(x)}</li>" for x in trace_lines(s["trace"], model.steps, model.requests))
            + "</ul>"
        )
        header, rows = trace_arrivals_table(s["trace"], model.requests)
        if rows:
            parts.append(_table(header, rows, left=1))
    search = s.get("search") or {}
    if search.get("shape") == "slo":
        header, rows = slo_search_table(search)
        parts += [
            '<h3 id="slo-search">SLO search probes</h3>',
            _table(header, rows, left=3),
            f"<p>{escape(SEARCH_NOTE)}</p>",
        ]
    if s.get("what_if"):
        header, rows = what_if_table(s["what_if"])
        parts.append('<h2 id="what-if">What if (predicted)</h2>')
        parts.append(_table(header, rows))
        parts.append(
            '<p class="muted">Each row: the same load steps and workload with the change applied '
            "(tokenload plan --set), predicted by the same emulator profile and judged the same way.</p>"
        )
    if s.get("draws"):
        d = s["draws"]
        parts.append('<h2 id="draws">Over the draws (predicted)</h2>')
        parts.append(f"<p>{escape(draws_heading(d))}</p>")
        parts.append(_table(*draws_table(d, model.steps), left=2))
        parts += [f"<p>{escape(line)}</p>" for line in draws_lines(d)]
    parts.append("<h2>Charts</h2>")
    parts.append('<div class="charts">')
    parts += [render_chart(c) for c in build_charts(s, model.points, model.slo)]
    parts.append("</div>")
    parts.append(
        '<p class="muted">Hover a point for its value. Time charts: each step shaded, the warm-up '
        "lighter than the measured part.</p>"
    )
    parts.append("<h2>Steps</h2>")
    parts.append(_table(list(COLUMNS), [step_cells(st) for st in model.steps], left=2))
    parts.append(
        '<p class="muted">Latencies in ms over requests that started in each step\'s measured part; '
        "rates over those that ended in it; KV use, waiting and preemptions from the server's /metrics.</p>"
    )
    rep_header, rep_rows = replica_table(model.steps)
    if rep_rows:
        parts.append('<h3 id="replicas">Per replica</h3>')
        parts.append(_table(rep_header, rep_rows, left=3))
    ci_header, ci_rows = interval_table(model.steps)
    if ci_rows:
        parts.append('<h3 id="intervals">Latencies with 95 % intervals</h3>')
        parts.append(_table(ci_header, ci_rows, left=2))
        parts.append(f'<p class="muted">{escape(INTERVAL_NOTE)}</p>')
    if (line := one_length_line(model.summary)) is not None:
        parts.append(f'<p class="muted">{escape(line)}</p>')
    warnings = flag_warnings(model.steps) + fit_lines(model.summary)
    if warnings:
        parts.append('<h3 id="load-not-as-asked">Load not as asked</h3>')
        parts.append("<ul>" + "".join(f"<li>{escape(w)}</li>" for w in warnings) + "</ul>")
    parts.append("<h2>Failures by class</h2>")
    header, rows = failure_counts(model.steps, model.requests)
    parts.append(_table(header, rows) if rows else "<p>No failed requests.</p>")
    parts.append("<h2>Metric definitions</h2>")
    parts.append(
        "<table><thead><tr><th>metric</th><th>formula</th></tr></thead><tbody>"
        + "".join(
            f'<tr><td class="l"><code>{escape(k)}</code></td><td class="l">{escape(v)}</td></tr>'
            for k, v in model.formulas.items()
        )
        + "</tbody></table>"
    )
    started = s.get("started_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)) if started else "-"
    parts.append("<h2>How it was produced</h2>")
    parts.append(
        "<ul>"
        f"<li>tokenload {escape(str(s.get('tokenload_version', '?')))}, run "
        f"<code>{escape(str(s.get('run_id')))}</code>, started {escape(when)}, workers: "
        f"{escape(', '.join(map(str, s.get('workers') or [])) or '-')}</li>"
        f"<li>equivalent command (reconstructed from summary.json): "
        f"<code>{escape(reconstructed_command(s))}</code></li>"
        f"<li>thresholds: <code>{escape(model.thresholds_text())}</code></li>"
        + "".join(f"<li>{escape(line)}</li>" for line in scrape_target_lines(s.get("scrape_targets")))
        + "</ul>"
    )
    rows_cfg = [["host (target)", _config_value(redact(s.get("host")))]]
    rows_cfg += [["model (served)", _config_value(s.get("model"))]]
    rows_cfg += [[k, _config_value(v)] for k, v in model.config.items()]
    parts.append(_table(["config", "value"], rows_cfg))
    parts.append(
        '<p class="muted">No secret is recorded: only the API key\'s variable name (api_key_env) and '
        "whether it was set; anything named like a credential is shown as ***.</p>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"

"""The LLM views in Locust's web UI and its ``--html`` report.

* the "LLM" tab: the LLM table (Locust's ``extended_tabs``/``extended_tables``, its rows added to
  ``/stats/requests`` as ``extended_stats``) and a CSV download;
* the "LLM steps" tab, by the same documented means: the report's per-step table
  (``tokenload.report.tables.step_cells``) with each settled step's verdict and the signal that
  decided it, as ``summary.json`` will have them, and the step in progress;
* the "LLM charts" tab: tokenload's live page (``/tokenload/llm``, a Flask blueprint from
  :mod:`tokenload.web`) shown inside Locust's React UI. Locust's extended tabs can only render a
  table of text, so the tab's table holds one row pointing at the page, and a small script added
  to Locust's index page (``locust_tab.js``) lays the page over it in an ``<iframe>`` while the
  tab is selected. The page also works on its own;
* the ``--html`` report gets the LLM table appended.
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flask import Response, request

from tokenload.metrics.definitions import FORMULAS
from tokenload.metrics.table import COLUMNS
from tokenload.report.tables import COLUMNS as STEP_COLUMNS
from tokenload.report.tables import step_cells

if TYPE_CHECKING:
    from locust.env import Environment

    from tokenload.loadgen.plugin import RunContext

__all__ = [
    "CHARTS_TAB_KEY",
    "STEPS_TAB_KEY",
    "TAB_KEY",
    "extend_web_ui",
    "inject_html_table",
    "step_tab_rows",
]

TAB_KEY = "llm"
STEPS_TAB_KEY = "llm_steps"
CHARTS_TAB_KEY = "llm_charts"

#: The "LLM steps" table: the report's step columns and the signal that decided the verdict.
STEPS_TAB_COLUMNS = (*STEP_COLUMNS, "decided by")
_STEP_KEYS = tuple(re.sub(r"\W+", "_", c.lower()).strip("_") for c in STEPS_TAB_COLUMNS)
_IN_PROGRESS = {"warmup": "warming up", "measure": "measuring", "done": "settling"}


def _round(v: Any) -> Any:
    return round(v, 2) if isinstance(v, float) else v


def extend_web_ui(environment: Environment, ctx: RunContext) -> None:
    from tokenload.web.blueprint import make_blueprint
    from tokenload.web.live import LiveSeries

    web_ui = environment.web_ui
    base = (getattr(environment.parsed_options, "web_base_path", None) or "").rstrip("/")
    prefix = f"{base}/tokenload"
    web_ui.template_args["extended_tabs"] = [
        {"title": "LLM", "key": TAB_KEY},
        {"title": "LLM steps", "key": STEPS_TAB_KEY},
        {"title": "LLM charts", "key": CHARTS_TAB_KEY},
    ]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]},
        {
            "key": STEPS_TAB_KEY,
            "structure": [{"key": k, "title": t} for k, t in zip(_STEP_KEYS, STEPS_TAB_COLUMNS, strict=True)],
        },
        {"key": CHARTS_TAB_KEY, "structure": [{"key": "page", "title": "tokenload live charts"}]},
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": f"{prefix}/llm_stats.csv", "title": "Download LLM metrics CSV (TTFT, TPOT, ITL, E2E)"},
        # Written each time a test stops (404 until then), also linked from the LLM charts tab.
        {"href": f"{prefix}/files/report.html", "title": "Download the tokenload report (HTML)"},
        {"href": f"{prefix}/files/report.md", "title": "Download the tokenload report (Markdown)"},
        {"href": f"{prefix}/files/summary.json", "title": "Download summary.json (steps, verdicts)"},
    ]
    charts_row = {
        "page": f"Live charts (TTFT, TPOT, tokens/s, KV cache, queue, preemptions, steps): {prefix}/llm"
    }

    live = LiveSeries(ctx)
    web_ui.app.extensions["tokenload"] = live
    web_ui.app.register_blueprint(
        make_blueprint(ctx, live, url_prefix=prefix, auth=web_ui.auth_required_if_enabled)
    )
    live.start()
    tab_script = (
        f'<script src="{html.escape(prefix)}/static/locust_tab.js" data-key="{CHARTS_TAB_KEY}"'
        f' data-page="{html.escape(prefix)}/llm?embed=1" defer></script>'
    ).encode()

    @web_ui.app.after_request
    def _extend_locust_pages(response: Response) -> Response:
        if response.status_code != 200 or response.direct_passthrough:
            return response
        if request.endpoint == "locust.index" and response.mimetype == "text/html":
            page = response.get_data()
            if b"locust_tab.js" not in page:
                idx = page.rfind(b"</body>")
                response.set_data(page[:idx] + tab_script + page[idx:] if idx >= 0 else page + tab_script)
            return response
        if request.endpoint != "locust.request_stats":
            return response
        body = response.get_json(silent=True)
        if not isinstance(body, dict):
            return response
        rows = [{k: _round(r[k]) for k, _ in COLUMNS} for r in ctx.rows()]
        ours = (TAB_KEY, STEPS_TAB_KEY, CHARTS_TAB_KEY)
        extended = [e for e in body.get("extended_stats", []) if e.get("key") not in ours]
        extended.append({"key": TAB_KEY, "data": rows})
        live_rows, settled = live.steps_and_settled(time.time())
        extended.append({"key": STEPS_TAB_KEY, "data": step_tab_rows(live_rows, settled, live.verdict_error)})
        extended.append({"key": CHARTS_TAB_KEY, "data": [charts_row]})
        body["extended_stats"] = extended
        response.set_data(json.dumps(body))
        return response


def step_tab_rows(
    live_rows: list[dict[str, Any]], settled: dict[int, dict[str, Any]], verdict_error: str | None = None
) -> list[dict[str, str]]:
    """The "LLM steps" table's rows: a settled step as the report prints it, with the signal
    that decided its verdict; a step still running or settling with its client figures so far
    and its state where the verdict will be; a finished step that could not be judged
    (``verdict_error``) as "not judged", with why."""
    out = []
    for row in live_rows:
        step = settled.get(row["index"])
        if step is not None:
            cells = [*step_cells(step), str((step.get("verdict") or {}).get("decided_by") or "-")]
        else:
            partial = {
                "index": row["index"],
                "concurrency": row.get("concurrency"),
                "target_rate_rps": row.get("target_rate_rps"),
                "ttft_ms": {"p50": row.get("ttft_p50"), "p99": row.get("ttft_p99")},
                "tpot_ms": {"p50": row.get("tpot_p50"), "p99": row.get("tpot_p99")},
            }
            state = row.get("state", "")
            if state == "done" and verdict_error:
                cells = [*step_cells(partial)[:-1], "not judged", verdict_error]
            else:
                cells = [*step_cells(partial)[:-1], _IN_PROGRESS.get(state, "-"), "-"]
        out.append(dict(zip(_STEP_KEYS, cells, strict=True)))
    return out


def inject_html_table(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append the LLM table (and the metric formulas) to Locust's static HTML report."""
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t in COLUMNS)
    body = ""
    for r in rows:
        cells = "".join(
            f"<td>{html.escape('' if r[k] is None else str(_round(r[k])))}</td>" for k, _ in COLUMNS
        )
        body += f"<tr>{cells}</tr>"
    formulas = "".join(f"<li><code>{html.escape(f)}</code></li>" for f in FORMULAS.values())
    section = (
        '<section id="tokenload-llm" style="font-family:sans-serif;margin:2em;overflow-x:auto">'
        "<h2>LLM metrics (tokenload)</h2>"
        '<table border="1" cellspacing="0" cellpadding="4" style="border-collapse:collapse;font-size:12px">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"<h3>Definitions</h3><ul>{formulas}</ul></section>"
    )
    text = path.read_text(encoding="utf-8")
    if 'id="tokenload-llm"' in text:
        return
    idx = text.rfind("</body>")
    text = text[:idx] + section + text[idx:] if idx >= 0 else text + section
    path.write_text(text, encoding="utf-8")

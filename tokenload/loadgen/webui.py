"""The LLM table in Locust's web UI (an extra tab, a CSV download) and in its ``--html`` report."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from flask import Response, request

from tokenload.metrics.definitions import FORMULAS
from tokenload.metrics.table import COLUMNS, to_csv

__all__ = ["TAB_KEY", "extend_web_ui", "inject_html_table"]

TAB_KEY = "llm"


def _round(v: Any) -> Any:
    return round(v, 2) if isinstance(v, float) else v


def extend_web_ui(environment: Any, ctx: Any) -> None:
    web_ui = environment.web_ui
    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "/tokenload/llm_stats.csv", "title": "Download LLM metrics CSV (TTFT, TPOT, ITL, E2E)"}
    ]

    @web_ui.app.after_request
    def _add_llm_rows(response: Response) -> Response:
        if request.path != "/stats/requests" or response.status_code != 200:
            return response
        body = response.get_json(silent=True)
        if not isinstance(body, dict):
            return response
        rows = [{k: _round(r[k]) for k, _ in COLUMNS} for r in ctx.rows()]
        extended = [e for e in body.get("extended_stats", []) if e.get("key") != TAB_KEY]
        extended.append({"key": TAB_KEY, "data": rows})
        body["extended_stats"] = extended
        response.set_data(json.dumps(body))
        return response

    @web_ui.app.route("/tokenload/llm_stats.csv")
    def _llm_csv() -> Response:
        return Response(
            to_csv(ctx.rows()),
            mimetype="text/csv",
            headers={"Content-Disposition": "attachment;filename=llm_stats.csv"},
        )


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

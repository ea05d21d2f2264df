"""The Flask blueprint of tokenload's live LLM page, registered on Locust's web UI app.

* ``/tokenload/llm`` — the page: six charts and the step table (``static/llm.html``, dependency-free
  JavaScript drawing on ``<canvas>``; nothing is loaded from outside this server, and its
  Content-Security-Policy forbids it);
* ``/tokenload/api/series?client_since=T&server_since=T`` — the JSON it polls (series rows after
  the given times, the status, the steps with verdicts), see :class:`tokenload.web.live.LiveSeries`;
* ``/tokenload/llm_stats.csv`` — the LLM table as CSV;
* ``/tokenload/files/NAME`` — the run directory's results for download (:data:`RUN_FILES`):
  written each time a test stops (and at the end), listed in the page's status;
* ``/tokenload/static/…`` — the page's JS and CSS, and ``locust_tab.js``, which shows the page in
  Locust's own UI under the "LLM charts" tab.

Every route but the static files goes through Locust's ``--web-login`` check when it is on.
Nothing served holds a secret: the configuration only has the API key's variable *name*, and
URLs are shown without any user:password part.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from flask import Blueprint, Response, abort, request, send_from_directory

from tokenload.metrics.table import to_csv
from tokenload.web.run_files import RUN_FILES

if TYPE_CHECKING:
    from tokenload.loadgen.plugin import RunContext

__all__ = ["CSP", "STATIC_DIR", "make_blueprint", "public_url"]


STATIC_DIR = Path(__file__).resolve().parent / "static"

#: The page may talk to this server only (and be framed only by it: Locust's UI).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
)


def public_url(url: str | None) -> str | None:
    """``url`` without a ``user:password@`` part."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _float_arg(name: str) -> float | None:
    text = request.args.get(name)
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        abort(400, f"{name}: expected a number, got {text!r}")
    if value != value:
        abort(400, f"{name}: expected a number, got {text!r}")
    return value


def make_blueprint(
    ctx: RunContext,
    live: Any,
    *,
    url_prefix: str = "/tokenload",
    auth: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda f: f,
) -> Blueprint:
    """The blueprint for one run context and its :class:`~tokenload.web.live.LiveSeries`."""
    bp = Blueprint(
        "tokenload",
        __name__,
        url_prefix=url_prefix,
        static_folder=str(STATIC_DIR),
        static_url_path="/static",
    )

    @bp.after_request
    def _headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if request.endpoint == "tokenload.page":
            response.headers["Content-Security-Policy"] = CSP
            response.headers["Cache-Control"] = "no-store"
        return response

    @bp.route("/llm")
    @auth
    def page() -> Response:
        return send_from_directory(STATIC_DIR, "llm.html", mimetype="text/html", max_age=0)

    @bp.route("/api/series")
    @auth
    def series() -> Response:
        body = live.to_json(_float_arg("client_since"), _float_arg("server_since"))
        status = body["status"]
        status["host"] = public_url(status.get("host"))
        if status.get("server_metrics"):
            status["server_metrics"]["targets"] = [public_url(u) for u in status["server_metrics"]["targets"]]
            status["server_metrics"]["failures"] = {
                public_url(u): v for u, v in status["server_metrics"]["failures"].items()
            }
        # compact, whatever Flask's debug setting (Locust turns it on, which pretty-prints)
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
        return Response(text, mimetype="application/json", headers={"Cache-Control": "no-store"})

    @bp.route("/llm_stats.csv")
    @auth
    def llm_csv() -> Response:
        return Response(
            to_csv(ctx.rows()),
            mimetype="text/csv",
            headers={"Content-Disposition": "attachment;filename=llm_stats.csv"},
        )

    @bp.route("/files/<name>")
    @auth
    def run_file(name: str) -> Response:
        if name not in RUN_FILES:
            abort(404, f"{name}: not a file of the run directory ({', '.join(RUN_FILES)})")
        run_dir = ctx.run_dir
        if run_dir is None or not (run_dir / name).is_file():
            abort(404, f"{name}: not written yet (the results are written when a test stops)")
        # Absolute: Flask resolves a relative directory against its own root, not the working one.
        return send_from_directory(run_dir.resolve(), name, as_attachment=True, max_age=0)

    return bp

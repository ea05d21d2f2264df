"""Named failure classes: every failed request is counted under exactly one of these."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FAILURE_CLASSES",
    "RequestFailure",
    "classify_http_status",
    "failed_share",
    "failure_cause",
    "requests_ended",
]

#: name -> what it means. The order is the order reports list them in.
FAILURE_CLASSES: dict[str, str] = {
    "http_429": "the server answered 429 Too Many Requests",
    "http_4xx": "the server answered another 4xx (bad request, unknown model, auth)",
    "http_5xx": "the server answered 5xx",
    "connect_error": "no response: the connection could not be made or broke before any response header",
    "ttft_timeout": "no content chunk within the TTFT timeout",
    "stall_timeout": "no bytes for longer than the stall timeout in the middle of the stream",
    "malformed_stream": "bytes that are not a valid event stream or a chunk that is not the expected JSON",
    "error_event": "the server sent an error object inside the stream",
    "truncated": "the connection closed before [DONE] or a finish_reason",
    "empty_output": "the stream completed without a single output token",
    "prompt_count": "no request sent: counting the prompt's tokens failed (the server's /tokenize "
    "unreachable, or answering 429/5xx)",
}


#: What varies from request to request inside a failure's detail: quoted text (a chunk, a
#: server's message fragment), ids (hex runs, uuids, cmpl-/chatcmpl-/req- ids) and numbers.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|b'[^']*'")
_ID = re.compile(
    r"\b(?:(?:chat)?cmpl|req|request|id)[-_][\w-]+|\b[0-9a-f]{8,}(?:-[0-9a-f]{4,})*\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_HTTP_STATUS = re.compile(r"^HTTP \d{3}\b")
_CAUSE_CHARS = 100


def failure_cause(detail: str) -> str:
    """The cause of a failure, stable across requests: the detail with quoted text, ids and
    numbers replaced (``connection closed after 37 tokens`` -> ``connection closed after N
    tokens``), at most 100 characters. Locust groups failures by their message, so ten malformed
    chunks are one row, not ten; the whole detail stays in the request's record."""
    status = _HTTP_STATUS.match(detail)  # an HTTP status is a cause, not a varying number
    head = status.group(0) if status else ""
    text = _QUOTED.sub("'…'", detail[len(head) :])
    text = _ID.sub("ID", text)
    text = head + _NUMBER.sub("N", text)
    text = " ".join(text.split())
    return text if len(text) <= _CAUSE_CHARS else text[: _CAUSE_CHARS - 1] + "…"


class RequestFailure(Exception):
    """A failed request, as reported to Locust: ``str()`` is its class and its cause
    (:func:`failure_cause`), the same for every request that failed the same way, so Locust's
    failures table has a row per cause. ``detail`` keeps the whole text."""

    def __init__(self, failure_class: str, detail: str = "") -> None:
        if failure_class not in FAILURE_CLASSES:
            raise ValueError(f"unknown failure class {failure_class!r}")
        self.failure_class = failure_class
        self.detail = detail
        cause = failure_cause(detail)
        super().__init__(f"{failure_class}: {cause}" if cause else failure_class)


def classify_http_status(status: int) -> str | None:
    """The failure class of an HTTP status, or None for a success."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    return "malformed_stream"  # 1xx/3xx where a stream was expected


def requests_ended(step: Mapping[str, Any]) -> int:
    """The requests of a step's measured part that ended, succeeded or failed: its summary's
    ``requests.ok + requests.failed`` (0 where the step has no ``requests``)."""
    reqs = step.get("requests") or {}
    return (reqs.get("ok") or 0) + (reqs.get("failed") or 0)


def failed_share(step: Mapping[str, Any]) -> float | None:
    """The share of a step's ended requests (:func:`requests_ended`) that failed; None where none
    ended."""
    ended = requests_ended(step)
    return ((step.get("requests") or {}).get("failed") or 0) / ended if ended else None

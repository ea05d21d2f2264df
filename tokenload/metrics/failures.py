"""Named failure classes: every failed request is counted under exactly one of these."""

from __future__ import annotations

__all__ = ["FAILURE_CLASSES", "RequestFailure", "classify_http_status"]

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


class RequestFailure(Exception):
    """A failed request, as reported to Locust. ``str()`` is stable so Locust groups it well."""

    def __init__(self, failure_class: str, detail: str = "") -> None:
        if failure_class not in FAILURE_CLASSES:
            raise ValueError(f"unknown failure class {failure_class!r}")
        self.failure_class = failure_class
        self.detail = detail
        super().__init__(f"{failure_class}: {detail}" if detail else failure_class)


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

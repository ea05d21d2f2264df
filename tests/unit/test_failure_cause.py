"""A failure's cause is stable across requests (Locust groups its failures table by it); the whole
detail stays in the record."""

from __future__ import annotations

from tokenload.client.http_stream import _error_detail
from tokenload.metrics.failures import RequestFailure, failed_share, failure_cause, requests_ended


def test_what_varies_per_request_is_left_out_of_the_cause() -> None:
    assert failure_cause("connection closed after 37 tokens") == failure_cause(
        "connection closed after 5 tokens"
    )
    assert failure_cause('chunk is not JSON: \'data: {"id": "cmpl-9f"\'') == "chunk is not JSON: '…'"
    assert failure_cause("error for request cmpl-3fa2b9c1 at 12.5 s") == "error for request ID at N s"
    assert len(failure_cause("x" * 500)) == 100


def test_an_http_error_keeps_its_status_and_the_servers_message() -> None:
    body = b'{"error": {"message": "max context is 2048 tokens, you asked 2100", "type": "BadRequestError"}}'
    assert failure_cause(_error_detail(400, body)) == "HTTP 400: max context is N tokens, you asked N"
    flat = b'{"object": "error", "message": "model m not found", "code": 404}'
    assert _error_detail(404, flat) == "HTTP 404: model m not found"
    assert _error_detail(503, b"upstream reset") == "HTTP 503: upstream reset"


def test_the_failure_keeps_the_whole_detail() -> None:
    f = RequestFailure("truncated", "connection closed after 37 tokens")
    assert str(f) == "truncated: connection closed after N tokens"
    assert f.detail == "connection closed after 37 tokens"


def test_a_steps_ended_requests_and_failed_share() -> None:
    step = {"requests": {"ok": 6, "failed": 2, "by_failure_class": {"http_5xx": 2}}}
    assert requests_ended(step) == 8 and failed_share(step) == 0.25
    # A step without requests (a step that measured nothing, or a summary without the field).
    for empty in ({}, {"requests": None}, {"requests": {"ok": 0, "failed": 0}}):
        assert requests_ended(empty) == 0 and failed_share(empty) is None
    assert failed_share({"requests": {"ok": 0, "failed": 3}}) == 1.0

"""A token counter backed by the server's ``POST /tokenize`` (vLLM's shape), over an injected transport.

The transport is the only part that touches the network, so this module stays pure: the Locust
user passes a function that posts the JSON payload and returns ``(status, body)``, and raises
``OSError`` (``ConnectionError``, ``TimeoutError``) when the server cannot be reached.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenload.workload.errors import PromptCountError, WorkloadError, describe
from tokenload.workload.frames import RequestPrompt

__all__ = ["TokenizeClient", "TokenizeResult", "TokenizeTransport"]

#: Posts one JSON payload to ``/tokenize``; returns the HTTP status and the raw body.
TokenizeTransport = Callable[[dict[str, Any]], tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class TokenizeResult:
    count: int
    max_model_len: int | None
    tokens: tuple[int, ...] | None


class TokenizeClient:
    """Counts a request's tokens with the server's own tokenizer and chat template.

    Calling the client is a :data:`~tokenload.workload.frames.TokenCounter`. It remembers the
    server's ``max_model_len`` from the first answer, and how many calls it made.
    """

    def __init__(self, transport: TokenizeTransport, model: str, path: str = "/tokenize") -> None:
        self.transport = transport
        self.model = model
        self.path = path
        self.calls = 0
        self.max_model_len: int | None = None

    def __call__(self, prompt: RequestPrompt) -> int:
        return self.tokenize(prompt).count

    def payload(self, prompt: RequestPrompt) -> dict[str, Any]:
        """The request body: vLLM's completion-style or chat-style tokenize request."""
        if isinstance(prompt, str):
            return {"model": self.model, "prompt": prompt, "add_special_tokens": True}
        return {"model": self.model, "messages": list(prompt), "add_generation_prompt": True}

    def tokenize(self, prompt: RequestPrompt) -> TokenizeResult:
        where = f"POST {self.path}"
        self.calls += 1
        try:
            status, body = self.transport(self.payload(prompt))
        except OSError as exc:
            detail = str(exc) or type(exc).__name__
            raise PromptCountError(
                f"{where}: server unreachable ({detail}); exact prompt lengths need it"
            ) from None
        if status == 404:
            raise WorkloadError(
                f"{where}: 404, this server has no tokenize endpoint; give a tokenizer_file or use "
                "length_method: estimate"
            )
        if status == 429 or status >= 500:
            raise PromptCountError(f"{where}: HTTP {status}: {_error_message(body)}")
        if status != 200:
            raise WorkloadError(f"{where}: HTTP {status}: {_error_message(body)}")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise WorkloadError(f"{where}: expected a JSON body, got {describe(body)}") from None
        count = doc.get("count") if isinstance(doc, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise WorkloadError(
                f"{where}: expected a JSON object with an integer 'count', got {describe(doc)}"
            )
        max_len = doc.get("max_model_len")
        if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0:
            self.max_model_len = max_len
        tokens = doc.get("tokens")
        ids = tuple(tokens) if isinstance(tokens, list) else None
        return TokenizeResult(count, self.max_model_len, ids)


def _error_message(body: bytes) -> str:
    """The server's own error text (vLLM's ``{"error": {"message"}}`` or FastAPI's ``detail``)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return describe(body[:200])
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return describe(err["message"], 200)
        if "detail" in doc:
            return describe(doc["detail"], 200)
    return describe(doc, 200)

"""Interpretation of OpenAI-compatible streaming chunks (vLLM first). Pure, no I/O.

A :class:`StreamState` is fed one SSE event at a time, with the time its bytes came off the
socket, and accumulates exactly what :mod:`tokenload.metrics.definitions` needs. Which chunks
count as content, and how many tokens each carries, is decided here and documented there.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["MalformedChunk", "StreamState", "build_request_body"]

_DONE = "[DONE]"


class MalformedChunk(ValueError):
    """An event whose data is neither ``[DONE]`` nor a JSON object of the expected shape."""


class StreamState:
    """What one streamed response has shown so far."""

    __slots__ = (
        "_continuous_completion",
        "chat",
        "chunk_tokens",
        "content_times",
        "content_tokens",
        "done",
        "error",
        "finish_reason",
        "prompt_tokens",
        "response_id",
        "text_parts",
        "usage_completion_tokens",
    )

    def __init__(self, chat: bool, collect_text: bool = False) -> None:
        self.chat = chat
        #: The generated text, kept only when asked (multi-turn chats send it back as history).
        self.text_parts: list[str] | None = [] if collect_text else None
        self.content_times: list[float] = []
        self.content_tokens: list[int] = []
        self.chunk_tokens = 0  # sum of content_tokens, the fallback output count
        self.done = False
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.prompt_tokens: int | None = None
        self.response_id: str | None = None
        self.usage_completion_tokens: int | None = None
        self._continuous_completion = 0

    @property
    def finished(self) -> bool:
        """The server said the response is complete ([DONE] or a finish_reason)."""
        return self.done or self.finish_reason is not None

    @property
    def output_tokens(self) -> int:
        u = self.usage_completion_tokens
        return u if u is not None else self.chunk_tokens

    def on_event(self, data: str, t: float) -> None:
        if data == _DONE:
            self.done = True
            return
        try:
            obj = orjson.loads(data)
        except ValueError:
            try:  # what orjson refuses and Python's json reads: NaN, Infinity, huge integers
                obj = json.loads(data)
            except ValueError:
                raise MalformedChunk(f"chunk is not JSON: {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise MalformedChunk(f"chunk is not a JSON object: {data[:80]!r}")
        choices = obj.get("choices")
        if self.response_id is None:
            self.response_id = obj.get("id")
        if choices is None:
            err = obj.get("error")
            if err is not None or obj.get("object") == "error":
                body = err if isinstance(err, dict) else obj
                self.error = str(body.get("message") or body)[:500]
                return
        usage = obj.get("usage")
        if usage:
            try:
                self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
                completion = usage.get("completion_tokens")
            except AttributeError:
                raise MalformedChunk("usage is not an object") from None
            if completion is not None:
                self.usage_completion_tokens = completion
        if not choices:
            return  # a usage-only chunk
        try:
            choice = choices[0]
            finish = choice.get("finish_reason")
            if self.chat:
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if text is None:
                    text = delta.get("reasoning_content") or delta.get("reasoning")
                if text is None and delta.get("tool_calls"):
                    text = "tool_call"
                elif "role" in delta and not text:
                    text = None  # role announcement, not a token
            else:
                text = choice.get("text")
        except (AttributeError, IndexError, KeyError, TypeError):
            raise MalformedChunk(f"unexpected chunk shape: {data[:80]!r}") from None
        if finish is not None:
            self.finish_reason = finish
        if usage and completion is not None:
            # Continuous usage stats: the exact number of tokens this chunk carried.
            k = completion - self._continuous_completion
            self._continuous_completion = completion
        elif text is None or (text == "" and finish is not None):
            k = 0
        else:
            k = _logprob_tokens(choice, self.chat) or 1
        if self.text_parts is not None and text:
            self.text_parts.append(text)
        if k > 0:
            self.content_times.append(t)
            self.content_tokens.append(k)
            self.chunk_tokens += k


def _logprob_tokens(choice: dict[str, Any], chat: bool) -> int:
    lp = choice.get("logprobs")
    if not lp:
        return 0
    try:
        return len(lp["content"] if chat else lp["tokens"])
    except (KeyError, TypeError):
        return 0


def build_request_body(
    *,
    chat: bool,
    model: str,
    prompt: str | list[int] | None = None,
    messages: list[dict[str, str]] | None = None,
    max_tokens: int | None = None,
    ignore_eos: bool = False,
    min_tokens: int | None = None,
    temperature: float | None = None,
    continuous_usage: bool = True,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """A streaming request body for ``/v1/chat/completions`` (chat) or ``/v1/completions``."""
    body: dict[str, Any] = {"model": model, "stream": True}
    if chat:
        if messages is None:
            if prompt is None or not isinstance(prompt, str):
                raise ValueError("chat requests need messages or a text prompt")
            messages = [{"role": "user", "content": prompt}]
        body["messages"] = messages
    else:
        if prompt is None:
            raise ValueError("completions requests need a prompt")
        body["prompt"] = prompt
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM extension
    if min_tokens:
        body["min_tokens"] = min_tokens  # vLLM extension
    options: dict[str, Any] = {"include_usage": True}
    if continuous_usage:
        options["continuous_usage_stats"] = True  # vLLM extension: exact tokens per chunk
    body["stream_options"] = options
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()

"""Choosing how prompt lengths are made exact for one target, and caching the results.

Precedence: a local tokenizer file when given, else the server's ``/tokenize`` (an injected
counter), else an estimate flagged ``exact=False``; token ids only when asked for. Distinct
prompts per request (so a server's prefix cache sees no accidental sharing) come from one cached
exact prompt per length, its words reshuffled and checked with a single count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Literal

from tokenload.workload.cache import PromptCache
from tokenload.workload.errors import PromptCountError, WorkloadError
from tokenload.workload.exact import (
    DEFAULT_MAX_CALLS,
    ExactPrompt,
    Method,
    estimate_prompt,
    exact_prompt,
    shuffle_words,
    token_id_prompt,
)
from tokenload.workload.frames import PLAIN, Completion, Frame, Message, RequestPrompt, TokenCounter
from tokenload.workload.local_tokenizer import tokenizer_file_counter
from tokenload.workload.synthetic import synthetic_prompt

__all__ = ["LengthMethod", "PromptMaker"]

LengthMethod = Literal["auto", "tokenize", "tokenizer_file", "estimate", "token_ids"]
METHODS = ("auto", "tokenize", "tokenizer_file", "estimate", "token_ids")


class PromptMaker:
    """Makes prompts of a given token length for one model, cached per (model, method, length,
    seed, frame).

    ``count_tokens`` is the server-backed counter (e.g. a
    :class:`~tokenload.workload.tokenize_api.TokenizeClient`); ``tokenizer_file`` a local
    ``tokenizer.json``; ``vocab_size`` and ``reserved_ids`` serve the ``token_ids`` method.
    ``calls`` counts the token counter's calls.
    """

    def __init__(
        self,
        *,
        model: str = "",
        method: LengthMethod = "auto",
        count_tokens: TokenCounter | None = None,
        tokenizer_file: str | Path | None = None,
        render_chat: Callable[[Sequence[Message]], str] | None = None,
        vocab_size: int | None = None,
        reserved_ids: Collection[int] = (),
        max_calls: int = DEFAULT_MAX_CALLS,
        cache_size: int = 4096,
    ) -> None:
        self.model = model
        self.method: Method = _resolve(method, count_tokens, tokenizer_file, vocab_size)
        counter: TokenCounter | None = None
        if self.method == "tokenizer_file":
            assert tokenizer_file is not None
            counter = tokenizer_file_counter(tokenizer_file, render_chat=render_chat)
        elif self.method == "tokenize":
            counter = count_tokens
        self._counter = counter
        self.calls = 0
        self.vocab_size = vocab_size
        self.reserved_ids = frozenset(reserved_ids)
        self.max_calls = max_calls
        self.cache: PromptCache[ExactPrompt] = PromptCache(cache_size)
        self._overhead: int | None = None

    @property
    def exact(self) -> bool:
        """Whether lengths are exact (every method but ``estimate``)."""
        return self.method != "estimate"

    def count(self, prompt: RequestPrompt) -> int:
        """The token count of a request, by this maker's counter."""
        if self._counter is None:
            raise WorkloadError(f"length_method {self.method}: has no token counter")
        self.calls += 1
        try:
            return self._counter(prompt)
        except OSError as exc:
            raise PromptCountError(f"token counter unreachable ({str(exc) or type(exc).__name__})") from None

    def make(self, n_tokens: int, seed: int = 0, frame: Frame = PLAIN) -> ExactPrompt:
        """A prompt whose whole request (``frame`` included) is ``n_tokens`` tokens; cached."""
        key = (self.model, self.method, n_tokens, seed, frame)
        return self.cache.get_or_make(key, lambda: self._make(n_tokens, seed, frame))

    def variant(self, n_tokens: int, request_seed: int, frame: Frame = PLAIN) -> ExactPrompt:
        """A prompt of ``n_tokens`` distinct per ``request_seed``: the cached prompt for this
        length with its words reshuffled, checked with one count (a fresh search when it misses)."""
        if self.method == "estimate":
            return estimate_prompt(n_tokens, request_seed, frame)
        if self.method == "token_ids":
            return self._make(n_tokens, request_seed, frame)
        base = self.make(n_tokens, 0, frame)
        assert base.text is not None
        text = shuffle_words(base.text, request_seed)
        if text == base.text:
            return dataclasses.replace(base, calls=0)
        if self.count(frame.render(text)) == n_tokens:
            return dataclasses.replace(base, text=text, calls=1)
        return self._make(n_tokens, request_seed, frame)

    def content(self, n_tokens: int, seed: int = 0) -> ExactPrompt:
        """A text whose own tokens number ``n_tokens`` (what it adds to a request, without the
        BOS a plain prompt starts with): for chat message contents. ``n_tokens`` of the result
        is that content length."""
        if self.method == "token_ids":
            raise WorkloadError("length_method token_ids: chat message contents need text, not ids")
        if self.method == "estimate":
            return estimate_prompt(n_tokens, seed)
        if self._overhead is None:
            self._overhead = self.count(Completion().render(""))
        prompt = self.make(n_tokens + self._overhead, seed, Completion())
        return dataclasses.replace(prompt, n_tokens=n_tokens)

    def content_text(self, n_tokens: int, seed: int = 0) -> str:
        """:meth:`content`'s text: the ``make_text`` a synthetic conversation takes."""
        text = self.content(n_tokens, seed).text
        return text if text is not None else synthetic_prompt(n_tokens, seed)

    def _make(self, n_tokens: int, seed: int, frame: Frame) -> ExactPrompt:
        if self.method == "estimate":
            return estimate_prompt(n_tokens, seed, frame)
        if self.method == "token_ids":
            assert self.vocab_size is not None
            return token_id_prompt(n_tokens, seed, self.vocab_size, reserved_ids=self.reserved_ids)
        return exact_prompt(n_tokens, self.count, seed, frame, max_calls=self.max_calls, method=self.method)


def _resolve(
    method: str,
    count_tokens: TokenCounter | None,
    tokenizer_file: str | Path | None,
    vocab_size: int | None,
) -> Method:
    if method not in METHODS:
        raise WorkloadError(f"length_method: expected one of {', '.join(METHODS)}, got {method!r}")
    if method == "auto":
        if tokenizer_file is not None:
            return "tokenizer_file"
        return "tokenize" if count_tokens is not None else "estimate"
    needs = {
        "tokenize": (count_tokens, "a token counter (the server's /tokenize)"),
        "tokenizer_file": (tokenizer_file, "tokenizer_file"),
        "token_ids": (vocab_size, "vocab_size"),
    }
    if method in needs and needs[method][0] is None:
        raise WorkloadError(f"length_method: {method!r} needs {needs[method][1]}")
    return method  # type: ignore[return-value]

"""Prompts of an exact token length for the target's own tokenizer.

The search grows a seeded word salad (:class:`~tokenload.workload.synthetic.WordSalad`) by
characters and asks a token counter how long the whole request is: one probe of the empty text
gives the fixed overhead (BOS, chat template, prefix), one more the characters per token, then
interpolation inside a bracket (bisection when it stalls) and, when one character jumps over
the target, a few short tails. Every step is bounded by ``max_calls``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from tokenload.workload.errors import WorkloadError
from tokenload.workload.frames import PLAIN, Frame, RequestPrompt, TokenCounter
from tokenload.workload.synthetic import WordSalad, synthetic_prompt

__all__ = [
    "DEFAULT_MAX_CALLS",
    "ExactPrompt",
    "Method",
    "check_context",
    "estimate_prompt",
    "exact_prompt",
    "shuffle_words",
    "token_id_prompt",
]

Method = Literal["tokenize", "tokenizer_file", "estimate", "token_ids"]

#: Counter calls one prompt may cost: bisection alone needs ~log2(5 * n) of them.
DEFAULT_MAX_CALLS = 40
# The salad averages ~4.8 characters a word and BPE vocabularies take most of its words whole:
# a first probe near the target keeps the probe texts (sent to the server) small.
_FIRST_GUESS_CHARS_PER_TOKEN = 4.0
# Short endings that add about one token in byte-level and BPE tokenizers alike.
_TAILS = (" a", ".", ",", "\n", " I", "a", "-", " x", "!", ";", "s", " 1")


@dataclass(frozen=True, slots=True)
class ExactPrompt:
    """A prompt and how its length is known.

    ``text`` is the variable part (``None`` for token ids), placed in ``frame``; ``render()``
    gives what the request carries. ``exact`` is False only for an estimate.
    """

    text: str | None
    n_tokens: int
    exact: bool
    method: Method
    frame: Frame = PLAIN
    ids: tuple[int, ...] | None = None
    calls: int = 0

    def render(self) -> RequestPrompt | list[int]:
        """A fresh completions prompt, chat messages list, or token-id list."""
        if self.ids is not None:
            return list(self.ids)
        assert self.text is not None
        return self.frame.render(self.text)


def exact_prompt(
    n_tokens: int,
    count_tokens: TokenCounter,
    seed: int = 0,
    frame: Frame = PLAIN,
    *,
    max_calls: int = DEFAULT_MAX_CALLS,
    method: Method = "tokenize",
) -> ExactPrompt:
    """A prompt whose whole request (``frame`` around the text) counts exactly ``n_tokens``.

    Raises :class:`WorkloadError` when the frame alone is longer than ``n_tokens``, when no text
    hits the length within ``max_calls`` counter calls, or when the counter fails.
    """
    _check_length(n_tokens)
    search = _Search(n_tokens, count_tokens, WordSalad(seed), frame, max_calls)
    text = search.run()
    return ExactPrompt(text, n_tokens, True, method, frame, calls=search.calls)


def estimate_prompt(n_tokens: int, seed: int = 0, frame: Frame = PLAIN) -> ExactPrompt:
    """About ``n_tokens`` tokens of text, counting nothing (``exact=False``); the frame's own
    tokens are not accounted for."""
    _check_length(n_tokens)
    return ExactPrompt(synthetic_prompt(n_tokens, seed), n_tokens, False, "estimate", frame)


def token_id_prompt(
    n_tokens: int, seed: int = 0, vocab_size: int = 32000, *, reserved_ids: Collection[int] = ()
) -> ExactPrompt:
    """``n_tokens`` seeded token ids below ``vocab_size``, avoiding ``reserved_ids`` (BOS, EOS,
    ...), for completions endpoints that take ids: exact by construction."""
    _check_length(n_tokens)
    reserved = set(reserved_ids)
    if vocab_size <= len(reserved) or vocab_size < 2:
        raise WorkloadError(
            f"vocab_size: expected more ids than the {len(reserved)} reserved, got {vocab_size}"
        )
    rng = random.Random(seed)
    ids: list[int] = []
    while len(ids) < n_tokens:
        i = rng.randrange(vocab_size)
        if i not in reserved:
            ids.append(i)
    return ExactPrompt(None, n_tokens, True, "token_ids", ids=tuple(ids))


def check_context(
    input_tokens: int, output_tokens: int, max_model_len: int | None, field: str = "input"
) -> None:
    """Raise :class:`WorkloadError` when a request of these lengths cannot fit the model
    (vLLM refuses ``input + max_tokens > max_model_len``)."""
    if max_model_len is None:
        return
    if input_tokens + output_tokens > max_model_len:
        raise WorkloadError(
            f"{field}: {input_tokens} input + {output_tokens} output tokens exceed the model's "
            f"max_model_len of {max_model_len}"
        )


def shuffle_words(text: str, seed: int) -> str:
    """``text`` with its inner words in a seeded order (the first and last stay in place).

    Tokenizers that split text into words before merging (GPT-2 style BPE: Llama 3, Qwen, ...)
    and byte-level ones count the same tokens for any such order, so one exact prompt yields
    many distinct ones for the price of a check each.
    """
    words = text.split(" ")
    if len(words) < 4:
        return text
    inner = words[1:-1]
    random.Random(seed).shuffle(inner)
    return " ".join([words[0], *inner, words[-1]])


def _check_length(n_tokens: int) -> None:
    if not isinstance(n_tokens, int) or isinstance(n_tokens, bool) or n_tokens < 1:
        raise WorkloadError(f"prompt length: expected an integer >= 1, got {n_tokens!r}")


class _Search:
    def __init__(
        self, n: int, count_tokens: TokenCounter, salad: WordSalad, frame: Frame, max_calls: int
    ) -> None:
        self.n, self.count_tokens, self.salad, self.frame = n, count_tokens, salad, frame
        self.max_calls = max_calls
        self.calls = 0
        self.seen: dict[str, int] = {}
        # Closest counts either side of the target, for the failure message.
        self.below = -1
        self.above = -1

    def count(self, text: str) -> int:
        if text in self.seen:
            return self.seen[text]
        if self.calls >= self.max_calls:
            raise WorkloadError(self._miss(f"after {self.calls} token-count calls"))
        self.calls += 1
        try:
            v = self.count_tokens(self.frame.render(text))
        except OSError as exc:
            raise WorkloadError(
                f"prompt length {self.n}: token counter unreachable ({str(exc) or type(exc).__name__})"
            ) from None
        if not isinstance(v, int) or v < 0:
            raise WorkloadError(f"prompt length {self.n}: token counter: expected an integer >= 0, got {v!r}")
        self.seen[text] = v
        if v < self.n:
            self.below = max(self.below, v)
        elif v > self.n:
            self.above = v if self.above < 0 else min(self.above, v)
        return v

    def _miss(self, why: str) -> str:
        closest = " and ".join(str(v) for v in (self.below, self.above) if v >= 0)
        return f"prompt length {self.n}: no text of exactly {self.n} tokens found {why}" + (
            f" (closest: {closest})" if closest else ""
        )

    def run(self) -> str:
        n, text = self.n, self.salad.text
        base = self.count("")
        if base > n:
            raise WorkloadError(
                f"prompt length {n}: expected at least {base} tokens, the request's fixed part "
                "(BOS, chat template, prefix) alone"
            )
        if base == n:
            return ""
        lo_c, lo_v = 0, base
        hi: tuple[int, int] | None = None
        c = max(1, round((n - base) * _FIRST_GUESS_CHARS_PER_TOKEN))
        last_width = math.inf
        while True:
            v = self.count(text(c))
            if v == n:
                return text(c)
            if v < n:
                lo_c, lo_v = c, v
            else:
                hi = (c, v)
            if hi is None:
                # Below the target still: extrapolate from the overhead probe; a counter that
                # did not move means the guess was far too small, so grow geometrically.
                per_token = lo_c / (lo_v - base) if lo_v > base else _FIRST_GUESS_CHARS_PER_TOKEN * 4
                c = lo_c + max(1, math.ceil((n - lo_v) * per_token))
                continue
            hi_c, hi_v = hi
            width = hi_c - lo_c
            if width <= 1:
                return self._fine_tune(text(lo_c), lo_v)
            if width * 2 > last_width:
                c = lo_c + width // 2  # interpolation stalls on a curved stretch: bisect
            else:
                c = lo_c + round((n - lo_v) * width / (hi_v - lo_v))
            c = min(max(c, lo_c + 1), hi_c - 1)
            last_width = width

    def _fine_tune(self, stem: str, v: int) -> str:
        """One more character overshoots: try short tails on the longest text still under."""
        while True:
            best: tuple[str, int] | None = None
            for tail in _TAILS:
                candidate = stem + tail
                got = self.count(candidate)
                if got == self.n:
                    return candidate
                if got < self.n and got > v and (best is None or got > best[1]):
                    best = (candidate, got)
            if best is None:
                raise WorkloadError(self._miss("(one more character overshoots and no short ending fits)"))
            stem, v = best

"""Token counters for the tests: the emulator's own tokenizer, and toys unlike it."""

from __future__ import annotations

import re

from tokenload.sim.tokenizer import apply_chat_template, encode
from tokenload.workload.frames import RequestPrompt


class Counting:
    """Wraps a counter and counts its calls."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, prompt: RequestPrompt) -> int:
        self.calls += 1
        return self.fn(prompt)


def _text(prompt: RequestPrompt) -> str:
    return prompt if isinstance(prompt, str) else apply_chat_template(prompt)


def emulator(prompt: RequestPrompt) -> int:
    """What ``tokenload sim``'s /tokenize answers: UTF-8 bytes plus BOS, chat via its template."""
    return len(encode(_text(prompt), add_bos=True))


def whitespace(prompt: RequestPrompt) -> int:
    """One token a whitespace-separated word, plus a BOS."""
    return len(_text(prompt).split()) + 1


_MERGES = sorted(
    {"the", "of", "and", "an", "to", "in", "is", "was", "un", "iv", "er", "si", "ty", "at", "on", "st"}
    | {"ate", "ion", "al", "es", "ed", "or", "ch", "ool", "ity", "ation", "nal", "he", "wh", "ich"},
    key=len,
    reverse=True,
)


def greedy_merge(prompt: RequestPrompt) -> int:
    """A BPE-like toy: words (with their leading space) split greedily into known pieces."""
    n = 0
    for word in re.findall(r"\s*\S+|\s+", _text(prompt)):
        i = 0
        while i < len(word):
            piece = next((m for m in _MERGES if word.startswith(m, i)), word[i])
            i += len(piece)
            n += 1
    return n


def two_per_word(prompt: RequestPrompt) -> int:
    """Two tokens a word, one a punctuation mark: a character can jump the count by two."""
    text = _text(prompt)
    return 2 * len(re.findall(r"[A-Za-z]+", text)) + len(re.findall(r"[.,;!]", text))


def even_only(prompt: RequestPrompt) -> int:
    """Two tokens a whitespace word: odd lengths cannot be made."""
    return 2 * len(_text(prompt).split())

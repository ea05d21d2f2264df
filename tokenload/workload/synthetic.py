"""Synthetic prompts: seeded word salad, of an approximate token length or as a growable text.

Common English words are one token each in the BPE vocabularies of current models (GPT-2 to
Llama 3 and Qwen 2.5 all encode " the", " of", ...), so N such words make about N tokens. This
is an estimate: ``tokenload.workload.exact`` turns it into an exact length by asking the
target's tokenizer.
"""

from __future__ import annotations

import random

__all__ = ["WordSalad", "synthetic_prompt"]

_WORDS = (
    "the of and to in is was for on that with as by at from his it an were are which this be or"
    " has had not first one their its new after who they have her she two been other when there"
    " all during into school time may years more most only over city some world would where later"
    " up such used many can state about national out known university united then made"
).split()


def synthetic_prompt(n_tokens: int, seed: int = 0) -> str:
    """About ``n_tokens`` tokens of word salad; deterministic in ``seed``."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens: expected an integer >= 1, got {n_tokens}")
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n_tokens))


class WordSalad:
    """An endless seeded word salad read by character count.

    ``text(c)`` of a larger ``c`` always extends ``text`` of a smaller one, so a search over
    ``c`` only ever adds or removes characters at the end. Its first words are those of
    ``synthetic_prompt(n, seed)``.
    """

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._text = self._rng.choice(_WORDS)

    def text(self, n_chars: int) -> str:
        """The first ``n_chars`` characters."""
        if n_chars < 0:
            raise ValueError(f"n_chars: expected an integer >= 0, got {n_chars}")
        if n_chars > len(self._text):
            # Grow in blocks: each growth rebuilds the string once.
            words = [self._text]
            grown = len(self._text)
            target = max(n_chars, 2 * grown)
            while grown < target:
                word = self._rng.choice(_WORDS)
                words.append(word)
                grown += len(word) + 1
            self._text = " ".join(words)
        return self._text[:n_chars]

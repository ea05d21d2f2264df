"""Synthetic prompts of an approximate token length.

Common English words are one token each in the BPE vocabularies of current models (GPT-2 to
Llama 3 and Qwen 2.5 all encode " the", " of", ...), so N such words make about N tokens. This
is an estimate: the exact length is what the server reports in ``usage.prompt_tokens``, which
every record carries.
"""

from __future__ import annotations

import random

__all__ = ["synthetic_prompt"]

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

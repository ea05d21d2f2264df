"""Seeds that are the same in every process: per-worker and per-purpose random streams.

Python's ``hash()`` of a tuple with strings differs between processes (PYTHONHASHSEED), so
derived seeds come from a cryptographic hash of their parts instead.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["derive_seed", "stream_for"]


def derive_seed(seed: int, *parts: int | str) -> int:
    """A 64-bit seed determined by ``seed`` and ``parts`` alone."""
    text = "\x1f".join(["tokenload", str(int(seed)), *(f"{type(p).__name__}:{p}" for p in parts)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def stream_for(worker_index: int, seed: int, purpose: str = "") -> random.Random:
    """An independent random stream for one worker (and one purpose: input lengths, output
    lengths, group picks ... each draw from their own, so adding one never shifts another)."""
    if worker_index < 0:
        raise ValueError(f"worker_index: expected an integer >= 0, got {worker_index}")
    return random.Random(derive_seed(seed, "worker", worker_index, purpose))

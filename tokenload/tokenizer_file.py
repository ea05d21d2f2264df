"""Reading a Hugging Face ``tokenizer.json`` with the optional ``tokenizers`` package: one place
for what can go wrong (package missing, no file, not a tokenizer), each as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["read_tokenizer_json"]


def read_tokenizer_json(path: Path) -> Any:
    """The ``tokenizers.Tokenizer`` of ``path``; ValueError with one line (without the path:
    the caller names its option) when it cannot be read."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ValueError(
            "reading it needs the optional 'tokenizers' package (pip install tokenizers)"
        ) from None
    if not path.is_file():
        raise ValueError("no such file")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception for any malformed file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"expected a Hugging Face tokenizer.json ({first})") from None

"""A token counter from a local Hugging Face ``tokenizer.json`` (the optional ``tokenizers`` package).

A ``tokenizer.json`` holds no chat template, so chat prompts are counted only when the caller
gives ``render_chat`` (messages -> the templated text the server would tokenize).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tokenload.workload.errors import WorkloadError
from tokenload.workload.frames import Message, RequestPrompt, TokenCounter

__all__ = ["tokenizer_file_counter"]


def tokenizer_file_counter(
    path: str | Path,
    *,
    add_special_tokens: bool = True,
    render_chat: Callable[[Sequence[Message]], str] | None = None,
) -> TokenCounter:
    """A :data:`TokenCounter` that tokenizes locally with the tokenizer at ``path``."""
    from tokenload.tokenizer_file import read_tokenizer_json

    path = Path(path)
    try:
        tokenizer = read_tokenizer_json(path)
    except ValueError as exc:
        raise WorkloadError(f"tokenizer_file {path}: {exc}") from None

    def count(prompt: RequestPrompt) -> int:
        if not isinstance(prompt, str):
            if render_chat is None:
                raise WorkloadError(
                    f"tokenizer_file {path}: holds no chat template, so chat prompts need the server's "
                    "/tokenize (or a render_chat function)"
                )
            prompt = render_chat(prompt)
        return len(tokenizer.encode(prompt, add_special_tokens=add_special_tokens).ids)

    return count

"""Frames: where a prompt's variable text sits in the request the server tokenizes.

An exact-length search counts whole requests (BOS, chat template, a shared prefix, earlier
turns), so it needs to know what surrounds the text it grows. Frames are frozen and hashable:
they are part of a cached prompt's key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PLAIN", "Chat", "Completion", "Frame", "Message", "RequestPrompt", "TokenCounter"]

#: One chat message, as the OpenAI API and vLLM's ``/tokenize`` take it.
Message = dict[str, str]
#: What a request carries: a completions ``prompt`` or a chat ``messages`` list.
RequestPrompt = str | list[Message]
#: Tokens the server sees for a request: ``/tokenize``'s ``count`` (``{"prompt"}`` for a string,
#: ``{"messages"}`` for a list), or a local tokenizer's length.
TokenCounter = Callable[[RequestPrompt], int]


@dataclass(frozen=True, slots=True)
class Completion:
    """A completions prompt: ``prefix``, the variable text, ``suffix``."""

    prefix: str = ""
    suffix: str = ""

    def render(self, text: str) -> str:
        return self.prefix + text + self.suffix


@dataclass(frozen=True, slots=True)
class Chat:
    """A chat request: an optional system message, earlier ``(role, content)`` turns, then the
    variable text as the last message (a user's, or with ``role="system"`` a system prompt's)."""

    system: str | None = None
    history: tuple[tuple[str, str], ...] = ()
    role: str = "user"

    def render(self, text: str) -> list[Message]:
        messages: list[Message] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.extend({"role": role, "content": content} for role, content in self.history)
        messages.append({"role": self.role, "content": text})
        return messages


Frame = Completion | Chat

#: A bare completions prompt: the text is the whole prompt.
PLAIN = Completion()

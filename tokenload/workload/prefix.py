"""Shared prefixes: groups of requests that open with the same system prompt of P tokens.

Each group's prefix is an exact prompt of its own seed; a request picks its group round-robin
or at random and adds a distinct part so that only the prefix is shared. The *requested* hit
rate (the share of prompt tokens that a prefix cache could serve) is kept beside the requests,
for reports to show next to the server's measured rate.

How P is counted: for completions, the prefix's tokens as a prompt of its own (BOS and a closing
newline included: exactly what every request of the group starts with). For chat, the tokens of
a request holding only the system message; its generation prompt stands in for the user role
header that follows the prefix in a real request (the same count in ChatML and Llama 3).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from tokenload.workload.errors import WorkloadError
from tokenload.workload.exact import ExactPrompt
from tokenload.workload.frames import Chat, Completion, Frame
from tokenload.workload.maker import PromptMaker
from tokenload.workload.seeds import derive_seed

__all__ = ["PrefixedPrompt", "Selection", "SharedPrefixes", "requested_hit_rate"]

Selection = Literal["round_robin", "random"]
# Closes a completions prefix, so the words that follow never merge with its last token.
_SEPARATOR = "\n"


def requested_hit_rate(prefix_tokens: int, input_tokens: float, block_size: int = 1) -> float:
    """The share of prompt tokens a prefix cache could serve once warm: ``P / input``, with P
    rounded down to whole cache blocks (vLLM caches ``block_size``-token blocks)."""
    if input_tokens <= 0:
        raise WorkloadError(f"input_tokens: expected a positive mean length, got {input_tokens}")
    if block_size < 1:
        raise WorkloadError(f"block_size: expected an integer >= 1, got {block_size}")
    shared = (min(prefix_tokens, int(input_tokens)) // block_size) * block_size
    return shared / input_tokens


@dataclass(frozen=True, slots=True)
class PrefixedPrompt:
    """One request of a group: ``prompt`` is the whole request (``prompt.frame`` holds the prefix)."""

    group: int
    prompt: ExactPrompt
    prefix_tokens: int

    @property
    def input_tokens(self) -> int:
        return self.prompt.n_tokens

    @property
    def shared_fraction(self) -> float:
        return self.prefix_tokens / self.input_tokens


class SharedPrefixes:
    """``groups`` prefixes of ``prefix_tokens`` tokens, and requests that start with them."""

    def __init__(
        self,
        maker: PromptMaker,
        *,
        groups: int,
        prefix_tokens: int,
        chat: bool,
        selection: Selection = "round_robin",
        seed: int = 0,
        first_group: int = 0,
    ) -> None:
        if groups < 1:
            raise WorkloadError(f"prefix.groups: expected an integer >= 1, got {groups}")
        if prefix_tokens < 1:
            raise WorkloadError(f"prefix.tokens: expected an integer >= 1, got {prefix_tokens}")
        if selection not in ("round_robin", "random"):
            raise WorkloadError(f"prefix.selection: expected round_robin or random, got {selection!r}")
        if maker.method == "token_ids":
            raise WorkloadError(
                "prefix: shared prefixes are built from text; use a length_method other than token_ids"
            )
        self.maker = maker
        self.groups = groups
        self.prefix_tokens = prefix_tokens
        self.chat = chat
        self.selection: Selection = selection
        self.seed = seed
        # Workers start round-robin at different groups so that together they cover all groups.
        self._next_group = first_group % groups
        self.prefixes: tuple[ExactPrompt, ...] = tuple(self._make_prefix(g) for g in range(groups))
        self._frames: tuple[Frame, ...] = tuple(self._frame(p) for p in self.prefixes)
        self.issued_prompt_tokens = 0
        self.issued_prefix_tokens = 0

    def _make_prefix(self, group: int) -> ExactPrompt:
        frame: Frame = Chat(role="system") if self.chat else Completion(suffix=_SEPARATOR)
        return self.maker.make(self.prefix_tokens, derive_seed(self.seed, "prefix", group), frame)

    def _frame(self, prefix: ExactPrompt) -> Frame:
        assert prefix.text is not None
        if self.chat:
            return Chat(system=prefix.text)
        return Completion(prefix=prefix.text + _SEPARATOR)

    def prefix_text(self, group: int) -> str:
        """The text every request of ``group`` starts with (the system prompt, for chat)."""
        text = self.prefixes[group].text
        assert text is not None
        return text if self.chat else text + _SEPARATOR

    def pick_group(self, rng: random.Random) -> int:
        if self.selection == "random":
            return rng.randrange(self.groups)
        group = self._next_group
        self._next_group = (group + 1) % self.groups
        return group

    def next(self, input_tokens: int, rng: random.Random) -> PrefixedPrompt:
        """A request of ``input_tokens`` tokens in all: its group's prefix, then a distinct part."""
        if input_tokens <= self.prefix_tokens:
            raise WorkloadError(
                f"input_tokens: expected more than the shared prefix's {self.prefix_tokens} tokens, "
                f"got {input_tokens}"
            )
        group = self.pick_group(rng)
        prompt = self.maker.variant(input_tokens, rng.getrandbits(63), self._frames[group])
        self.issued_prompt_tokens += prompt.n_tokens
        self.issued_prefix_tokens += self.prefix_tokens
        return PrefixedPrompt(group, prompt, self.prefix_tokens)

    @property
    def requested_hit_rate(self) -> float | None:
        """Prefix tokens over prompt tokens of the requests made so far (None before the first)."""
        if not self.issued_prompt_tokens:
            return None
        return self.issued_prefix_tokens / self.issued_prompt_tokens

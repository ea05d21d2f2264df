"""Multi-turn conversations: message history, turn by turn, as pure state.

A :class:`Conversation` holds the planned user turns (from a ShareGPT conversation, or synthetic
ones of given lengths) and the history so far. The Locust user asks for the next turn's
messages (the whole history plus the new user message), sends them, passes the assistant's
reply text back with :meth:`Conversation.record_reply`, and sleeps :meth:`think_time_s` before
the next turn.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokenload.workload.datasets import DatasetItem
from tokenload.workload.errors import WorkloadError
from tokenload.workload.frames import Message
from tokenload.workload.lengths import Distribution
from tokenload.workload.synthetic import synthetic_prompt

__all__ = ["Conversation", "ThinkTime", "Turn"]

#: Seconds between a reply and the next turn: a fixed value or a distribution of durations.
ThinkTime = float | Distribution


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn's request: ``number`` counts from 1; ``messages`` is a fresh list, safe to send."""

    number: int
    messages: list[Message]
    user_text: str
    reference_reply: str | None


class Conversation:
    """One conversation's state. ``user_turns`` are the user's messages in order;
    ``reference_replies`` the dataset's own answers (for output lengths), when known."""

    def __init__(
        self,
        user_turns: Sequence[str],
        *,
        system: str | None = None,
        think_time: ThinkTime = 0.0,
        reference_replies: Sequence[str | None] = (),
        conversation_id: str = "",
    ) -> None:
        if not user_turns:
            raise WorkloadError(f"conversation {conversation_id}: expected at least one user turn, got none")
        if isinstance(think_time, (int, float)) and think_time < 0:
            raise WorkloadError(f"think_time_s: expected a number >= 0, got {think_time}")
        self.id = conversation_id
        self.user_turns = tuple(user_turns)
        self.reference_replies = tuple(reference_replies)
        self.think_time = think_time
        self.history: list[Message] = [{"role": "system", "content": system}] if system is not None else []
        self.turns_done = 0
        self._awaiting_reply = False
        self._ended = False

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_item(
        cls, item: DatasetItem, *, think_time: ThinkTime = 0.0, max_turns: int | None = None
    ) -> Conversation:
        """The user turns of a dataset conversation (ShareGPT); its own answers become
        reference replies, the live server's replies make the history."""
        turns = item.conversation if item.conversation is not None else item.messages
        if turns is None:
            turns = (("user", item.as_prompt()),)
        system = next((c for r, c in turns if r == "system"), None)
        users: list[str] = []
        replies: list[str | None] = []
        for role, content in turns:
            if role == "user":
                users.append(content)
                replies.append(None)
            elif role == "assistant" and users and replies[-1] is None:
                replies[-1] = content
        if max_turns is not None:
            users, replies = users[:max_turns], replies[:max_turns]
        return cls(
            users,
            system=system,
            think_time=think_time,
            reference_replies=replies,
            conversation_id=item.source,
        )

    @classmethod
    def synthetic(
        cls,
        n_turns: int,
        user_tokens: Distribution | int,
        rng: random.Random,
        *,
        make_text: Callable[[int, int], str] = synthetic_prompt,
        system: str | None = None,
        think_time: ThinkTime = 0.0,
        conversation_id: str = "",
    ) -> Conversation:
        """``n_turns`` user messages whose lengths are drawn from ``user_tokens``; ``make_text``
        (length, seed) writes each (default: an estimate; ``PromptMaker.content_text`` for exact)."""
        if n_turns < 1:
            raise WorkloadError(f"conversation.turns: expected an integer >= 1, got {n_turns}")
        lengths = [
            user_tokens if isinstance(user_tokens, int) else user_tokens.sample(rng) for _ in range(n_turns)
        ]
        users = [make_text(n, rng.getrandbits(63)) for n in lengths]
        return cls(users, system=system, think_time=think_time, conversation_id=conversation_id)

    # -- driving ------------------------------------------------------------------------------
    @property
    def n_turns(self) -> int:
        return len(self.user_turns)

    @property
    def done(self) -> bool:
        return self._ended or (self.turns_done == self.n_turns and not self._awaiting_reply)

    def next_turn(self) -> Turn:
        """The next turn's request: the history so far plus the next user message."""
        if self._awaiting_reply:
            raise WorkloadError(
                f"conversation {self.id}: turn {self.turns_done + 1} awaits its reply (record_reply first)"
            )
        if self.done:
            raise WorkloadError(f"conversation {self.id}: all {self.n_turns} turns are done")
        index = self.turns_done
        text = self.user_turns[index]
        self.history.append({"role": "user", "content": text})
        self._awaiting_reply = True
        reference = self.reference_replies[index] if index < len(self.reference_replies) else None
        return Turn(index + 1, [dict(m) for m in self.history], text, reference)

    def record_reply(self, text: str) -> None:
        """The assistant's reply to the pending turn becomes part of the history."""
        if not self._awaiting_reply:
            raise WorkloadError(f"conversation {self.id}: no turn awaits a reply")
        self.history.append({"role": "assistant", "content": text})
        self._awaiting_reply = False
        self.turns_done += 1

    def end(self) -> None:
        """Stop early (e.g. after a failed turn): the conversation is done."""
        if self._awaiting_reply:
            self.history.pop()  # the unanswered user message
            self._awaiting_reply = False
        self._ended = True

    def think_time_s(self, rng: random.Random) -> float:
        """Seconds to wait before the next turn."""
        if isinstance(self.think_time, Distribution):
            return self.think_time.sample_seconds(rng)
        return float(self.think_time)

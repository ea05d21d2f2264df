"""What one engine step is and what it gives back: the plan the driver waits out and each
request's output (tokenload.sim.engine makes both)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokenload.sim.costmodel import StepCost
from tokenload.sim.stats import RequestTimes

if TYPE_CHECKING:
    from tokenload.sim.scheduler import SimRequest

__all__ = ["RequestOutput", "StepPlan"]


@dataclass(slots=True)
class RequestOutput:
    """What one step produced for one request (one token per step in this emulator)."""

    request_id: str
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None  # 'length' | 'stop' when finished
    num_prompt_tokens: int
    num_output_tokens: int  # generated so far, this step's included
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    times: RequestTimes | None = None  # the request's timeline, once finished


@dataclass(slots=True)
class StepPlan:
    """One scheduled step. ``duration_s`` is how long the driver waits before ``complete``."""

    step_index: int
    start_s: float
    duration_s: float
    cost: StepCost
    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_preemptions: int
    _entries: list[tuple[SimRequest, int]] = field(repr=False)

    @property
    def request_ids(self) -> list[str]:
        return [req.request_id for req, _ in self._entries]

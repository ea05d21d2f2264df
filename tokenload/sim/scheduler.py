"""vLLM's continuous-batching scheduler: which requests run in the next step, how many tokens
each computes, and who is preempted when the KV cache runs out.

Two policies, as the presets name them:

- ``v1`` (vLLM V1, chunked prefill): running requests first, each taking what it needs (one token
  for a decode, the rest of its prompt for a partial prefill) from a per-step token budget; then
  waiting requests in FCFS order, their prompts split into chunks to fit the budget. A step mixes
  decodes and prefill chunks. New requests are not admitted in a step that preempted.
- ``v0`` (vLLM 0.6 default, no chunking): waiting prompts first, whole, as many as fit; a step
  runs either those prefills or one decode token for every running request, never both. New
  prompts must leave a 1% watermark of free blocks, as V0's block manager requires.

Preemption is by recomputation in both: the newest running request loses its blocks and goes
back to the front of the waiting queue; its prompt and the tokens it already produced are
computed again as a prefill when it is readmitted.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from tokenload.sim.kvcache import KVCache, SeqBlocks
from tokenload.sim.stats import RequestTimes

__all__ = ["FINISHED", "RUNNING", "WAITING", "ScheduleResult", "Scheduler", "SimRequest"]

WAITING = 0
RUNNING = 1
FINISHED = 2


class SimRequest:
    """A request inside the engine. ``all_token_ids`` is the prompt followed by the outputs."""

    __slots__ = (
        "admitted",
        "all_token_ids",
        "finish_at",
        "finish_reason",
        "kv",
        "max_output_tokens",
        "max_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_output_tokens",
        "num_prompt_tokens",
        "num_tokens",
        "request_id",
        "status",
        "stop_at",
        "text_offset",
        "times",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        max_output_tokens: int,
        stop_at: int | None,
        text_offset: int,
        arrival_time_s: float,
    ) -> None:
        self.request_id = request_id
        self.all_token_ids = list(prompt_token_ids)
        # Hot loops read num_tokens and kv.num_slots instead of calling len() on lists.
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_tokens = self.num_prompt_tokens  # len(all_token_ids), kept to spare len() calls
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.max_tokens = max_tokens
        self.max_output_tokens = max_output_tokens  # max_tokens, capped by max_model_len
        self.stop_at = stop_at  # output count whose last token is EOS; None: never (ignore_eos)
        # Output count at which the request ends, whichever way: one comparison per token.
        self.finish_at = max_output_tokens if stop_at is None else min(stop_at, max_output_tokens)
        self.text_offset = text_offset
        self.status = WAITING
        self.admitted = False  # scheduled at least once (prefix-cache stats count only the first time)
        self.finish_reason: str | None = None
        self.kv = SeqBlocks()
        self.times = RequestTimes(arrival_s=arrival_time_s)


@dataclass(slots=True)
class ScheduleResult:
    """The batch of one step, with the aggregates the cost model needs."""

    entries: list[tuple[SimRequest, int]] = field(default_factory=list)  # (request, tokens computed)
    newly_admitted: list[SimRequest] = field(default_factory=list)
    num_preemptions: int = 0
    waiting_cause: str | None = None
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0
    num_prefill_tokens: int = 0
    prefill_attention_pairs: float = 0.0
    prefill_context_tokens: int = 0
    num_prefill_samples: int = 0


class Scheduler:
    """Queues and policy. ``schedule`` only plans and allocates KV blocks; the engine applies
    the step's results when it completes."""

    def __init__(
        self,
        kv: KVCache,
        *,
        policy: str,
        chunked_prefill: bool,
        max_num_seqs: int,
        max_num_batched_tokens: int,
    ) -> None:
        if policy not in ("v1", "v0"):
            raise ValueError(f"unknown scheduler policy {policy!r}")
        self.kv = kv
        self.policy = policy
        self.chunked_prefill = chunked_prefill
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        # V0's block manager admits a prompt only if 1% of the blocks stay free afterwards.
        self.watermark_blocks = int(0.01 * kv.num_blocks) if policy == "v0" else 0
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []

    def add(self, req: SimRequest) -> None:
        self.waiting.append(req)

    def remove(self, req: SimRequest) -> None:
        """Take an unfinished request out of the queues and free its blocks (abort)."""
        if req.status == RUNNING:
            self.running.remove(req)
        elif req.status == WAITING:
            self.waiting.remove(req)
        self.kv.free(req.kv)

    def fits_ever(self, num_tokens: int) -> bool:
        """Whether a sequence of ``num_tokens`` could be admitted into an empty cache."""
        return self.kv.blocks_for_tokens(num_tokens) <= self.kv.num_blocks - self.watermark_blocks

    def schedule(self, start_s: float = math.inf) -> ScheduleResult:
        """Plan a step that starts at ``start_s``: requests that arrived after it are not seen
        yet (they wait for a later step, as a request reaching vLLM mid-step does)."""
        if self.policy == "v0" and not self.chunked_prefill:
            return self._schedule_prefill_first(start_s)
        return self._schedule_mixed(start_s)

    # --- policies -------------------------------------------------------------------------------

    def _preempt_for(self, req: SimRequest, num_tokens: int, result: ScheduleResult) -> bool:
        """Allocate room for ``req`` to hold ``num_tokens``, preempting the newest running
        requests until it fits; False if ``req`` itself had to go."""
        kv = self.kv
        running = self.running
        while not kv.allocate(req.kv, num_tokens):
            victim = running.pop()
            self._preempt(victim)
            result.num_preemptions += 1
            if victim is req:
                return False
        return True

    def _preempt(self, req: SimRequest) -> None:
        self.kv.free(req.kv)
        req.status = WAITING
        req.num_computed_tokens = 0
        req.times.num_preemptions += 1
        self.waiting.appendleft(req)

    def _add_entry(self, result: ScheduleResult, req: SimRequest, n: int) -> None:
        computed = req.num_computed_tokens
        result.entries.append((req, n))
        if n == 1:
            result.num_decode_seqs += 1
            result.decode_context_tokens += computed + 1
        else:
            result.num_prefill_tokens += n
            result.prefill_attention_pairs += n * computed + n * (n + 1) / 2
            result.prefill_context_tokens += computed
            if computed + n == req.num_tokens:
                result.num_prefill_samples += 1

    def _cached_prefix(self, req: SimRequest) -> list[int]:
        if not self.kv.enable_prefix_caching:
            return []
        # At least one token must be computed to produce logits, so never hit the whole sequence.
        return self.kv.find_cached_prefix(req.kv, req.all_token_ids, req.num_tokens - 1)

    def _admit(self, req: SimRequest, cached_blocks: list[int], result: ScheduleResult) -> None:
        self.waiting.popleft()
        self.running.append(req)
        req.status = RUNNING
        num_cached = len(cached_blocks) * self.kv.block_size
        req.num_computed_tokens = num_cached
        if not req.admitted:
            req.admitted = True
            req.num_cached_tokens = num_cached
            if self.kv.enable_prefix_caching:
                self.kv.record_prefix_query(req.num_tokens, num_cached)
        result.newly_admitted.append(req)

    def _schedule_mixed(self, start_s: float) -> ScheduleResult:
        """vLLM V1: decode-first mixed batches under a token budget, chunked prefill."""
        result = ScheduleResult()
        kv = self.kv
        block_size = kv.block_size
        running = self.running
        budget = self.max_num_batched_tokens
        entries = result.entries
        num_decode = 0
        decode_context = 0
        i = 0
        num_running = len(running)
        while i < num_running and budget > 0:
            req = running[i]
            computed = req.num_computed_tokens
            n = req.num_tokens - computed
            if n == 1 and computed < req.kv.num_slots:
                # The common case, kept inline: a decode whose next token has a slot already.
                entries.append((req, 1))
                num_decode += 1
                decode_context += computed + 1
                budget -= 1
                i += 1
                continue
            if n > budget:
                n = budget
            if computed + n > req.kv.num_slots and not self._preempt_for(req, computed + n, result):
                break
            num_running = len(running)
            self._add_entry(result, req, n)
            budget -= n
            i += 1
        result.num_decode_seqs += num_decode
        result.decode_context_tokens += decode_context

        waiting = self.waiting
        if not waiting:
            return result
        if result.num_preemptions:
            result.waiting_cause = "kv_cache"
            return result
        while waiting:
            if budget <= 0:
                result.waiting_cause = "token_budget"
                break
            if len(running) >= self.max_num_seqs:
                result.waiting_cause = "max_num_seqs"
                break
            req = waiting[0]
            if req.times.arrival_s > start_s:
                break  # FCFS: everything behind it arrived later still
            cached = self._cached_prefix(req)
            num_cached = len(cached) * block_size
            n = req.num_tokens - num_cached
            if n > budget:
                if not self.chunked_prefill:
                    result.waiting_cause = "token_budget"
                    break
                n = budget
            if not kv.allocate(req.kv, num_cached + n, cached):
                result.waiting_cause = "kv_cache"
                break
            self._admit(req, cached, result)
            self._add_entry(result, req, n)
            budget -= n
        return result

    def _schedule_prefill_first(self, start_s: float) -> ScheduleResult:
        """vLLM 0.6 (V0) default: whole prompts first; otherwise one decode step for everyone."""
        result = ScheduleResult()
        kv = self.kv
        waiting = self.waiting
        if waiting:
            budget = self.max_num_batched_tokens
            while waiting:
                req = waiting[0]
                if req.times.arrival_s > start_s:
                    break
                cached = self._cached_prefix(req)
                num_tokens = req.num_tokens
                n = num_tokens - len(cached) * kv.block_size
                if n > budget:
                    result.waiting_cause = "token_budget"
                    break
                if len(self.running) >= self.max_num_seqs:
                    result.waiting_cause = "max_num_seqs"
                    break
                if not kv.allocate(req.kv, num_tokens, cached, reserve=self.watermark_blocks):
                    result.waiting_cause = "kv_cache"
                    break
                self._admit(req, cached, result)
                self._add_entry(result, req, n)
                budget -= n
            if result.entries:
                return result

        running = self.running
        entries = result.entries
        num_decode = 0
        decode_context = 0
        i = 0
        num_running = len(running)
        while i < num_running:
            req = running[i]
            computed = req.num_computed_tokens
            if computed >= req.kv.num_slots and not self._preempt_for(req, computed + 1, result):
                break
            num_running = len(running)
            entries.append((req, 1))
            num_decode += 1
            decode_context += computed + 1
            i += 1
        result.num_decode_seqs += num_decode
        result.decode_context_tokens += decode_context
        if waiting and result.num_preemptions:
            result.waiting_cause = "kv_cache"
        return result

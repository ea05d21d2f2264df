"""What the engine reports: per-request timestamps (the ground truth a load test is judged
against) and per-step statistics (what the /metrics exporter consumes)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ALL_WAITING_CAUSES", "WAITING_CAUSES", "FinishedRequest", "RequestTimes", "StepStats"]

#: Why the head of the waiting queue was not admitted in a step: no free KV blocks (or a
#: preemption this step), max_num_seqs running, or the step's token budget spent. vLLM exports all
#: of these as reason="capacity" in vllm:num_requests_waiting_by_reason; the emulator keeps them
#: apart. "new" marks requests that arrived after the last step was planned.
WAITING_CAUSES = ("kv_cache", "max_num_seqs", "token_budget")
ALL_WAITING_CAUSES = (*WAITING_CAUSES, "new")


@dataclass(slots=True)
class RequestTimes:
    """One request's timeline, in the clock the driver passes to the engine (seconds).

    Intervals follow vLLM's definitions: queue = first scheduled - arrival, prefill = first token
    - first scheduled, decode = last token - first token, inference = last token - first scheduled.
    """

    arrival_s: float
    first_scheduled_s: float | None = None
    #: When the engine took the request in, if later than its arrival at the server: after the
    #: API server's own time (the profile's frontend_request_s) and, on V1, at the end of the
    #: step that was running when it came (vLLM V1 stamps QUEUED between steps). Queue time
    #: counts from here, as vLLM's does; TTFT and E2E from the arrival.
    queued_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    num_preemptions: int = 0

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def queue_time_s(self) -> float | None:
        if self.first_scheduled_s is None:
            return None
        return self.first_scheduled_s - (self.arrival_s if self.queued_s is None else self.queued_s)

    @property
    def prefill_time_s(self) -> float | None:
        if self.first_token_s is None or self.first_scheduled_s is None:
            return None
        return self.first_token_s - self.first_scheduled_s

    @property
    def decode_time_s(self) -> float | None:
        if self.last_token_s is None or self.first_token_s is None:
            return None
        return self.last_token_s - self.first_token_s

    @property
    def inference_time_s(self) -> float | None:
        if self.last_token_s is None or self.first_scheduled_s is None:
            return None
        return self.last_token_s - self.first_scheduled_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_s is None else self.finished_s - self.arrival_s


@dataclass(slots=True)
class FinishedRequest:
    """A request that left the engine, with what the per-request histograms observe."""

    request_id: str
    finish_reason: str  # 'stop' | 'length' | 'abort'
    times: RequestTimes
    num_prompt_tokens: int
    num_generation_tokens: int
    max_tokens: int
    num_cached_tokens: int

    @property
    def mean_time_per_output_token_s(self) -> float:
        """Decode time over the tokens after the first (vLLM's request_time_per_output_token)."""
        decode_s = self.times.decode_time_s
        if decode_s is None or self.num_generation_tokens <= 1:
            return 0.0
        return decode_s / (self.num_generation_tokens - 1)


@dataclass(slots=True)
class StepStats:
    """One engine step: gauges after it, counters and latency observations from it."""

    now_s: float
    duration_s: float
    num_running: int
    num_waiting: int  # waiting requests the scheduler has seen (vLLM's num_requests_waiting)
    waiting_cause: str | None  # one of WAITING_CAUSES when those wait, else None
    kv_cache_usage_ratio: float
    num_new_arrivals: int = 0  # also waiting, but arrived after this step was planned
    num_preemptions: int = 0
    num_scheduled_tokens: int = 0
    num_prefill_tokens_computed: int = 0  # prompt tokens run this step, recomputation included
    num_prompt_tokens_first_token: int = 0  # prompts of the requests that got their first token
    num_cached_prompt_tokens_first_token: int = 0  # of those, tokens that came from the prefix cache
    num_generation_tokens: int = 0
    prefix_cache_query_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    flops: float = 0.0
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    ttfts_s: list[float] = field(default_factory=list)
    inter_token_latencies_s: list[float] = field(default_factory=list)
    finished: list[FinishedRequest] = field(default_factory=list)

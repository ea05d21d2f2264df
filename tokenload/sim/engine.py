"""The emulator's engine: vLLM's step loop, driven from outside in real or virtual time.

The driver owns the clock. It calls ``schedule(now_s)`` to get the next step and its duration
from the cost model, waits that long (``gevent.sleep`` for a server, nothing in virtual time),
then calls ``complete(plan, now_s)`` to get each request's new tokens. Requests may be added or
aborted at any time, including while a step is in flight; they take effect at the next step
that starts after their arrival.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tokenload.sim.costmodel import CostModel
from tokenload.sim.engine_config import EngineConfig, OutputLenConfig
from tokenload.sim.kvcache import KVCache, num_gpu_blocks_for
from tokenload.sim.metrics import SimMetrics
from tokenload.sim.profile import DEFAULT_PROFILE, Profile, load_profile
from tokenload.sim.scheduler import FINISHED, RUNNING, Scheduler, SimRequest
from tokenload.sim.stats import WAITING_CAUSES, FinishedRequest, RequestTimes, StepStats
from tokenload.sim.stepplan import RequestOutput, StepPlan
from tokenload.sim.vocab import ByteVocabulary, Vocabulary

__all__ = ["EngineConfig", "EngineCounters", "OutputLenConfig", "RequestOutput", "SimEngine", "StepPlan"]


@dataclass(slots=True)
class EngineCounters:
    """Cumulative ground truth about the engine's behaviour (not exported as vLLM metrics)."""

    num_steps: int = 0
    busy_time_s: float = 0.0
    num_preemptions: int = 0
    num_prefill_tokens_computed: int = 0
    num_generation_tokens: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    max_num_running: int = 0
    max_kv_cache_usage_ratio: float = 0.0
    #: Steps after which requests were left waiting, by cause.
    steps_waiting_by_cause: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WAITING_CAUSES, 0))


class SimEngine:
    """An emulated vLLM engine on one GPU of ``profile``."""

    def __init__(
        self,
        profile: Profile | str = DEFAULT_PROFILE,
        config: EngineConfig | None = None,
        *,
        served_model_name: str | None = None,
        metrics: SimMetrics | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        self.profile = profile if isinstance(profile, Profile) else load_profile(profile)
        #: How prompts are counted and what is generated: the byte tokenizer unless given a
        #: tokenizer file (token-id prompts may then use the emulated model's whole vocabulary).
        self.vocabulary = vocabulary or ByteVocabulary(self.profile.model.vocab_size)
        self.config = config or EngineConfig()
        cfg = self.config
        self.model_name = served_model_name or self.profile.model.name
        self.max_model_len = cfg.max_model_len or self.profile.model.max_model_len
        chunked = cfg.chunked_prefill
        if cfg.max_num_batched_tokens is not None:
            self.max_num_batched_tokens = cfg.max_num_batched_tokens
        else:
            self.max_num_batched_tokens = 2048 if chunked else max(self.max_model_len, 2048)
        if not chunked and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than max_model_len "
                f"({self.max_model_len}) without chunked prefill: long prompts could never be scheduled"
            )
        self.num_gpu_blocks = cfg.num_gpu_blocks or num_gpu_blocks_for(
            self.profile, cfg.block_size, cfg.gpu_memory_utilization
        )
        if self.num_gpu_blocks * cfg.block_size < self.max_model_len:
            # vLLM refuses to start in this case too. (The V0 check below is stricter than vLLM's,
            # which would instead drop such a request with an error once it grew that long.)
            raise ValueError(
                f"max_model_len ({self.max_model_len}) is larger than the KV cache can hold "
                f"({self.num_gpu_blocks * cfg.block_size} tokens in {self.num_gpu_blocks} blocks); "
                "lower max_model_len or raise num_gpu_blocks"
            )
        self.kv = KVCache(self.num_gpu_blocks, cfg.block_size, cfg.enable_prefix_caching)
        self.scheduler = Scheduler(
            self.kv,
            policy=cfg.preset,
            chunked_prefill=chunked,
            max_num_seqs=cfg.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
        )
        if not self.scheduler.fits_ever(self.max_model_len):
            raise ValueError(
                f"max_model_len ({self.max_model_len}) does not fit the KV cache once V0's 1% watermark "
                f"of {self.scheduler.watermark_blocks} blocks is kept free; lower max_model_len"
            )
        self.cost_model = CostModel.from_profile(self.profile)
        self.counters = EngineCounters()
        self.metrics = metrics
        self._rng = random.Random(cfg.seed)
        self._text = self.vocabulary.output_corpus(cfg.seed)
        self._requests: dict[str, SimRequest] = {}
        self._inflight: StepPlan | None = None
        self._step_index = 0
        self._reported_query_tokens = 0
        self._reported_hit_tokens = 0
        self._unreported_preemptions = 0  # from schedule() calls since the last complete()
        # Requests added since the last schedule(): vLLM has not seen them yet (its engine core
        # takes new requests in between steps), so its waiting gauge does not count them.
        self._new_arrivals: set[str] = set()
        # V1 stamps a request QUEUED when its engine core takes it in (scheduler.add_request,
        # between steps): the wait for the step that was running when it came is outside
        # vllm:request_queue_time_seconds (in the server's TTFT, not its queue). V0 counts queue
        # time from the request's arrival at the engine (Sequence metrics' arrival_time).
        self._queued_when_seen = cfg.preset == "v1"
        # Why the head of the queue was left waiting by the last schedule(); None if nothing was.
        self.waiting_cause: str | None = None
        # CPU time other work on the engine's core took from it (add_stall), owed by the next step.
        self._stall_s = 0.0
        if metrics is not None:
            metrics.configure(self.max_model_len, cfg.max_num_seqs)
            metrics.set_cache_config(self.cache_config_info())
            self._publish_gauges()

    def add_stall(self, seconds: float) -> None:
        """CPU time that other work on the engine's core (an API server sharing it) took from the
        engine: the next step takes that much longer."""
        if seconds < 0:
            raise ValueError(f"a stall must not be negative, got {seconds}")
        self._stall_s += seconds

    # --- queries -----------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        """Whether any request is waiting or running."""
        return bool(self.scheduler.running or self.scheduler.waiting)

    def next_start(self, after_s: float | None) -> float | None:
        """When, in model time, the next step can start if the last one ended at ``after_s``
        (None: there was none): then if one runs or one that reached the engine by then waits,
        else when the first waiting one reached it (``queued_s``, after the API server, else its
        arrival); None if nothing waits."""
        sched = self.scheduler
        if after_s is not None and sched.running:
            return after_s
        if not sched.waiting:
            return None
        head = sched.waiting[0].times
        first = head.arrival_s if head.queued_s is None else head.queued_s
        return first if after_s is None or first > after_s else after_s

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def kv_cache_usage_ratio(self) -> float:
        return self.kv.usage_ratio

    @property
    def current_waiting_cause(self) -> str | None:
        """Why requests are waiting now: the last step's cause (FCFS, so later arrivals wait behind
        the same head), or 'new' when the only ones waiting arrived after it was planned; None if
        none wait."""
        if not self.scheduler.waiting:
            return None
        return self.waiting_cause or "new"

    @property
    def num_waiting_seen(self) -> int:
        """Waiting requests the scheduler has already considered: what vLLM's
        num_requests_waiting shows (arrivals since the last step are not in it yet)."""
        return len(self.scheduler.waiting) - len(self._new_arrivals)

    def request_times(self, request_id: str) -> RequestTimes | None:
        """The timeline of a request still in the engine."""
        req = self._requests.get(request_id)
        return None if req is None else req.times

    def cache_config_info(self) -> dict[str, str]:
        """The KV cache configuration, as vLLM reports it in vllm:cache_config_info."""
        cfg = self.config
        size_tokens = self.num_gpu_blocks * cfg.block_size
        return {
            "block_size": str(cfg.block_size),
            "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_gpu_blocks_override": str(cfg.num_gpu_blocks),
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
            "kv_cache_size_tokens": str(size_tokens),
            "kv_cache_memory_bytes": str(int(size_tokens * self.profile.model.kv_bytes_per_token)),
            "kv_cache_max_concurrency": str(round(size_tokens / self.max_model_len, 2)),
            "user_specified_block_size": str(cfg.block_size != 16),
        }

    # --- requests ----------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        max_tokens: int,
        min_tokens: int = 0,
        ignore_eos: bool = False,
        *,
        arrival_time_s: float,
        queued_time_s: float | None = None,
    ) -> None:
        """Queue a request that reached the server at ``arrival_time_s`` (and the engine at
        ``queued_time_s``, when the API server's own time lies between). The caller validates
        lengths against ``max_model_len`` first (as the server answers 400); violations here
        raise ValueError."""
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        num_prompt = len(prompt_token_ids)
        if num_prompt == 0:
            raise ValueError("the prompt is empty")
        if num_prompt >= self.max_model_len:
            raise ValueError(f"prompt has {num_prompt} tokens; max_model_len is {self.max_model_len}")
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if not self.scheduler.fits_ever(num_prompt):
            raise ValueError(f"prompt of {num_prompt} tokens can never fit the KV cache")
        max_output = min(max_tokens, self.max_model_len - num_prompt)
        # Draw both even for ignore_eos, so the stream of draws does not depend on request flags.
        natural_len = self.config.output_len.sample(self._rng)
        text_offset = self._text.start_offset(self._rng)
        stop_at = None if ignore_eos else max(natural_len, min_tokens + 1)
        req = SimRequest(
            request_id, prompt_token_ids, max_tokens, max_output, stop_at, text_offset, arrival_time_s
        )
        req.times.queued_s = queued_time_s
        self._requests[request_id] = req
        self.scheduler.add(req)
        self._new_arrivals.add(request_id)

    def abort(self, request_id: str) -> bool:
        """Drop a request (client gone); False if it is not in the engine."""
        req = self._requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.remove(req)
        self._new_arrivals.discard(request_id)
        req.status = FINISHED
        req.finish_reason = "abort"
        self.counters.num_aborted += 1
        if self.metrics is not None:
            self.metrics.observe_abort()
        self._publish_gauges()
        return True

    # --- the step loop -----------------------------------------------------------------------

    def schedule(self, now_s: float) -> StepPlan | None:
        """Plan the next step starting at ``now_s``, from the requests that had arrived by then;
        None when nothing can run."""
        if self._inflight is not None:
            raise RuntimeError("schedule() called while a step is in flight; call complete() first")
        result = self.scheduler.schedule(now_s)
        if self._new_arrivals:
            # What arrived after the step's start is still unseen (it waits for the next step).
            reqs = self._requests
            seen = {r for r in self._new_arrivals if reqs[r].times.arrival_s <= now_s}
            if self._queued_when_seen:
                for r in seen:
                    reqs[r].times.queued_s = now_s
            self._new_arrivals -= seen
        c = self.counters
        self.waiting_cause = result.waiting_cause if self.scheduler.waiting else None
        if self.waiting_cause is not None:
            c.steps_waiting_by_cause[self.waiting_cause] += 1
        for req in result.newly_admitted:
            if req.times.first_scheduled_s is None:
                req.times.first_scheduled_s = now_s
        c.num_preemptions += result.num_preemptions
        self._unreported_preemptions += result.num_preemptions
        # Usage peaks right after allocation, before finished requests free their blocks.
        c.max_kv_cache_usage_ratio = max(c.max_kv_cache_usage_ratio, self.kv.usage_ratio)
        c.max_num_running = max(c.max_num_running, len(self.scheduler.running))
        if not result.entries:
            if result.num_preemptions:
                self._publish_gauges()
            self._stall_s = 0.0  # an idle engine has the time it lost to spare
            return None
        cost = self.cost_model.cost(
            result.num_decode_seqs,
            result.decode_context_tokens,
            result.num_prefill_tokens,
            result.prefill_attention_pairs,
            result.prefill_context_tokens,
            result.num_prefill_samples,
        )
        plan = StepPlan(
            step_index=self._step_index,
            start_s=now_s,
            duration_s=cost.duration_s + self._stall_s,
            cost=cost,
            num_seqs=len(result.entries),
            num_prefill_tokens=result.num_prefill_tokens,
            num_decode_tokens=result.num_decode_seqs,
            num_preemptions=result.num_preemptions,
            _entries=result.entries,
        )
        self._step_index += 1
        self._inflight = plan
        self._stall_s = 0.0
        return plan

    def complete(self, plan: StepPlan, now_s: float) -> list[RequestOutput]:
        """Finish the step ``plan`` at ``now_s``: every request that completed its prompt (or
        its decode) gets one token."""
        if plan is not self._inflight:
            raise RuntimeError("complete() must be given the plan of the step in flight")
        self._inflight = None
        kv = self.kv
        block_size = kv.block_size
        prefix_caching = kv.enable_prefix_caching
        corpus = self._text.token_ids
        pieces = self._text.pieces
        corpus_len = len(corpus)
        eos = self.vocabulary.eos_id
        outputs: list[RequestOutput] = []
        ttfts: list[float] = []
        itls: list[float] = []
        finished: list[FinishedRequest] = []
        prompt_first = 0
        cached_first = 0
        prefill_computed = 0
        generated = 0
        # The hot loop of the emulator: one pass over the step's requests, attribute reads cached
        # in locals and the common cases (ASCII token, not finished) without function calls.
        for req, n in plan._entries:
            if req.status != RUNNING:
                continue  # aborted while the step ran
            computed = req.num_computed_tokens + n
            req.num_computed_tokens = computed
            if n != 1 or computed <= req.num_prompt_tokens:
                prefill_computed += n
            if prefix_caching and computed // block_size > req.kv.num_registered:
                kv.cache_full_blocks(req.kv, req.all_token_ids, computed)
            num_tokens = req.num_tokens
            if computed < num_tokens:
                continue  # a prompt chunk: no token yet
            k = req.num_output_tokens + 1
            req.num_output_tokens = k
            req.num_tokens = num_tokens + 1
            generated += 1
            times = req.times
            if k < req.finish_at and k > 1:
                # Mid-stream decode: by far the most frequent case.
                pos = (req.text_offset + k - 1) % corpus_len
                token = corpus[pos]
                req.all_token_ids.append(token)
                itls.append(now_s - times.last_token_s)  # type: ignore[operator]
                times.last_token_s = now_s
                new_text = pieces[pos]
                outputs.append(
                    RequestOutput(
                        req.request_id,
                        [token],
                        new_text,
                        False,
                        None,
                        req.num_prompt_tokens,
                        k,
                        req.num_cached_tokens,
                    )
                )
                continue
            stop_at = req.stop_at
            if stop_at is not None and k >= stop_at:
                token, new_text = eos, ""
            else:
                pos = (req.text_offset + k - 1) % corpus_len
                token, new_text = corpus[pos], pieces[pos]
            req.all_token_ids.append(token)
            if k == 1:
                times.first_token_s = now_s
                ttfts.append(now_s - times.arrival_s)
                prompt_first += req.num_prompt_tokens
                cached_first += req.num_cached_tokens
            else:
                itls.append(now_s - times.last_token_s)  # type: ignore[operator]
            times.last_token_s = now_s
            if k < req.finish_at:
                outputs.append(
                    RequestOutput(
                        req.request_id,
                        [token],
                        new_text,
                        False,
                        None,
                        req.num_prompt_tokens,
                        k,
                        req.num_cached_tokens,
                    )
                )
                continue
            reason = "stop" if stop_at is not None and k >= stop_at else "length"
            req.status = FINISHED
            req.finish_reason = reason
            times.finished_s = now_s
            kv.free(req.kv)
            del self._requests[req.request_id]
            finished.append(
                FinishedRequest(
                    req.request_id,
                    reason,
                    times,
                    req.num_prompt_tokens,
                    k,
                    req.max_tokens,
                    req.num_cached_tokens,
                )
            )
            outputs.append(
                RequestOutput(
                    req.request_id,
                    [token],
                    new_text,
                    True,
                    reason,
                    req.num_prompt_tokens,
                    k,
                    req.num_cached_tokens,
                    times,
                )
            )
        sched = self.scheduler
        if finished:
            sched.running = [r for r in sched.running if r.status == RUNNING]

        c = self.counters
        c.num_steps += 1
        c.busy_time_s += plan.duration_s
        c.num_prefill_tokens_computed += prefill_computed
        c.num_generation_tokens += generated
        c.num_finished += len(finished)

        if self.metrics is not None:
            query_tokens, hit_tokens = kv.query_tokens, kv.hit_tokens
            self.metrics.observe_step(
                StepStats(
                    now_s=now_s,
                    duration_s=plan.duration_s,
                    num_running=len(sched.running),
                    num_waiting=self.num_waiting_seen,
                    waiting_cause=self.waiting_cause,
                    kv_cache_usage_ratio=kv.usage_ratio,
                    num_new_arrivals=len(self._new_arrivals),
                    num_preemptions=self._unreported_preemptions,
                    num_scheduled_tokens=plan.num_prefill_tokens + plan.num_decode_tokens,
                    num_prefill_tokens_computed=prefill_computed,
                    num_prompt_tokens_first_token=prompt_first,
                    num_cached_prompt_tokens_first_token=cached_first,
                    num_generation_tokens=generated,
                    prefix_cache_query_tokens=query_tokens - self._reported_query_tokens,
                    prefix_cache_hit_tokens=hit_tokens - self._reported_hit_tokens,
                    flops=plan.cost.flops,
                    read_bytes=plan.cost.read_bytes,
                    write_bytes=plan.cost.write_bytes,
                    ttfts_s=ttfts,
                    inter_token_latencies_s=itls,
                    finished=finished,
                )
            )
            self._reported_query_tokens, self._reported_hit_tokens = query_tokens, hit_tokens
        self._unreported_preemptions = 0
        return outputs

    def _publish_gauges(self) -> None:
        if self.metrics is None:
            return
        self.metrics.set_gauges(
            num_running=len(self.scheduler.running),
            num_waiting=self.num_waiting_seen,
            waiting_cause=self.waiting_cause,
            kv_cache_usage_ratio=self.kv.usage_ratio,
            num_new_arrivals=len(self._new_arrivals),
        )

"""Drive the engine in simulated time: closed-loop clients or a fixed arrival schedule, no
sleeping, no network. For tests, docs and bench scripts; the HTTP server drives the same engine
API in real time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tokenload.sim.apiserver import APIServer
from tokenload.sim.engine import RequestOutput, SimEngine
from tokenload.sim.stats import RequestTimes

__all__ = [
    "RequestSpec",
    "StepSample",
    "VirtualDriver",
    "VirtualRequest",
    "VirtualRun",
    "run_arrivals",
    "run_closed_loop",
]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What a virtual client sends."""

    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = True


@dataclass(slots=True)
class VirtualRequest:
    """One request as its client saw it (no network: the engine's own times)."""

    request_id: str
    client: int | None
    num_prompt_tokens: int
    max_tokens: int
    arrival_s: float
    token_times_s: list[float] = field(default_factory=list)
    text_chunks: list[str] = field(default_factory=list)
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    finish_reason: str | None = None
    times: RequestTimes | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def text(self) -> str:
        return "".join(self.text_chunks)

    @property
    def ttft_s(self) -> float:
        return self.token_times_s[0] - self.arrival_s

    @property
    def itls_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in itertools.pairwise(t)]

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first."""
        t = self.token_times_s
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else 0.0

    @property
    def e2e_s(self) -> float:
        return self.token_times_s[-1] - self.arrival_s


@dataclass(frozen=True, slots=True)
class StepSample:
    """The engine right after scheduling one step (KV usage is at its peak then)."""

    start_s: float
    duration_s: float
    compute_s: float
    memory_s: float
    num_running: int
    num_waiting: int
    waiting_cause: str | None
    kv_cache_usage_ratio: float
    num_prefill_tokens: int
    num_decode_tokens: int
    num_preemptions: int


@dataclass(slots=True)
class VirtualRun:
    requests: list[VirtualRequest]
    timeline: list[StepSample]
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def num_output_tokens(self) -> int:
        return sum(r.num_output_tokens for r in self.requests)

    @property
    def output_tokens_per_s(self) -> float:
        return self.num_output_tokens / self.duration_s if self.duration_s > 0 else 0.0


class VirtualDriver:
    """An event loop in simulated time around one engine."""

    def __init__(self, engine: SimEngine, *, start_s: float = 0.0, record_timeline: bool = True) -> None:
        self.engine = engine
        self.now_s = start_s
        self.start_s = start_s
        self.record_timeline = record_timeline
        self.requests: dict[str, VirtualRequest] = {}
        self.timeline: list[StepSample] = []
        #: (when it reaches the server, seq, id, spec, client): handed to the API server
        #: (tokenload.sim.apiserver) in that order as the clock passes it.
        self._arrivals: list[tuple[float, int, str, RequestSpec, int | None]] = []
        #: (when the engine sees it, seq, id, spec, client, when it reached the server): the API
        #: server's queue and CPU time and the profile's fixed frontend_request_s lie between.
        self._ready: list[tuple[float, int, str, RequestSpec, int | None, float]] = []
        self._api = APIServer.for_engine(engine)
        self._seq = 0
        self._timers: list[tuple[float, int, Callable[[float], None]]] = []
        self._timer_seq = 0
        #: A timer may set this: :meth:`run` stops once the clock reaches it (as ``until_s``).
        self.stop_s: float | None = None

    def at(self, t_s: float, fn: Callable[[float], None]) -> None:
        """Call ``fn(t_s)`` once the clock reaches ``t_s``: after every step that ended by then and
        before the step running at that time completes (what a scrape at ``t_s`` would see).
        ``fn`` may submit requests and set more timers."""
        heapq.heappush(self._timers, (t_s, self._timer_seq, fn))
        self._timer_seq += 1

    def _fire(self, before_s: float, inclusive: bool) -> None:
        timers = self._timers
        while timers and (timers[0][0] <= before_s if inclusive else timers[0][0] < before_s):
            t_s, _, fn = heapq.heappop(timers)
            fn(t_s)

    def submit(self, at_s: float, spec: RequestSpec, client: int | None = None) -> str:
        """Schedule a request to arrive at ``at_s``; returns its id."""
        request_id = f"req-{self._seq}"
        heapq.heappush(self._arrivals, (at_s, self._seq, request_id, spec, client))
        self._seq += 1
        return request_id

    def _admit_until(self, t_s: float) -> None:
        arrivals, ready = self._arrivals, self._ready
        while arrivals and arrivals[0][0] <= t_s:
            at_s, seq, request_id, spec, client = heapq.heappop(arrivals)
            ready_s = self._api.admit_to(self.engine, at_s, len(spec.prompt_token_ids))
            heapq.heappush(ready, (ready_s, seq, request_id, spec, client, at_s))
        while ready and ready[0][0] <= t_s:
            ready_s, _, request_id, spec, client, at_s = heapq.heappop(ready)
            self.engine.add_request(
                request_id,
                spec.prompt_token_ids,
                spec.max_tokens,
                spec.min_tokens,
                spec.ignore_eos,
                arrival_time_s=at_s,
                queued_time_s=ready_s if ready_s > at_s else None,
            )
            self.requests[request_id] = VirtualRequest(
                request_id, client, len(spec.prompt_token_ids), spec.max_tokens, at_s
            )

    def run(
        self,
        on_finish: Callable[[VirtualRequest, float], None] | None = None,
        until_s: float | None = None,
    ) -> VirtualRun:
        """Step until nothing is left, or until ``until_s`` (requests still in flight then are
        returned unfinished). ``on_finish(request, now_s)`` may submit more requests."""
        engine = self.engine
        while True:
            if until_s is not None and self.now_s >= until_s:
                break
            if self.stop_s is not None and self.now_s >= self.stop_s:
                break
            self._fire(self.now_s, inclusive=True)
            self._admit_until(self.now_s)
            plan = engine.schedule(self.now_s)
            if plan is None:
                nxt = [q[0][0] for q in (self._arrivals, self._ready, self._timers) if q]
                if nxt:
                    self.now_s = max(self.now_s, min(nxt))
                    continue
                if engine.has_work:
                    raise RuntimeError("engine has requests but cannot schedule any of them")
                break
            end_s = self.now_s + plan.duration_s
            if self.record_timeline:
                self.timeline.append(
                    StepSample(
                        start_s=self.now_s,
                        duration_s=plan.duration_s,
                        compute_s=plan.cost.compute_s,
                        memory_s=plan.cost.memory_s,
                        num_running=engine.num_running,
                        num_waiting=engine.num_waiting,
                        waiting_cause=engine.waiting_cause,
                        kv_cache_usage_ratio=engine.kv_cache_usage_ratio,
                        num_prefill_tokens=plan.num_prefill_tokens,
                        num_decode_tokens=plan.num_decode_tokens,
                        num_preemptions=plan.num_preemptions,
                    )
                )
            # Timers inside the step see the state of the steps before it; requests arriving while
            # the step runs join the queue at their own time.
            self._fire(end_s, inclusive=False)
            self._admit_until(end_s)
            outputs = engine.complete(plan, end_s)
            self.now_s = end_s
            self._record(outputs, on_finish)
        # Requests that reached the server but are still in its API server (its queue, its CPU
        # time, frontend_request_s) are in flight too.
        in_frontend = [
            VirtualRequest(rid, client, len(spec.prompt_token_ids), spec.max_tokens, at_s)
            for _, _, rid, spec, client, at_s in self._ready
            if at_s <= self.now_s
        ] + [
            VirtualRequest(rid, client, len(spec.prompt_token_ids), spec.max_tokens, at_s)
            for at_s, _, rid, spec, client in self._arrivals
            if at_s <= self.now_s
        ]
        return VirtualRun([*self.requests.values(), *in_frontend], self.timeline, self.start_s, self.now_s)

    def _record(
        self, outputs: list[RequestOutput], on_finish: Callable[[VirtualRequest, float], None] | None
    ) -> None:
        now_s = self.now_s
        for out in outputs:
            req = self.requests[out.request_id]
            req.token_times_s.append(now_s)
            req.text_chunks.append(out.new_text)
            req.num_output_tokens = out.num_output_tokens
            req.num_cached_tokens = out.num_cached_tokens
            if out.finished:
                req.finish_reason = out.finish_reason
                req.times = out.times
                if on_finish is not None:
                    on_finish(req, now_s)


def run_closed_loop(
    engine: SimEngine,
    num_clients: int,
    requests_per_client: int,
    make_request: Callable[[int, int], RequestSpec],
    *,
    think_time_s: float = 0.0,
    stagger_s: float = 0.0,
    until_s: float | None = None,
    record_timeline: bool = True,
) -> VirtualRun:
    """``num_clients`` clients, each sending ``requests_per_client`` requests one after another
    (the next ``think_time_s`` after the previous finished). ``make_request(client, i)`` builds
    the i-th request of a client; client c starts at ``c * stagger_s``."""
    driver = VirtualDriver(engine, record_timeline=record_timeline)
    sent = [0] * num_clients

    def send(client: int, at_s: float) -> None:
        driver.submit(at_s, make_request(client, sent[client]), client)
        sent[client] += 1

    def on_finish(req: VirtualRequest, now_s: float) -> None:
        client = req.client
        if client is not None and sent[client] < requests_per_client:
            send(client, now_s + think_time_s)

    for client in range(num_clients):
        if requests_per_client > 0:
            send(client, driver.start_s + client * stagger_s)
    return driver.run(on_finish, until_s)


def run_arrivals(
    engine: SimEngine,
    arrivals: Iterable[tuple[float, RequestSpec]],
    *,
    until_s: float | None = None,
    record_timeline: bool = True,
) -> VirtualRun:
    """Open loop: each ``(time_s, spec)`` arrives at its time whatever the engine is doing."""
    driver = VirtualDriver(engine, record_timeline=record_timeline)
    for at_s, spec in arrivals:
        driver.submit(at_s, spec)
    return driver.run(until_s=until_s)

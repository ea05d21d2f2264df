"""Locust users that stream OpenAI-compatible completions and record LLM metrics.

``ChatUser`` posts to ``/v1/chat/completions``, ``CompletionsUser`` to ``/v1/completions``.
Subclass either and override :meth:`LLMUser.next_request` for another workload; call
:meth:`LLMUser.send` to make one measured request from your own task.
"""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches sockets before anything below is imported)
from locust import User, constant, task
from locust.exception import StopUser
from locust.user.task import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING, LOCUST_STATE_WAITING

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import gevent
from gevent import GreenletExit

from tokenload.client.http_stream import StreamTarget, Timeouts, served_model
from tokenload.client.openai_stream import StreamState, build_request_body
from tokenload.loadgen import hooks, plugin, workload
from tokenload.loadgen.pacing import OPEN_LOOP_OPTION, Slot
from tokenload.loadgen.trace_replay import replays_trace
from tokenload.metrics.definitions import Timing, compute_timing
from tokenload.metrics.failures import RequestFailure
from tokenload.metrics.records import make_record
from tokenload.metrics.step_tally import tokens_by_step
from tokenload.workload.errors import PromptCountError, WorkloadError
from tokenload.workload.plan import PlannedRequest
from tokenload.workload.seeds import stream_for

if TYPE_CHECKING:
    from tokenload.workload.trace_prompts import TracePrompts

__all__ = ["ChatUser", "CompletionsUser", "ConversationUser", "LLMUser"]

log = logging.getLogger("tokenload")

hooks.install()


#: A closed-loop user whose request could not reach the target (no connection; or its prompt
#: could not be counted because the server's /tokenize did not answer), or that the server
#: turned away at once (HTTP 429, or 503: overloaded or still loading its model), waits before its
#: next request: UNREACHABLE_BACKOFF_S, doubling at each such failure up to
#: UNREACHABLE_BACKOFF_MAX_S, none once another answer comes. A target that is down or not ready
#: must not turn the client into a busy loop: measured 2026-12-05, two users against a closed
#: port sent ~2,100 failing requests a second with the client's CPU at 100 %, and one user
#: against a server still loading (503) ~2,400. Other failures (a 500 among answers) keep the
#: loop's pace; open-loop arrivals keep their schedule.
UNREACHABLE_FAILURES = frozenset({"connect_error", "prompt_count"})
TURNED_AWAY_STATUSES = frozenset({429, 503})
UNREACHABLE_BACKOFF_S = 0.05
UNREACHABLE_BACKOFF_MAX_S = 1.0


class LLMUser(User):
    """One user = one stream at a time, on its own keep-alive connection."""

    abstract = True
    wait_time = constant(0)
    #: True for the chat API, False for the completions API.
    chat: ClassVar[bool] = True
    #: Make the next request's body ahead, so that counting its prompt (a /tokenize round trip
    #: on a busy server) is never on a request's path: in open loop before taking its arrival
    #: (never inside its send lag, TTFT or E2E), in closed loop while the request before it
    #: streams (the user is never idle between requests: as many requests in flight as users).
    #: False for users whose generate() makes its own requests (conversations).
    prepares_ahead: ClassVar[bool] = True
    path: ClassVar[str] = "/v1/chat/completions"

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.ctx = plugin.context_of(environment)
        self.cfg = cfg = self.ctx.config
        if not self.host:
            raise ValueError("host: expected the target's base URL (--host http://127.0.0.1:8000)")
        self.target = StreamTarget(
            self.host,
            api_key=cfg.api_key,
            timeouts=Timeouts(ttft_s=cfg.ttft_timeout_s, stall_s=cfg.stall_timeout_s),
        )
        self._requested_input_tokens: int | None = None
        #: (max_tokens, ignore_eos) of the request being made, for its record.
        self._requested_output: tuple[int | None, bool | None] = (None, None)
        self._slot: Slot | None = None
        #: The next request, made ahead (see prepares_ahead): its body with the lengths it asked
        #: for, or why it could not be made; and the greenlet making it in closed loop.
        self._prepared: _Prepared | WorkloadError | None = None
        self._prepared_for: str | None = None
        self._ahead: gevent.Greenlet | None = None
        #: The wait before the next request after the target could not be reached (closed loop).
        self._backoff_s = 0.0
        #: The pause taken before the request now being made (ms; None: none), on its record.
        self._paused_ms: float | None = None
        self._last_failure: str | None = None
        self._last_status: int | None = None

    def on_stop(self) -> None:
        if self._ahead is not None:
            self._ahead.kill(block=False)
        self.target.close()

    def model(self) -> str | None:
        """The configured model, else the first one the target lists (looked up once)."""
        if self.ctx.model is None and self.cfg.model:
            self.ctx.model = self.cfg.model
        if self.ctx.model is None:
            model, why = served_model(self.target)
            if model is None:
                self._warn_once(f"tokenload: model discovery failed ({why}); pass --model")
            self.ctx.model = model
        return self.ctx.model

    def _warn_once(self, text: str) -> None:
        if text not in self.ctx.cache.warned:
            self.ctx.cache.warned.add(text)
            log.warning("%s", text)

    def next_request(self, model: str) -> bytes:
        """The body of the next request, from the run's workload (``--prompt-tokens`` and
        ``--output-tokens`` in the target's own tokens, or a ``--workload`` file)."""
        planner = workload.planner_for(
            self.ctx,
            self.chat,
            self.host,
            self.cfg.api_key,
            model,
            self.ctx.plan.overrides.get("prompt_tokens"),
        )
        return self._body(planner.next(), model)

    def _body(self, req: PlannedRequest, model: str) -> bytes:
        """A planned request's body; notes what it asked for (for its record)."""
        self._requested_input_tokens = req.input_tokens if req.exact else None
        self._requested_output = (req.max_tokens, not self.cfg.natural_stop)
        prompt, messages = req.prompt, None
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            prompt, messages = None, req.prompt
        return build_request_body(
            chat=self.chat,
            model=model,
            prompt=prompt,
            messages=messages,
            max_tokens=req.max_tokens,
            ignore_eos=not self.cfg.natural_stop,
            temperature=0.0,
        )

    @task
    def _iteration(self) -> None:
        # The one Locust task. Locust adds a base class's tasks to a subclass's, so subclasses
        # change what an iteration does by overriding generate(), never with more @task methods.
        # In an open-loop (rate) step, wait for this user's next arrival first; like Locust's own
        # wait_time sleep, that wait is interruptible: stopping users do not wait for arrivals.
        gate = self.ctx.gate
        if gate.closed:  # --drain, between steps: no request until the next step starts
            self._state = LOCUST_STATE_WAITING
            gate.wait()  # and, released, a random part of the gate's spread (gate.py)
            if self._state == LOCUST_STATE_STOPPING:
                raise StopUser()
            self._state = LOCUST_STATE_RUNNING
        pacer = self.ctx.pacer
        if not pacer.open_loop and getattr(self.environment.parsed_options, OPEN_LOOP_OPTION, False):
            pacer.open_loop = True  # a rate shape runs: no request before its first arrival
        if pacer.open_loop:
            replay = self.prepares_ahead and replays_trace(self.ctx)
            # Waiting from here: making a prompt measures nothing, so a stop need not wait for
            # it (512 users each waiting on a slow /tokenize held a run's end for ~2 minutes).
            self._state = LOCUST_STATE_WAITING
            if self.prepares_ahead and not replay:
                self._prepare()
            elif replay:
                self._trace_prompts()  # built (the target's /tokenize probed) before any arrival
            self._slot = self.ctx.pacer.acquire(self._prepare_row if replay else None)
            if self._state == LOCUST_STATE_STOPPING:
                raise StopUser()
            self._state = LOCUST_STATE_RUNNING
        else:
            self._paused_ms = self._backoff_s * 1000.0 if self._backoff_s else None
            if self._backoff_s:  # the target could not be reached or turned us away: not a busy loop
                # Running, not waiting, through the pause (at most 1 s): a graceful stop marks it
                # stopping and it ends here. Locust kills a waiting user from a loop callback;
                # one whose pause ended first started a request and was killed in it, a
                # 'cancelled' record Locust does not count (a flaky count test showed it).
                gevent.sleep(self._backoff_s)
                if self._state == LOCUST_STATE_STOPPING:
                    raise StopUser()
            if self._ahead is not None:
                self._ahead.join()  # made while the previous request streamed: usually done
        self._ahead = None
        self._last_failure = None
        if self._prepared is not None and self._prepared_for != self._prompt_override():
            self._prepared = None  # a context sweep's next step asks for another length
        self._last_status = None
        self.generate()
        if self._last_failure in UNREACHABLE_FAILURES or self._last_status in TURNED_AWAY_STATUSES:
            self._backoff_s = min(UNREACHABLE_BACKOFF_MAX_S, max(UNREACHABLE_BACKOFF_S, 2 * self._backoff_s))
        else:
            self._backoff_s = 0.0

    def _prompt_override(self) -> str | None:
        return self.ctx.plan.overrides.get("prompt_tokens")

    def _prepare(self) -> None:
        """Make the next request now (its prompt counted, if lengths are exact). A count that
        failed is kept and reported as that request's failure when it is due; a workload that
        cannot make requests at all, when the user next runs."""
        model = self.model() or "unknown"
        self._prepared_for = self._prompt_override()
        try:
            body = self.next_request(model)
        except WorkloadError as exc:  # PromptCountError included
            self._prepared = exc
        else:
            self._prepared = _Prepared(body, self._requested_input_tokens, self._requested_output)

    def _trace_prompts(self) -> TracePrompts:
        from tokenload.loadgen.trace_replay import prompts_for

        return prompts_for(self.ctx, self.chat, self.host, self.cfg.api_key, self.model() or "unknown")

    def _prepare_row(self, index: int) -> None:
        """Make the request of the trace's row ``index`` (called once this user took that row's
        arrival, before its time)."""
        from tokenload.loadgen.trace_replay import trace_of

        model = self.model() or "unknown"
        self._prepared_for = self._prompt_override()
        try:
            row = trace_of(self.ctx).rows[index]
            body = self._body(self._trace_prompts().request(row, index), model)
        except WorkloadError as exc:  # PromptCountError included
            self._prepared = exc
        else:
            self._prepared = _Prepared(body, self._requested_input_tokens, self._requested_output)

    def generate(self) -> None:
        """One iteration: one request from the workload, made ahead (see prepares_ahead)."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            model = self.model() or "unknown"
            try:
                prepared = _Prepared(
                    self.next_request(model), self._requested_input_tokens, self._requested_output
                )
            except PromptCountError as exc:
                prepared = exc
            except WorkloadError as exc:
                self._workload_failed(exc)
        if isinstance(prepared, PromptCountError):
            self.unsent_failure("prompt_count", str(prepared))
            return
        if isinstance(prepared, WorkloadError):
            self._workload_failed(prepared)
        self._requested_input_tokens, self._requested_output = prepared.input_tokens, prepared.output
        if self.prepares_ahead and not self.ctx.pacer.open_loop:
            # The next one is made while this one streams (send reads what this one asked for
            # before it yields).
            self._ahead = gevent.spawn(self._prepare)
        self.send(prepared.body)

    def _take_slot(self) -> tuple[int | None, str | None, Slot | None]:
        """The step and phase a request belongs to, and its arrival: the step (and phase) it
        started in; an open-loop arrival's, the step whose schedule it came from."""
        step, phase = self.ctx.steps.step, self.ctx.steps.phase
        slot, self._slot = self._slot, None
        if slot is not None and slot.step != step:
            step, phase = slot.step, None
        return step, phase, slot

    def unsent_failure(self, failure_class: str, detail: str, name: str | None = None) -> dict[str, Any]:
        """Count a request that failed before anything was sent (its prompt could not be made):
        a failed record and a Locust failure under ``failure_class``; the run goes on."""
        name = name or self.path
        self._last_failure = failure_class
        step, phase, slot = self._take_slot()
        ctx = self.ctx
        record = make_record(
            request_id=ctx.next_request_id(),
            worker=ctx.worker_name,
            name=name,
            wall_start=time.time(),
            start_monotonic_s=time.perf_counter(),
            response_id=None,
            step=step,
            phase=phase,
            send_queued=slot.queued if slot is not None else None,
            backoff_ms=self._paused_ms,
            timing=Timing(None, None, None, []),
            failure_class=failure_class,
            http_status=None,
            input_tokens=None,
            usage_output_tokens=None,
            chunk_tokens=0,
            content_chunks=0,
            finish_reason=None,
            detail=detail,
        )
        self.environment.events.request.fire(
            request_type="POST",
            name=name,
            response_time=0.0,
            response_length=0,
            exception=RequestFailure(failure_class, detail),
            context={"tokenload": (record, [], self.environment)},
            response=None,
            url=self.path,
        )
        return record

    def _workload_failed(self, exc: WorkloadError) -> NoReturn:
        # A workload that cannot produce requests (a bad dataset, lengths the model cannot
        # take) ends the run with one line and a non-zero exit code; it is not a server failure.
        log.error("tokenload: %s", exc)
        self.environment.process_exit_code = 2
        gevent.spawn(self.environment.runner.quit)  # not from this greenlet: quit stops users
        raise StopUser() from None

    def send(self, body: bytes, name: str | None = None, state: StreamState | None = None) -> dict[str, Any]:
        """Make one streamed request, fire its Locust event, return its record. Pass a ``state``
        made with ``collect_text=True`` to keep the generated text (``state.text_parts``)."""
        name = name or self.path
        state = state if state is not None else StreamState(chat=self.chat)
        # What this request asked for, read before anything yields (the next request may be
        # made meanwhile, see prepares_ahead).
        requested_input, requested_output = self._requested_input_tokens, self._requested_output
        # A request belongs to the step (and phase) it started in; an open-loop arrival to the
        # step whose schedule it came from. Only an iteration's first request is scheduled.
        step, phase, slot = self._take_slot()
        counted = step if phase == "measure" and step is not None else None
        self.ctx.fleet.started(counted, state)
        try:
            out = self.target.stream(self.path, body, state)
        except GreenletExit:
            # Locust is stopping this user mid-request (no --stop-timeout): keep what was
            # measured as a "cancelled" record, outside Locust's request counts.
            self.ctx.record_cancelled(name, state)
            raise
        finally:
            # No yield from here until the record is queued (below): a worker report never
            # shows the request ended without its record.
            self.ctx.fleet.ended(counted, state)
        intended = slot.intended if slot is not None else None
        timing = compute_timing(
            out.t_start, state.content_times, state.content_tokens, out.t_end, state.output_tokens, intended
        )
        # wall_start is when the user's wait began: the intended time in open loop.
        wall_start = out.wall_start - (timing.send_lag_ms or 0.0) / 1000.0
        ctx = self.ctx
        record = make_record(
            request_id=ctx.next_request_id(),
            worker=ctx.worker_name,
            name=name,
            wall_start=wall_start,
            start_monotonic_s=out.t_start,
            response_id=state.response_id,
            step=step,
            phase=phase,
            requested_input_tokens=requested_input,
            requested_output_tokens=requested_output[0],
            ignore_eos=requested_output[1],
            send_queued=slot.queued if slot is not None else None,
            backoff_ms=self._paused_ms,
            timing=timing,
            failure_class=out.failure_class,
            http_status=out.http_status,
            input_tokens=state.prompt_tokens,
            usage_output_tokens=state.usage_completion_tokens,
            chunk_tokens=state.chunk_tokens,
            content_chunks=len(state.content_times),
            first_read_events=out.first_read_events,
            first_read_coalesced=out.first_read_coalesced,
            finish_reason=state.finish_reason,
            detail=out.detail,
        )
        # Its tokens by arrival in each step's measured part (the step rates count these).
        record["measured_tokens_by_step"] = tokens_by_step(
            state.content_times,
            state.content_tokens,
            ctx.steps.measured_spans,
            record["output_tokens"],
            state.chunk_tokens,
        )
        self._last_failure, self._last_status = out.failure_class, out.http_status
        exception = RequestFailure(out.failure_class, out.detail) if out.failure_class else None
        self.environment.events.request.fire(
            request_type="POST",
            name=name,
            response_time=timing.e2e_ms or 0.0,
            response_length=record["output_tokens"],
            exception=exception,
            context={"tokenload": (record, timing.itl_ms, self.environment)},
            response=None,
            url=self.path,
        )
        return record


class _Prepared:
    """A request made ahead: its body and the lengths it asked for (for its record)."""

    __slots__ = ("body", "input_tokens", "output")

    def __init__(self, body: bytes, input_tokens: int | None, output: tuple[int | None, bool | None]) -> None:
        self.body, self.input_tokens, self.output = body, input_tokens, output


class ChatUser(LLMUser):
    abstract = True
    chat = True
    path = "/v1/chat/completions"


class CompletionsUser(LLMUser):
    abstract = True
    chat = False
    path = "/v1/completions"


class ConversationUser(ChatUser):
    """Holds multi-turn conversations (``kind: conversation`` in a ``--workload`` file): each turn
    sends the whole history, the reply is appended, then the user thinks. Requests are named
    ``turn N`` so the LLM table shows TTFT by turn: what growing context and prefix reuse do."""

    abstract = True
    prepares_ahead = False  # generate() sends every turn of a conversation itself
    _conversations = 0

    def generate(self) -> None:
        """One iteration: one whole conversation."""
        model = self.model() or "unknown"
        try:
            planner = workload.planner_for(self.ctx, True, self.host, self.cfg.api_key, model)
            ConversationUser._conversations += 1
            n = ConversationUser._conversations
            conv = planner.new_conversation(f"{self.ctx.worker_name}-{n}")
            think_rng = stream_for(n, planner.spec.seed, "think")
        except WorkloadError as exc:
            self._workload_failed(exc)
        while not conv.done:
            turn = conv.next_turn()
            max_tokens = planner.output_tokens()
            self._requested_output = (max_tokens, not self.cfg.natural_stop)
            body = build_request_body(
                chat=True,
                model=model,
                messages=turn.messages,
                max_tokens=max_tokens,
                ignore_eos=not self.cfg.natural_stop,
                temperature=0.0,
            )
            state = StreamState(chat=True, collect_text=True)
            record = self.send(body, name=f"turn {turn.number}", state=state)
            if record["status"] != "ok":
                conv.end()
                break
            conv.record_reply("".join(state.text_parts or ()))
            if not conv.done:
                gevent.sleep(conv.think_time_s(think_rng))

"""The emulator's HTTP surface, shaped like vLLM's OpenAI-compatible server.

Routes: ``POST /v1/completions`` and ``/v1/chat/completions`` (streaming or not),
``GET /v1/models``, ``/health``, ``/version``, ``/metrics``, ``POST /tokenize`` and
``/detokenize``, plus ``GET /sim/stats`` (the emulator's own figures: token lateness, steps).
Error bodies follow vLLM's ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import IO, Any

import gevent
from gevent.event import Event

from tokenload.serving.http import ClientGone, Connection, HTTPServer, Request
from tokenload.sim.engine import SimEngine
from tokenload.sim.faults import FaultPlan
from tokenload.sim.loop import EngineLoop, Write

__all__ = ["VLLM_API_VERSION", "SimAPI"]

#: The vLLM release whose API and metric names the emulator follows.
VLLM_API_VERSION = "0.32.0"


class APIError(Exception):
    def __init__(
        self, status: int, message: str, type_: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}
        }


class SimAPI:
    def __init__(
        self,
        engine: SimEngine,
        metrics: Any,
        faults: FaultPlan,
        trace: IO[str] | None = None,
        startup_delay_s: float = 0.0,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.loop = EngineLoop(engine)
        self.faults = faults
        self.trace = trace
        self.model = engine.model_name
        self._ready_at = time.monotonic() + startup_delay_s
        self._created = int(time.time())
        self._ids = itertools.count()
        self.requests_seen = 0
        #: How text is counted and what token ids mean (the engine's: it generates from it).
        self.vocabulary = engine.vocabulary

    def register(self, http: HTTPServer) -> None:
        for method, path, fn in (
            ("GET", "/v1/models", self.models),
            ("GET", "/health", self.health),
            ("GET", "/version", self.version),
            ("GET", "/metrics", self.prometheus),
            ("POST", "/tokenize", self.tokenize),
            ("POST", "/detokenize", self.detokenize),
            ("POST", "/v1/completions", self.completions),
            ("POST", "/v1/chat/completions", self.chat_completions),
            ("GET", "/sim/stats", self.sim_stats),
        ):
            http.route(method, path)(_guard(fn))
        self.loop.start()

    # -- plain endpoints -------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return time.monotonic() >= self._ready_at

    def health(self, req: Request, conn: Connection) -> None:
        conn.respond(200 if self.ready else 503, b"")

    def version(self, req: Request, conn: Connection) -> None:
        conn.respond_json(200, {"version": f"{VLLM_API_VERSION}+tokenload.sim"})

    def models(self, req: Request, conn: Connection) -> None:
        card = {
            "id": self.model,
            "object": "model",
            "created": self._created,
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
            # Which tokenizer counts text (tokenload's extension): the emulator's byte tokenizer
            # (one token per UTF-8 byte, about 4x a real one on English; token-id prompts may
            # use the model's whole vocabulary) or the tokenizer.json of --tokenizer.
            "tokenizer": self.vocabulary.card(),
        }
        conn.respond_json(200, {"object": "list", "data": [card]})

    def prometheus(self, req: Request, conn: Connection) -> None:
        conn.respond(200, self.metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")

    def sim_stats(self, req: Request, conn: Connection) -> None:
        """The emulator's own figures; ``?reset=1`` starts a new lateness window after reading."""
        h = self.loop.lateness_ms
        lateness = {
            "count": h.count,
            "p50": h.quantile(0.5),
            "p99": h.quantile(0.99),
            "max": h.max if h.count else None,
        }
        body = {
            "requests_seen": self.requests_seen,
            "steps": self.loop.steps,
            "model_s": self.loop.model_s,
            "clock_restarts": self.loop.clock_restarts,
            "running": self.engine.num_running,
            "waiting": self.engine.num_waiting,
            "kv_cache_usage_ratio": self.engine.kv_cache_usage_ratio,
            "token_lateness_ms": lateness,
        }
        if "reset=1" in req.query:
            h.clear()
        conn.respond_json(200, body)

    def tokenize(self, req: Request, conn: Connection) -> None:
        cfg = self.faults.cfg
        if cfg.tokenize_delay_s > 0:
            gevent.sleep(cfg.tokenize_delay_s)
        if self.faults.draw_tokenize_error():
            raise APIError(503, "injected fault: tokenizer busy", type_="ServiceUnavailable")
        body = _json_body(req)
        ids = self._prompt_ids(body, chat="messages" in body)
        conn.respond_json(
            200,
            {
                "count": len(ids),
                "max_model_len": self.engine.max_model_len,
                "tokens": ids,
                "token_strs": None,
            },
        )

    def detokenize(self, req: Request, conn: Connection) -> None:
        body = _json_body(req)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise APIError(400, "tokens: expected a list of token ids", param="tokens")
        try:
            text = self.vocabulary.decode(ids)
        except ValueError as exc:
            raise APIError(400, str(exc), param="tokens") from None
        conn.respond_json(200, {"prompt": text})

    # -- generation ------------------------------------------------------------------------
    def completions(self, req: Request, conn: Connection) -> None:
        self._generate(req, conn, chat=False)

    def chat_completions(self, req: Request, conn: Connection) -> None:
        self._generate(req, conn, chat=True)

    def _prompt_ids(self, body: dict[str, Any], chat: bool) -> list[int]:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise APIError(400, "messages: expected a non-empty list of messages", param="messages")
            try:
                return self.vocabulary.chat_ids(messages)
            except (TypeError, KeyError, AttributeError, ValueError):
                raise APIError(
                    400, "messages: each message needs a role and a string content", param="messages"
                ) from None
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return self.vocabulary.encode(prompt, bool(body.get("add_special_tokens", True)))
        if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
            # Token ids of the vocabulary (vllm bench serve's random dataset can send them):
            # each is one token.
            vocab = self.vocabulary.vocab_size
            if any(not 0 <= i < vocab for i in prompt):
                raise APIError(400, f"prompt: token ids must be in [0, {vocab})", param="prompt")
            return list(prompt)
        raise APIError(400, "prompt: expected a string or a list of token ids", param="prompt")

    def _prompts(self, body: dict[str, Any], chat: bool) -> list[list[int]]:
        """vLLM accepts one prompt or a batch: a list of strings or a list of token-id lists."""
        p = body.get("prompt")
        if not chat and isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p):
            return [self._prompt_ids({**body, "prompt": x}, chat=False) for x in p]
        return [self._prompt_ids(body, chat)]

    def _generate(self, req: Request, conn: Connection, chat: bool) -> None:
        self.requests_seen += 1
        if not self.ready:
            raise APIError(503, "the model is still loading", type_="ServiceUnavailableError")
        body = _json_body(req)
        model = body.get("model") or self.model
        if model != self.model:
            raise APIError(404, f"The model `{model}` does not exist.", type_="NotFoundError", param="model")
        stream = bool(body.get("stream", False))
        opts = body.get("stream_options")
        if opts is not None and not stream:
            raise APIError(
                400, "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
        if (body.get("n") or 1) != 1:
            raise APIError(400, "n: the emulator generates one choice per prompt (n=1)", param="n")
        max_len = self.engine.max_model_len
        prompts = self._prompts(body, chat)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise APIError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
        min_tokens = int(body.get("min_tokens") or 0)
        for ids in prompts:
            n = len(ids)
            if n >= max_len:
                raise APIError(
                    400,
                    f"This model's maximum context length is {max_len} tokens. However, your request has "
                    f"{n} input tokens. Please reduce the length of the input messages.",
                    param="input_tokens",
                )
            if max_tokens is not None and n + max_tokens > max_len:
                raise APIError(
                    400,
                    f"This model's maximum context length is {max_len} tokens. However, you requested "
                    f"{max_tokens} output tokens and your prompt contains {n} input tokens, for a total of "
                    f"{n + max_tokens} tokens. Please reduce the length of the input prompt or the number "
                    "of requested output tokens.",
                    param="input_tokens",
                )
            if not self.engine.scheduler.fits_ever(n):
                raise APIError(
                    400,
                    f"the prompt of {n} tokens can never fit this server's KV cache",
                    param="input_tokens",
                )
        fault = self.faults.draw()
        if fault == "http_500":
            raise APIError(500, "injected fault: internal server error", type_="InternalServerError")
        if fault == "http_429":
            conn.respond_json(
                429,
                APIError(429, "injected fault: too many requests", type_="TooManyRequests").body(),
                headers={"retry-after": str(self.faults.cfg.retry_after_s)},
            )
            return
        frontend_s = self.engine.profile.frontend_request_s
        queued_s = None
        if frontend_s > 0:
            gevent.sleep(frontend_s)  # the API server's own time on the request (the profile's)
            queued_s = time.perf_counter()
        rid_base = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        sub_ids = [rid_base if len(prompts) == 1 else f"{rid_base}-{i}" for i in range(len(prompts))]
        sink_cls = _StreamSink if stream else _CollectSink
        sink = sink_cls(self, conn, rid_base, chat, sub_ids, [len(p) for p in prompts], opts or {}, fault)
        sink.begin()
        try:
            for sub, ids in zip(sub_ids, prompts, strict=True):
                self.loop.submit(
                    sub,
                    sink,
                    arrival_s=req.arrival_s,
                    prompt_token_ids=ids,
                    max_tokens=max_tokens if max_tokens is not None else max_len - len(ids),
                    min_tokens=min_tokens,
                    ignore_eos=bool(body.get("ignore_eos", False)),
                    queued_time_s=queued_s,
                )
            sink.run()
        finally:
            for sub in sub_ids:
                self.loop.abort(sub)


#: JSON string literals of every one-character text: most streamed tokens are one of these.
_JSON_TEXT = {chr(c): json.dumps(chr(c)) for c in range(128)} | {"": '""'}
_JSON_TEXT_BYTES = {text: literal.encode() for text, literal in _JSON_TEXT.items()}


class _Sink:
    """One HTTP generation request and its sub-requests (one per prompt of a batch)."""

    def __init__(
        self,
        api: SimAPI,
        conn: Connection,
        rid: str,
        chat: bool,
        sub_ids: list[str],
        prompt_lens: list[int],
        opts: dict,
        fault: str | None,
    ) -> None:
        self.api, self.conn, self.rid, self.chat = api, conn, rid, chat
        self.sub_ids = sub_ids
        self.index = {sub: i for i, sub in enumerate(sub_ids)}
        self.prompt_lens = prompt_lens
        self.include_usage = bool(opts.get("include_usage"))
        self.continuous = bool(opts.get("continuous_usage_stats"))
        self.fault = fault
        self.created = int(time.time())
        self.sent = [0] * len(sub_ids)
        self.first_sent: list[float | None] = [None] * len(sub_ids)
        self.last_sent: list[float | None] = [None] * len(sub_ids)
        self.pending = len(sub_ids)
        self.object = "chat.completion.chunk" if chat else "text_completion"
        self.wake = Event()

    def begin(self) -> None:
        pass

    def run(self) -> None:
        raise NotImplementedError

    def _trace(self, i: int, out: Any, fault: str | None = None) -> None:
        trace = self.api.trace
        if trace is None:
            return
        times = out.times or self.api.engine.request_times(self.sub_ids[i])
        rec = {
            "request_id": self.sub_ids[i],
            "arrival_s": times.arrival_s if times else None,
            "first_scheduled_s": times.first_scheduled_s if times else None,
            "first_token_s": times.first_token_s if times else None,
            "last_token_s": times.last_token_s if times else None,
            "first_token_sent_s": self.first_sent[i],
            "last_token_sent_s": self.last_sent[i],
            "tokens_sent": self.sent[i],
            "prompt_tokens": self.prompt_lens[i],
            "preemptions": times.num_preemptions if times else None,
            "finish_reason": out.finish_reason if out.finished else None,
            "fault": fault,
        }
        trace.write(json.dumps(rec) + "\n")


class _StreamSink(_Sink):
    """Streams chunks from inside the engine loop: each token's chunk is written the moment its
    step ends, without waking a greenlet per stream. What the socket cannot take at once (a slow
    reader, a stall fault) goes to a backlog that this request's own greenlet drains."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        model = json.dumps(self.api.model)
        self.head = (
            f'data: {{"id":"{self.rid}","object":"{self.object}","created":{self.created},'
            f'"model":{model},"choices":['
        )
        if self.chat:
            self.choice_fmt = '{"index":%d,"delta":{"content":%s},"logprobs":null,"finish_reason":%s}]'
        else:
            self.choice_fmt = '{"index":%d,"text":%s,"logprobs":null,"finish_reason":%s,"stop_reason":null}]'
        self.backlog = bytearray()
        self.backlog_dues: list[float] = []
        self.writing = False
        self.closed = False
        self.stalled_until = 0.0
        self.closing_abort = False  # a malformed-chunk fault: close the socket once it is out
        self.ended_cleanly = False
        self.fault_at = self.api.faults.cfg.fault_after_tokens
        # One prompt: at most one write per step, which the engine loop may make itself.
        self.single = len(self.sub_ids) == 1
        self.send: Any = None
        # A mid-stream chunk of a one-prompt stream without continuous usage, framed, is
        # ``plain_pre + <JSON text> + plain_post``: built with one bytes format per token.
        pre, post = (self.choice_fmt % (0, "\0", "null") + "}\n\n").split("\0")
        self.plain = self.single and not self.continuous
        self.plain_pre = (self.head + pre).encode()
        self.plain_post = post.encode() + b"\r\n"
        self.plain_len = len(self.plain_pre) + len(post)

    def begin(self) -> None:
        conn = self.conn
        conn.start_stream()
        if self.chat:
            for i in range(len(self.sub_ids)):
                role = (
                    '{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
                    % i
                )
                conn.chunk((self.head + role).encode())
        conn.set_blocking(False)
        self.send = conn.sender()

    def _chunk(self, i: int, text: str, finish: str | None) -> bytes:
        encoded = _JSON_TEXT.get(text)
        if encoded is None:
            encoded = json.dumps(text)
        body = self.choice_fmt % (i, encoded, "null" if finish is None else '"%s"' % finish)
        if self.continuous:
            p, c = self.prompt_lens[i], self.sent[i]
            body += ',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (p, p + c, c)
        return (self.head + body + "}\n\n").encode()

    def _tail(self) -> bytes:
        parts = b""
        if self.include_usage:
            p, c = sum(self.prompt_lens), sum(self.sent)
            usage = {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}
            obj = {
                "id": self.rid,
                "object": self.object,
                "created": self.created,
                "model": self.api.model,
                "choices": [],
                "usage": usage,
            }
            parts += Connection.frame(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
        return parts + Connection.frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    # -- in the engine loop's greenlet: never blocks --------------------------------------------
    def prepare(self, out: Any) -> Write | None:
        if self.closed:
            return None
        i = self.index[out.request_id]
        k = self.sent[i] = out.num_output_tokens
        if (
            self.single
            and not out.finished
            and not (self.backlog or self.writing or self.stalled_until)
            and not (self.fault and k >= self.fault_at)
        ):
            # The common token: nothing to do but write it, which the loop does in its tight
            # loop. Nothing that could change this (a backlog, a stall, a fault) happens
            # outside the loop's own writes, and this is the request's only one this step.
            if self.plain:
                text = _JSON_TEXT_BYTES.get(out.new_text)
                if text is None:
                    text = json.dumps(out.new_text).encode()
                framed = b"%x\r\n%b%b%b" % (self.plain_len + len(text), self.plain_pre, text, self.plain_post)
            else:
                framed = Connection.frame(self._chunk(i, out.new_text, None))
            return (self.send, framed, self)
        framed = Connection.frame(self._chunk(i, out.new_text, out.finish_reason if out.finished else None))
        return (None, (i, out, framed), self)

    def written(self, sent_s: float) -> None:
        if self.first_sent[0] is None:
            self.first_sent[0] = sent_s
        self.last_sent[0] = sent_s

    def short_write(self, data: bytes, result: int | OSError, sent_s: float, due_s: float) -> None:
        if isinstance(result, BlockingIOError):
            result = 0
        if isinstance(result, OSError):
            self.conn.mark_gone()
            self.closed = True
            self.wake.set()
        else:
            self._queue_rest(data, result, sent_s, due_s)
        self.written(sent_s)

    def deliver(self, item: tuple[int, Any, bytes], due: float) -> None:
        if self.closed:
            return
        i, out, framed = item
        if self.fault and self.sent[i] >= self.fault_at:
            self._inject(out)
            if self.closed:
                return
        t = self._write(framed, due)
        if self.first_sent[i] is None:
            self.first_sent[i] = t
        self.last_sent[i] = t
        if out.finished:
            self._trace(i, out)
            self.pending -= 1
            if self.pending == 0:
                self._write(self._tail(), None)
                self.closed = True
                self.wake.set()

    def _write(self, framed: bytes, due: float | None) -> float:
        t = time.perf_counter()
        if self.backlog or self.writing or self.stalled_until:
            self.backlog += framed
            if due is not None:
                self.backlog_dues.append(due)
            self.wake.set()
            return t
        try:
            n = self.conn.try_send(framed)
        except ClientGone:
            self.closed = True
            self.wake.set()
            return t
        self._queue_rest(framed, n, t, due)
        return t

    def _queue_rest(self, framed: bytes, n: int, t: float, due: float | None) -> None:
        """``n`` bytes of ``framed`` went out at ``t``: the rest waits for this request's greenlet."""
        if due is not None and n:
            self.api.loop.note_sent(due, t)
        if n < len(framed):
            self.backlog += framed[n:]
            if due is not None and not n:
                self.backlog_dues.append(due)
            self.wake.set()

    def _inject(self, out: Any) -> None:
        fault, conn = self.fault, self.conn
        self.fault = None
        if fault == "disconnect":
            conn.abort()
            self.closed = True
        elif fault == "malformed":
            self._write(
                Connection.frame(b'data: {"id": "' + self.rid.encode() + b'", "choices": [{"text": \n\n'),
                None,
            )
            self.closing_abort = True
            self.closed = True
        elif fault == "error_event":
            err = APIError(
                500, "injected fault: error in the middle of the stream", type_="InternalServerError"
            )
            self._write(Connection.frame(b"data: " + json.dumps(err.body()).encode() + b"\n\n"), None)
            self._write(Connection.frame(b"data: [DONE]\n\n") + b"0\r\n\r\n", None)
            self.closed = True
            self.ended_cleanly = True  # a complete response: the connection stays usable
        elif fault == "stall":
            self.stalled_until = time.perf_counter() + self.api.faults.cfg.stall_s
        if self.closed:
            self._trace(self.index[out.request_id], out, "fault:" + str(fault))
        self.wake.set()

    # -- in the request's own greenlet -----------------------------------------------------------
    def run(self) -> None:
        conn = self.conn
        try:
            while True:
                self.wake.wait()
                self.wake.clear()
                if self.stalled_until:
                    gevent.sleep(max(0.0, self.stalled_until - time.perf_counter()))
                    self.stalled_until = 0.0
                if self.backlog:
                    self.writing = True
                    data, dues = bytes(self.backlog), self.backlog_dues
                    self.backlog.clear()
                    self.backlog_dues = []
                    conn.set_blocking(True)
                    t = time.perf_counter()
                    conn.raw(data)
                    conn.set_blocking(False)
                    for due in dues:
                        self.api.loop.note_sent(due, t)
                    self.writing = False
                    continue
                if self.closed:
                    break
        finally:
            conn.set_blocking(True)
        if self.closing_abort:
            gevent.sleep(0.05)
            conn.abort()
        elif self.pending and self.closed and not self.ended_cleanly:
            raise ClientGone("stream ended early")


class _CollectSink(_Sink):
    """A non-streaming request: gather the text, answer once everything is done."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.texts: list[list[str]] = [[] for _ in self.sub_ids]
        self.finish: list[str | None] = [None] * len(self.sub_ids)

    def prepare(self, out: Any) -> Write:
        return (None, out, self)

    def deliver(self, out: Any, due: float) -> None:
        i = self.index[out.request_id]
        self.sent[i] = out.num_output_tokens
        self.texts[i].append(out.new_text)
        if out.finished:
            self.finish[i] = out.finish_reason
            self._trace(i, out)
            self.pending -= 1
            if self.pending == 0:
                self.wake.set()

    def run(self) -> None:
        self.wake.wait()
        p, c = sum(self.prompt_lens), sum(self.sent)
        choices = []
        for i, parts in enumerate(self.texts):
            text = "".join(parts)
            if self.chat:
                msg = {"role": "assistant", "content": text}
                choices.append(
                    {"index": i, "message": msg, "logprobs": None, "finish_reason": self.finish[i]}
                )
            else:
                choices.append(
                    {
                        "index": i,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": self.finish[i],
                        "stop_reason": None,
                    }
                )
        obj = {
            "id": self.rid,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.api.model,
            "choices": choices,
            "usage": {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c},
        }
        self.conn.respond_json(200, obj)


def _json_body(req: Request) -> dict[str, Any]:
    try:
        body = req.json()
    except ValueError:
        raise APIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


def _guard(fn):
    def handler(req: Request, conn: Connection) -> None:
        try:
            fn(req, conn)
        except APIError as exc:
            conn.respond_json(exc.status, exc.body())

    return handler

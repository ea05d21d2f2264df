"""The emulator's HTTP surface, shaped like vLLM's OpenAI-compatible server.

Routes: ``POST /v1/completions`` and ``/v1/chat/completions`` (streaming or not),
``GET /v1/models``, ``/health``, ``/version``, ``/metrics``, ``POST /tokenize`` and
``/detokenize``, plus ``GET /sim/stats`` (the emulator's own figures: token lateness, steps).
Error bodies follow vLLM's ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import IO, Any

import gevent

from tokenload.serving.http import Connection, HTTPServer, Request
from tokenload.sim.apiserver import APIServer
from tokenload.sim.engine import SimEngine
from tokenload.sim.errors import APIError
from tokenload.sim.faults import FaultPlan
from tokenload.sim.loop import EngineLoop
from tokenload.sim.sinks import CollectSink, StreamSink

__all__ = ["VLLM_API_VERSION", "SimAPI"]

#: The vLLM release whose API and metric names the emulator follows.
VLLM_API_VERSION = "0.32.0"


class SimAPI:
    def __init__(
        self,
        engine: SimEngine,
        metrics: Any,
        faults: FaultPlan,
        trace: IO[str] | None = None,
        startup_delay_s: float = 0.0,
        replica: int | None = None,
    ) -> None:
        self.engine = engine
        #: This replica's index behind the router (``--replicas N``), None for one server: the
        #: replicas share one ``--trace`` file, and each line says whose request it was.
        self.replica = replica
        self.metrics = metrics
        self.loop = EngineLoop(engine)
        #: The API server's processes as CPU that requests queue for (tokenload.sim.apiserver).
        self.api_server = APIServer.for_engine(engine)
        self.faults = faults
        self.trace = trace
        self.model = engine.model_name
        self._ready_at = time.monotonic() + startup_delay_s
        self._created = int(time.time())
        self._ids = itertools.count()
        self.requests_seen = 0
        #: How text is counted and what token ids mean (the engine's: it generates from it).
        self.vocabulary = engine.vocabulary

    def _routes(self) -> dict[tuple[str, str], Any]:
        return {
            ("GET", "/v1/models"): self.models,
            ("GET", "/health"): self.health,
            ("GET", "/version"): self.version,
            ("GET", "/metrics"): self.prometheus,
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/detokenize"): self.detokenize,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("GET", "/sim/stats"): self.sim_stats,
        }

    def handler(self, method: str, path: str) -> Any:
        """The route's handler, its API errors answered as vLLM does (a router calls it too)."""
        return _guard(self._routes()[(method, path)])

    def register(self, http: HTTPServer) -> None:
        for (method, path), fn in self._routes().items():
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
        # The API server's time on the request: its processes' queue and CPU (the profile's
        # api_*_cpu_s, in arrival order), then the profile's fixed frontend_request_s.
        ready_s = self.api_server.admit_to(self.engine, req.arrival_s, sum(len(p) for p in prompts))
        queued_s = None
        if ready_s > req.arrival_s:
            gevent.sleep(max(0.0, ready_s - time.perf_counter()))
            queued_s = max(ready_s, time.perf_counter())
        rid_base = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        sub_ids = [rid_base if len(prompts) == 1 else f"{rid_base}-{i}" for i in range(len(prompts))]
        sink_cls = StreamSink if stream else CollectSink
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

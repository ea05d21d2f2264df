"""The fixed-schedule mock: every stream has a known TTFT and inter-token gap, and the server
records when it really wrote each chunk (``--trace``), so client accuracy can be measured.

Unlike ``tokenload sim`` (an engine model whose latencies depend on load), the mock's timing
does not depend on load at all: it is the reference for measuring the client itself.
Faults are injected per request from a repeating pattern (``--faults ok,http_500,disconnect``).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

import gevent

from tokenload.cli_args import OneLineParser
from tokenload.serving.http import Connection, HTTPServer, Request

__all__ = ["FAULTS", "MockConfig", "build_server", "main"]

#: Fault name -> what the server does for that request.
FAULTS = {
    "ok": "a normal stream",
    "http_500": "answer 500 with a JSON error body",
    "http_429": "answer 429 with Retry-After",
    "http_400": "answer 400 as vLLM does for a bad request",
    "disconnect": "close the connection after half of the tokens",
    "garbage": "send a chunk that is not JSON after half of the tokens",
    "bad_utf8": "send invalid UTF-8 bytes as an event after half of the tokens",
    "error_event": "send an error object in the stream after half of the tokens, then [DONE]",
    "stall": "stop sending for --stall-s seconds after half of the tokens",
    "no_first_token": "send headers, then nothing for --stall-s seconds",
    "empty": "finish at once with no tokens (finish_reason stop)",
}


@dataclass
class MockConfig:
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    #: Output length when the request does not say max_tokens.
    tokens: int = 128
    #: Tokens carried by each content chunk (>1 emulates speculative decoding / stream intervals).
    tokens_per_chunk: int = 1
    faults: tuple[str, ...] = ("ok",)
    stall_s: float = 5.0
    model: str = "mock-model"
    #: A server (or gateway) that drops ``ignore_eos``: every stream stops after at most this
    #: many tokens with finish_reason "stop", whatever max_tokens asked. None: honours it.
    eos_after: int | None = None


class MockServer:
    def __init__(self, cfg: MockConfig, trace: IO[str] | None = None) -> None:
        self.cfg = cfg
        self.trace = trace
        self._faults = itertools.cycle(cfg.faults)
        self.requests_seen = 0
        #: Requests that carried an Authorization header (tests check the key is sent, never shown).
        self.auth_seen = 0
        self.tokens_sent = 0
        self._ids = itertools.count()

    def register(self, http: HTTPServer) -> None:
        http.route("GET", "/v1/models")(self.models)
        http.route("GET", "/health")(lambda req, conn: conn.respond(200, b""))
        http.route("POST", "/v1/completions")(self.completions)
        http.route("POST", "/v1/chat/completions")(self.chat)
        http.route("GET", "/mock/stats")(
            lambda req, conn: conn.respond_json(
                200,
                {
                    "requests_seen": self.requests_seen,
                    "auth_seen": self.auth_seen,
                    "tokens_sent": self.tokens_sent,
                },
            )
        )

    def models(self, req: Request, conn: Connection) -> None:
        conn.respond_json(
            200,
            {"object": "list", "data": [{"id": self.cfg.model, "object": "model", "owned_by": "tokenload"}]},
        )

    def completions(self, req: Request, conn: Connection) -> None:
        self._generate(req, conn, chat=False)

    def chat(self, req: Request, conn: Connection) -> None:
        self._generate(req, conn, chat=True)

    def _generate(self, req: Request, conn: Connection, chat: bool) -> None:
        self.requests_seen += 1
        if req.headers.get("authorization", "").startswith("Bearer "):
            self.auth_seen += 1
        fault = next(self._faults)
        n = next(self._ids)
        try:
            body = req.json()
        except ValueError:
            conn.respond_json(400, {"object": "error", "message": "body is not JSON", "code": 400})
            return
        if fault == "http_500":
            conn.respond_json(500, {"object": "error", "message": "injected failure", "code": 500})
            return
        if fault == "http_429":
            conn.respond_json(
                429, {"object": "error", "message": "too many requests", "code": 429}, {"retry-after": "1"}
            )
            return
        if fault == "http_400":
            conn.respond_json(
                400,
                {
                    "object": "error",
                    "message": "injected bad request",
                    "type": "BadRequestError",
                    "code": 400,
                },
            )
            return
        n_tokens = int(body.get("max_tokens") or self.cfg.tokens)
        last_reason = "length"
        if self.cfg.eos_after is not None and n_tokens > self.cfg.eos_after:
            n_tokens, last_reason = self.cfg.eos_after, "stop"
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        continuous = bool(opts.get("continuous_usage_stats"))
        prompt_tokens = _prompt_tokens(body, chat)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-mock{n}"
        created = int(time.time())
        t0 = req.arrival_s
        writes: list[float] = []
        cfg = self.cfg
        k = cfg.tokens_per_chunk

        # Chunks are formatted from prebuilt pieces, not json.dumps per token, so the mock can
        # stream far faster than the client under test can read (it must never be the limit).
        head = 'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":[{"index":0,' % (
            rid,
            "chat.completion.chunk" if chat else "text_completion",
            created,
            json.dumps(cfg.model),
        )
        if chat:
            body_fmt = '"delta":{"content":%s},"logprobs":null,"finish_reason":%s}]'
        else:
            body_fmt = '"text":%s,"logprobs":null,"finish_reason":%s,"stop_reason":null}]'
        usage_fmt = ',"usage":{"prompt_tokens":%d,"completion_tokens":%%d,"total_tokens":%%d}' % prompt_tokens

        def chunk(text: str | None, finish: str | None, sent: int, role: bool = False) -> bytes:
            if role:
                body = '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
            else:
                body = body_fmt % (json.dumps(text), '"%s"' % finish if finish else "null")
            usage = usage_fmt % (sent, prompt_tokens + sent) if continuous else ""
            return (head + body + usage + "}\n\n").encode()

        conn.start_stream()
        if chat:
            conn.chunk(chunk(None, None, 0, role=True))
        status = "ok"
        if fault == "empty":
            n_tokens = 0
        if fault == "no_first_token":
            gevent.sleep(cfg.stall_s)
            conn.abort()
            self._trace(n, fault, t0, writes, None)
            return
        half = n_tokens // 2
        sent = 0
        i = 0
        while sent < n_tokens:
            due = t0 + (cfg.ttft_ms + i * cfg.itl_ms) / 1000.0
            delay = due - time.perf_counter()
            # Yield even when late, so concurrent streams interleave chunk by chunk as on a real server.
            gevent.sleep(delay if delay > 0 else 0)
            if (
                sent >= half
                and fault in ("disconnect", "garbage", "bad_utf8", "error_event", "stall")
                and sent
            ):
                status = self._inject(fault, conn)
                if status != "continue":
                    self._trace(n, fault, t0, writes, None)
                    return
                fault = "ok"
            step = min(k, n_tokens - sent)
            sent += step
            text = "".join(_word(sent - step + j) for j in range(step))
            writes.append(conn.chunk(chunk(text, last_reason if sent == n_tokens else None, sent)))
            self.tokens_sent += step
            i += 1
        if n_tokens == 0:
            conn.chunk(chunk("", "stop", 0))
        if include_usage:
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": sent,
                "total_tokens": prompt_tokens + sent,
            }
            obj = {
                "id": rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": cfg.model,
                "choices": [],
                "usage": usage,
            }
            conn.chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
        conn.chunk(b"data: [DONE]\n\n")
        end = conn.end()
        self._trace(n, fault, t0, writes, end)

    def _inject(self, fault: str, conn: Connection) -> str:
        if fault == "disconnect":
            conn.abort()
            return "closed"
        if fault == "garbage":
            conn.chunk(b"data: {this is not json\n\n")
            gevent.sleep(0.05)
            conn.abort()
            return "closed"
        if fault == "bad_utf8":
            conn.chunk(b"data: \xff\xfe\xfd\n\n")
            gevent.sleep(0.05)
            conn.abort()
            return "closed"
        if fault == "error_event":
            err = {
                "error": {
                    "object": "error",
                    "message": "injected engine error",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
            conn.chunk(b"data: " + json.dumps(err).encode() + b"\n\n")
            conn.chunk(b"data: [DONE]\n\n")
            conn.end()
            return "ended"
        if fault == "stall":
            gevent.sleep(self.cfg.stall_s)
            conn.abort()
            return "closed"
        return "continue"

    def _trace(self, n: int, fault: str, arrival: float, writes: list[float], end: float | None) -> None:
        if self.trace is not None:
            self.trace.write(
                json.dumps({"n": n, "fault": fault, "arrival": arrival, "writes": writes, "end": end}) + "\n"
            )


_WORDS = ("alpha ", "beta ", "gamma ", "delta ", "é ", "omega ")


def _word(i: int) -> str:
    return _WORDS[i % len(_WORDS)]


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if chat:
        text = " ".join(str(m.get("content", "")) for m in body.get("messages") or [])
    else:
        p = body.get("prompt", "")
        if isinstance(p, list):
            return len(p)
        text = str(p)
    return len(text.split())


def build_server(
    cfg: MockConfig, host: str = "127.0.0.1", port: int = 0, trace: IO[str] | None = None
) -> tuple[HTTPServer, MockServer]:
    http = HTTPServer(host, port)
    mock = MockServer(cfg, trace)
    mock.register(http)
    return http, mock


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="tokenload mock", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument(
        "--ttft-ms", type=float, default=50.0, help="every stream's time to its first token (default 50)"
    )
    p.add_argument("--itl-ms", type=float, default=10.0, help="the gap between its chunks (default 10)")
    p.add_argument(
        "--tokens",
        type=int,
        default=128,
        help="tokens a stream sends when its request gives no max_tokens (default 128)",
    )
    p.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens in each SSE chunk (default 1)")
    p.add_argument(
        "--faults", default="ok", help="comma-separated pattern, repeated per request: " + ", ".join(FAULTS)
    )
    p.add_argument("--stall-s", type=float, default=5.0, help="a stall fault's length, seconds (default 5)")
    p.add_argument("--trace", default=None, help="write one JSON line per request with the write times")
    p.add_argument(
        "--eos-after",
        type=int,
        default=None,
        help="ignore ignore_eos: stop every stream after at most N tokens (finish_reason stop)",
    )
    args = p.parse_args(argv)
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    bad = [f for f in faults if f not in FAULTS]
    if bad or not faults:
        p.error(f"--faults: unknown fault {bad[0] if bad else ''!r}; expected some of {', '.join(FAULTS)}")
    if args.ttft_ms < 0 or args.itl_ms < 0 or args.tokens < 0 or args.tokens_per_chunk < 1:
        p.error("--ttft-ms/--itl-ms/--tokens: expected non-negative numbers; --tokens-per-chunk >= 1")
    if args.eos_after is not None and args.eos_after < 0:
        p.error("--eos-after: expected a non-negative number of tokens")
    cfg = MockConfig(
        args.ttft_ms,
        args.itl_ms,
        args.tokens,
        args.tokens_per_chunk,
        faults,
        args.stall_s,
        eos_after=args.eos_after,
    )
    trace = open(args.trace, "a", buffering=1, encoding="utf-8") if args.trace else None  # noqa: SIM115
    http, _ = build_server(cfg, args.host, args.port, trace)
    http.start()
    host, port = http.address
    return http.serve_until_interrupted(f"tokenload mock listening on http://{host}:{port}")


if __name__ == "__main__":
    sys.exit(main())

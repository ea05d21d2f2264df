"""A small HTTP/1.1 server on gevent for the built-in targets.

Why not a WSGI server: a streamed token must leave in its own write the moment the engine
produces it, with the write time known exactly (it is the ground truth the client is judged
against), and thousands of streams must cost little CPU. Raw gevent sockets with chunked
transfer encoding give both. Keep-alive, Content-Length bodies, and no pipelining (clients of
LLM servers do not pipeline). StreamServer hands out gevent sockets, so no monkey-patching is
needed here.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from gevent.server import StreamServer

from tokenload import rxstamp

__all__ = ["Connection", "HTTPServer", "Request"]

log = logging.getLogger("tokenload.serving")

_MAX_HEADER_BYTES = 64 * 1024
_MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    #: perf_counter time the request's last bytes reached the host (the kernel's receive stamp,
    #: see :mod:`tokenload.rxstamp`; the read's time where there is none).
    arrival_s: float

    def json(self) -> Any:
        return json.loads(self.body)


class ClientGone(Exception):
    """The client closed the connection while we were writing."""


class Connection:
    """One client connection. A handler answers with ``respond`` or ``start_stream``/``chunk``/``end``."""

    __slots__ = ("_keep_alive", "_streaming", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._keep_alive = True
        self._streaming = False

    def respond(
        self, status: int, body: bytes, content_type: str = "application/json", headers: dict | None = None
    ) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n{extra}\r\n"
        ).encode()
        self._send(head + body)

    def respond_json(self, status: int, obj: Any, headers: dict | None = None) -> None:
        self.respond(status, json.dumps(obj).encode(), headers=headers)

    def start_stream(self, content_type: str = "text/event-stream; charset=utf-8") -> None:
        self._streaming = True
        self._send(
            f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\n"
            "transfer-encoding: chunked\r\n\r\n".encode()
        )

    def chunk(self, data: bytes) -> float:
        """Write one chunk; returns the perf_counter time the write began (the client cannot
        have these bytes any earlier: the ground truth for client accuracy)."""
        t = time.perf_counter()
        self._send(b"%x\r\n%s\r\n" % (len(data), data))
        return t

    def end(self) -> float:
        t = time.perf_counter()
        self._send(b"0\r\n\r\n")
        self._streaming = False
        return t

    @staticmethod
    def frame(data: bytes) -> bytes:
        """``data`` as one chunk of chunked transfer encoding."""
        return b"%x\r\n%s\r\n" % (len(data), data)

    def try_send(self, framed: bytes) -> int:
        """Write what the socket takes *now* (non-blocking mode, see ``set_blocking``); returns the
        bytes written. For writers that must never wait, like the emulator's engine loop."""
        try:
            return self.sock.send(framed)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self._keep_alive = False
            raise ClientGone(str(exc)) from None

    def sender(self) -> Callable[[bytes], int]:
        """The bare ``send`` of the OS socket under gevent's wrapper, for writers that must never
        wait and write often (the emulator's engine loop: a token per stream per step). It never
        blocks: it returns the bytes the socket took, raises BlockingIOError when it took none,
        and another OSError once the client is gone (then call ``mark_gone``)."""
        raw = getattr(self.sock, "_sock", None)  # gevent's socket wraps a non-blocking one
        if raw is None:
            self.sock.settimeout(0.0)
            return self.sock.send
        return raw.send

    def mark_gone(self) -> None:
        """A write failed: the client is gone and the connection is not reused."""
        self._keep_alive = False

    def set_blocking(self, blocking: bool) -> None:
        self.sock.settimeout(None if blocking else 0.0)

    def raw(self, data: bytes) -> None:
        """Write bytes outside any framing (fault injection)."""
        self._send(data)

    def abort(self) -> None:
        """Close the connection at once (fault injection, or a broken stream)."""
        self._keep_alive = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self._keep_alive = False
            raise ClientGone(str(exc)) from None


Handler = Callable[[Request, Connection], None]


class HTTPServer:
    """Routes ``(method, path)`` to handlers; everything else gets a JSON 404."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, backlog: int = 2048) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self._server = StreamServer((host, port), self._handle, backlog=backlog)
        self.not_found: Handler = _not_found
        rxstamp.keep_on()  # before the first connection: see tokenload.rxstamp

    def route(self, method: str, path: str) -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            self.routes[(method, path)] = fn
            return fn

        return deco

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address[:2]

    def start(self) -> None:
        self._server.start()

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def serve_until_interrupted(self, banner: str) -> int:
        """Print ``banner`` (the listening line), serve until Ctrl-C, and give the exit code 0."""
        print(banner, flush=True)
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            pass
        return 0

    def stop(self) -> None:
        self._server.stop(timeout=1)

    def _handle(self, sock: socket.socket, _addr: Any) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stamped = rxstamp.enable(sock)
        conn = Connection(sock)
        buf = b""
        try:
            while conn._keep_alive:
                req, buf = _read_request(sock, buf, stamped)
                if req is None:
                    return
                if req.headers.get("connection", "").lower() == "close":
                    conn._keep_alive = False
                handler = self.routes.get((req.method, req.path), self.not_found)
                try:
                    handler(req, conn)
                except ClientGone:
                    return
                except Exception:  # a handler bug must not take the server down
                    log.exception("handler failed for %s %s", req.method, req.path)
                    if conn._streaming:
                        return
                    conn.respond_json(500, {"object": "error", "message": "internal error", "code": 500})
        except (OSError, ClientGone, ValueError):
            return
        finally:
            try:
                sock.close()
            except OSError:
                pass


def _read_request(sock: socket.socket, buf: bytes, stamped: bool = False) -> tuple[Request | None, bytes]:
    t = time.perf_counter()  # the request was already buffered: no read to date it by
    while b"\r\n\r\n" not in buf:
        if len(buf) > _MAX_HEADER_BYTES:
            raise ValueError("header too large")
        data, t = rxstamp.recv(sock, 65536, stamped)
        if not data:
            return None, b""
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length > _MAX_BODY_BYTES:
        raise ValueError("body too large")
    while len(rest) < length:
        data, t = rxstamp.recv(sock, max(65536, length - len(rest)), stamped)
        if not data:
            return None, b""
        rest += data
    path, _, query = target.partition("?")
    req = Request(method, path, query, headers, rest[:length], t)
    return req, rest[length:]


def _not_found(req: Request, conn: Connection) -> None:
    conn.respond_json(
        404, {"object": "error", "message": f"Not Found: {req.path}", "type": "NotFoundError", "code": 404}
    )

"""One streamed HTTP request over geventhttpclient, timed where the bytes leave the socket.

Locust's ``FastResponse.iter_content`` reads fixed-size blocks and waits until a block is
full, which delays every token (by ~240 ms on a slow stream). Here each ``recv`` hands
whatever arrived to the HTTP parser (geventhttpclient's llhttp binding, which also removes the
chunked transfer framing) and then to the SSE decoder; its timestamp is taken right after
``recv`` returns, before any parsing, and moved back to when the bytes reached the host where
the kernel stamps them (:mod:`tokenload.rxstamp`: plain HTTP on Linux), so a client that was
busy or asleep when they came still dates them exactly. Connections come from
geventhttpclient's connection pool and are kept alive between requests.

Time-outs are not socket time-outs: gevent arms a ``Timeout`` on every ``recv`` that has one,
about a tenth of the client's CPU at a few hundred streams. One watchdog greenlet per process
(:class:`_Watchdog`) checks every stream's deadline (TTFT, then stall) a few times a second and
shuts down the socket of one that passed it; the read then ends as ``ttft_timeout`` or
``stall_timeout``.
"""

from __future__ import annotations

import json
import socket
import time
import weakref
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import gevent
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPResponse

from tokenload import rxstamp
from tokenload.client.openai_stream import MalformedChunk, StreamState
from tokenload.client.sse import SSEDecodeError, SSEDecoder
from tokenload.metrics.failures import classify_http_status

__all__ = ["StreamOutcome", "StreamTarget", "Timeouts", "served_model"]

_RECV_BYTES = 65536
#: Two reads' stamps this close are one packet's: each read turns the kernel's wall-clock stamp
#: into perf_counter time with its own clock offset, which jitters by microseconds; a server's
#: consecutive tokens are a decode step (milliseconds) apart.
_SAME_STAMP_S = 10e-6
_MAX_ERROR_BODY = 64 * 1024
#: How often the watchdog looks at the deadlines: a time-out fires up to this much late.
WATCHDOG_TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = 10.0
    #: No content chunk this long after the request was sent -> ``ttft_timeout``.
    ttft_s: float = 120.0
    #: No bytes this long once content has started -> ``stall_timeout``.
    stall_s: float = 30.0


@dataclass(slots=True)
class StreamOutcome:
    """Everything one request produced, failed or not. Times are perf_counter seconds."""

    t_start: float
    wall_start: float
    state: StreamState
    t_end: float | None = None
    http_status: int | None = None
    failure_class: str | None = None
    detail: str = ""
    response_bytes: int = 0
    #: The read that brought the first content: how many events were waiting for it (the
    #: first content and any behind it), and whether the first token may be dated by a later
    #: one's arrival (metrics.definitions: ``coalesced_first_share``). None before any content.
    first_read_events: int | None = None
    first_read_coalesced: bool | None = None
    extra: dict[str, object] = field(default_factory=dict)


class _NoDelayPool(ConnectionPool):
    def after_connect(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rxstamp.enable(sock)


class _NoDelaySSLPool(SSLConnectionPool):
    def after_connect(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Response(HTTPResponse):
    """llhttp parser that hands body bytes out as they are parsed instead of buffering them."""

    def __init__(self) -> None:
        super().__init__(method="POST")
        self.body_parts: list[bytes] = []

    def _on_body(self, buf: bytearray) -> None:
        self.body_parts.append(bytes(buf))


class _Deadline:
    """One stream's read deadline (perf_counter seconds), watched by :class:`_Watchdog`."""

    __slots__ = ("at", "expired", "sock")

    def __init__(self, sock: socket.socket, at: float) -> None:
        self.sock, self.at, self.expired = sock, at, False


class _Watchdog:
    """Ends the reads that passed their deadline, for every stream of the process."""

    def __init__(self, tick_s: float = WATCHDOG_TICK_S) -> None:
        self.tick_s = tick_s
        self.active: set[_Deadline] = set()
        self._greenlet: gevent.Greenlet | None = None

    def watch(self, d: _Deadline) -> None:
        self.active.add(d)
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def forget(self, d: _Deadline) -> None:
        self.active.discard(d)

    def _run(self) -> None:
        try:
            idle = 0
            while idle < 100:  # gone after ~5 s without a stream; the next one starts it again
                gevent.sleep(self.tick_s)
                idle = 0 if self.active else idle + 1
                now = time.perf_counter()
                for d in [d for d in self.active if d.at <= now]:
                    self.active.discard(d)
                    d.expired = True
                    try:
                        d.sock.shutdown(socket.SHUT_RDWR)  # the blocked recv returns b""
                    except OSError:
                        pass
        finally:
            self._greenlet = None


_WATCHDOG = _Watchdog()


class StreamTarget:
    """A base URL and a small keep-alive pool; one per Locust user (one stream at a time)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts = Timeouts(),
        insecure: bool = False,
        pool_size: int = 1,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"host: expected an http:// or https:// URL, got {base_url!r}")
        self.base_path = parts.path.rstrip("/")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host_header = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        if ":" in parts.hostname and parts.port is not None:
            host_header = f"[{parts.hostname}]:{parts.port}"
        kw = dict(size=pool_size, connection_timeout=timeouts.connect_s, network_timeout=timeouts.stall_s)
        if parts.scheme == "https":
            self._pool: ConnectionPool = _NoDelaySSLPool(
                parts.hostname, port, parts.hostname, port, insecure=insecure, **kw
            )
        else:
            self._pool = _NoDelayPool(parts.hostname, port, parts.hostname, port, **kw)
        #: Reads dated by the kernel's receive stamps (TLS sockets have no ``recvmsg``).
        self._stamped = rxstamp.AVAILABLE and parts.scheme == "http"
        if self._stamped:
            rxstamp.keep_on()  # before the first connection: see tokenload.rxstamp
        self.timeouts = timeouts
        #: Sockets that already carried a response (kept alive) and went back to the pool.
        self._used: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head_tail = (
            f"Host: {host_header}\r\nUser-Agent: tokenload\r\nAccept: text/event-stream\r\n"
            f"Content-Type: application/json\r\n{auth}"
        ).encode()

    def close(self) -> None:
        self._pool.close()

    def _request_bytes(self, method: str, path: str, body: bytes) -> bytes:
        head = f"{method} {self.base_path}{path} HTTP/1.1\r\n".encode()
        return b"%s%sContent-Length: %d\r\n\r\n%s" % (head, self._head_tail, len(body), body)

    def get(self, path: str, timeout_s: float | None = None) -> tuple[int, bytes]:
        """A plain GET (/v1/models, /metrics): status and body, bounded by ``timeout_s`` per read."""
        return self._plain("GET", path, b"", timeout_s)

    def post(self, path: str, body: bytes, timeout_s: float | None = None) -> tuple[int, bytes]:
        """A plain JSON POST (/tokenize): status and body."""
        return self._plain("POST", path, body, timeout_s)

    def _plain(self, method: str, path: str, body: bytes, timeout_s: float | None) -> tuple[int, bytes]:
        sock = self._pool.get_socket()
        resp = _Response()
        ok = False
        try:
            sock.settimeout(timeout_s or self.timeouts.connect_s)
            sock.sendall(self._request_bytes(method, path, body))
            while not resp.message_complete:
                data = sock.recv(_RECV_BYTES)
                if not data:
                    raise ConnectionError("connection closed before the response was complete")
                resp.feed(data)
            ok = resp.should_keep_alive()
            return resp.status_code, b"".join(resp.body_parts)
        finally:
            if ok:
                self._pool.return_socket(sock)
            else:
                self._pool.release_socket(sock)

    def stream(self, path: str, body: bytes, state: StreamState) -> StreamOutcome:
        """POST ``body`` to ``path`` and read the event stream into ``state``. Never raises for
        a failed request: the failure class and every timing gathered so far are in the result."""
        clock = time.perf_counter
        out = StreamOutcome(t_start=clock(), wall_start=time.time(), state=state)
        request = self._request_bytes("POST", path, body)
        for attempt in (1, 2):
            try:
                sock = self._pool.get_socket()
            except (OSError, RuntimeError) as exc:
                out.t_end = clock()
                out.failure_class, out.detail = "connect_error", _exc_text(exc)
                return out
            reused = sock in self._used
            reusable = False
            try:
                reusable = self._exchange(sock, request, out)
            finally:
                if reusable:
                    self._used.add(sock)
                    self._pool.return_socket(sock)
                else:
                    self._used.discard(sock)
                    self._pool.release_socket(sock)
            # A kept-alive connection the server closed while idle fails before a single
            # response byte: the server never saw the request, so it is sent again once on a
            # fresh connection (as HTTP clients do), not counted as a failure.
            if attempt == 1 and reused and out.failure_class == "connect_error" and not out.response_bytes:
                out.failure_class, out.detail, out.t_end = None, "", None
                continue
            break
        return out

    def _exchange(self, sock: socket.socket, request: bytes, out: StreamOutcome) -> bool:
        clock = time.perf_counter
        state = out.state
        content_times = state.content_times
        resp = _Response()
        decoder = SSEDecoder()
        timeouts = self.timeouts
        stall_s = timeouts.stall_s
        error_body: list[bytes] = []
        deadline = _Deadline(sock, out.t_start + timeouts.ttft_s)
        stamped = self._stamped
        recv = rxstamp.recv
        # Reads take one event at a time (``split``) until the first token's date is settled.
        split, waiting, first_stamp = stamped, 0, None
        t_last = out.t_start
        try:
            sock.settimeout(timeouts.connect_s)
            sock.sendall(request)
            sock.settimeout(None)  # reads are bounded by the watchdog
            _WATCHDOG.watch(deadline)
            while True:
                # Until the first token is dated, a read takes one event at most (its bytes found
                # by a peek), so that the kernel's stamp is that event's packet's, not a later one's.
                if split:
                    n, waiting = _first_event_size(sock)
                    data, t = recv(sock, n, stamped)
                else:
                    data, t = recv(sock, _RECV_BYTES, stamped)
                # One packet read in two parts gets its stamp converted twice, with clock
                # offsets microseconds apart: dates never go backwards within a stream.
                if t < t_last:
                    t = t_last
                t_last = t
                if not data:
                    if deadline.expired:
                        raise TimeoutError
                    return self._eof(out, resp, decoder, t)
                out.response_bytes += len(data)
                resp.feed(data)
                if out.http_status is None and resp.headers_complete:
                    out.http_status = resp.status_code
                    out.failure_class = classify_http_status(resp.status_code)
                parts = resp.body_parts
                if parts:
                    if out.failure_class is None:
                        for part in parts:
                            for event in decoder.feed(part):
                                state.on_event(event.data, t)
                    elif sum(map(len, error_body)) < _MAX_ERROR_BODY:
                        error_body.extend(parts)
                    parts.clear()
                if resp.message_complete:
                    out.t_end = t
                    if out.failure_class is not None:
                        out.detail = _error_detail(resp.status_code, b"".join(error_body))
                        return resp.should_keep_alive()
                    for event in decoder.close():
                        state.on_event(event.data, t)
                    self._judge(out)
                    return resp.should_keep_alive()
                if content_times:  # content started: the deadline is now a stall's
                    deadline.at = t + stall_s
                    if out.first_read_events is None:  # this read brought the first token
                        k = max(len(content_times), waiting) if stamped else len(content_times)
                        out.first_read_events = k
                        if stamped and len(content_times) == 1 and waiting >= 2:
                            first_stamp = t  # settled by the next event's stamp
                        else:  # read alone, or read with others (dated by the read's last bytes)
                            out.first_read_coalesced, split = len(content_times) >= 2, False
                    elif first_stamp is not None:
                        # The same stamp: one packet held both (the kernel merges packets queued
                        # behind each other while the reader is behind), so the first token may
                        # carry the second's date. A later stamp: its own packet dated it.
                        same = abs(t - first_stamp) < _SAME_STAMP_S
                        out.first_read_coalesced, split, first_stamp = same, False, None
        except (SSEDecodeError, MalformedChunk) as exc:
            out.t_end = clock()
            out.failure_class, out.detail = "malformed_stream", str(exc)
        except OSError as exc:  # TimeoutError included: the send's, or the watchdog's
            out.t_end = clock()
            if isinstance(exc, TimeoutError) or deadline.expired:
                # Before any content it is the first token that did not come in time.
                out.failure_class = "stall_timeout" if content_times else "ttft_timeout"
                out.detail = f"no data for {stall_s if content_times else timeouts.ttft_s:g} s"
            elif out.http_status is None:
                out.failure_class, out.detail = "connect_error", _exc_text(exc)
            else:
                out.failure_class, out.detail = "truncated", _exc_text(exc)
        except Exception as exc:  # llhttp's HTTPParseError and anything unforeseen
            out.t_end = clock()
            if out.http_status is None and not out.response_bytes:
                out.failure_class = "connect_error"
            else:
                out.failure_class = "malformed_stream"
            out.detail = _exc_text(exc)
        finally:
            _WATCHDOG.forget(deadline)
        return False

    def _eof(self, out: StreamOutcome, resp: _Response, decoder: SSEDecoder, t: float) -> bool:
        out.t_end = t
        if out.http_status is None:
            out.failure_class = "connect_error"
            out.detail = "connection closed before any response"
            return False
        if out.failure_class is None:
            try:
                for event in decoder.close():
                    out.state.on_event(event.data, t)
            except (SSEDecodeError, MalformedChunk) as exc:
                out.failure_class, out.detail = "malformed_stream", str(exc)
                return False
            if out.state.finished and out.state.error is None:
                self._judge(out)  # a close-delimited body that ended properly
            elif out.state.error is not None:
                self._judge(out)
            else:
                out.failure_class = "truncated"
                out.detail = f"connection closed after {out.state.chunk_tokens} tokens"
        return False

    @staticmethod
    def _judge(out: StreamOutcome) -> None:
        state = out.state
        if state.error is not None:
            out.failure_class, out.detail = "error_event", state.error
        elif not state.finished:
            out.failure_class = "truncated"
            out.detail = f"stream ended without [DONE] after {state.chunk_tokens} tokens"
        elif not state.content_times:
            out.failure_class, out.detail = "empty_output", f"finish_reason={state.finish_reason}"


def served_model(target: StreamTarget, timeout_s: float | None = None) -> tuple[str | None, str]:
    """The first model id the target's ``/v1/models`` lists, or None and why not: the answer's
    status ("HTTP 401") or the error's name. A lookup never raises."""
    try:
        status, body = target.get("/v1/models", timeout_s=timeout_s)
        if status != 200:
            return None, f"HTTP {status}"
        return str(json.loads(body)["data"][0]["id"]), ""
    except Exception as exc:  # a refused socket, a body of another shape: either way, no model
        return None, type(exc).__name__


def _first_event_size(sock: socket.socket) -> tuple[int, int]:
    """Bytes up to the end of the first SSE event waiting in ``sock`` (``\\n\\n``, as vLLM,
    OpenAI and the emulator end events) when more follow it, else a whole read; and how many
    complete events are waiting. A read of that many bytes dates the event by the packet that
    completed it (:mod:`tokenload.rxstamp` gives the stamp of the last packet a read consumed),
    unless the kernel merged later packets into it while the reader was behind. Costs one peek
    per read before the first token; an event framed otherwise (``\\r\\n\\r\\n``) is read
    as before."""
    waiting = sock.recv(_RECV_BYTES, socket.MSG_PEEK)
    end = waiting.find(b"\n\n") + 2
    return (end if 2 <= end < len(waiting) else _RECV_BYTES), waiting.count(b"\n\n")


def _error_detail(status: int, body: bytes) -> str:
    """``HTTP 400: <the server's message>``: the ``message`` of an OpenAI-style error body
    (``{"error": {"message"}}``, or vLLM's older ``{"object": "error", "message"}``), else the
    body's first 300 characters."""
    text = body[:4096].decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        error = obj.get("error", obj)
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            text = message
    except (ValueError, AttributeError):
        pass
    text = text[:300]
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def _exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]

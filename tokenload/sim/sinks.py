"""How a generation request's tokens leave the emulator: a *sink* per HTTP request receives
the engine loop's outputs for its sub-requests (one per prompt of a batch).

* :class:`StreamSink` (``"stream": true``): SSE framing of each chunk as vLLM frames it (the
  usage chunk, ``[DONE]``), each write timed against the engine's schedule, the seeded faults
  (a 500 mid-stream, a disconnect, a stall, a malformed chunk) injected, and every write traced
  (``--trace``) with how late it left;
* :class:`CollectSink`: the whole answer as one JSON body, vLLM's non-streaming shape.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event

from tokenload.serving.http import ClientGone, Connection
from tokenload.sim.errors import APIError
from tokenload.sim.loop import Write

if TYPE_CHECKING:
    from tokenload.sim.api import SimAPI

__all__ = ["CollectSink", "Sink", "StreamSink"]


#: JSON string literals of every one-character text: most streamed tokens are one of these.
_JSON_TEXT = {chr(c): json.dumps(chr(c)) for c in range(128)} | {"": '""'}
_JSON_TEXT_BYTES = {text: literal.encode() for text, literal in _JSON_TEXT.items()}


class Sink:
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
            "replica": self.api.replica,
        }
        trace.write(json.dumps(rec) + "\n")


class StreamSink(Sink):
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


class CollectSink(Sink):
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

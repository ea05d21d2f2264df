"""Server-Sent Events decoder: bytes in arbitrary splits -> events. Pure, no I/O.

Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR (a CR at the end of one
chunk followed by LF at the start of the next is one line end); ``data:`` lines accumulate with
"\\n"; lines starting with ":" are comments (keep-alives); a blank line dispatches the event.
Unlike a browser, a final event that was not followed by a blank line is delivered by
:meth:`SSEDecoder.close`, because servers do end streams that way. Work is done on bytes and
decoded per complete line, so a UTF-8 character split across reads is never a problem.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_LINE_BYTES", "SSEDecodeError", "SSEDecoder", "SSEEvent"]

#: A line longer than this without a line end is treated as a malformed stream, so a server
#: that never sends a newline cannot make the client buffer without bound.
MAX_LINE_BYTES = 4 * 1024 * 1024


class SSEDecodeError(ValueError):
    """The byte stream is not a valid event stream (bad UTF-8, or an unbounded line)."""


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. ``event`` is "message" unless the stream named another type."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEDecoder:
    """Incremental decoder. ``feed`` returns the events completed by the new bytes."""

    __slots__ = ("_buf", "_data", "_event", "_id", "_skip_lf")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        # The previous chunk ended in CR: an LF at the start of the next one belongs to it.
        self._skip_lf = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # Rare in practice: normalise CRLF and lone CR to LF, keeping a trailing CR pending.
            if buf.endswith(b"\r"):
                self._skip_lf = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        if len(self._buf) > MAX_LINE_BYTES:
            raise SSEDecodeError(f"an event-stream line exceeds {MAX_LINE_BYTES} bytes without a line end")
        events: list[SSEEvent] = []
        for line in lines:
            if line:
                self._field(line)
            elif self._data:
                events.append(self._dispatch())
            else:
                # A blank line with no data resets the event type, per the spec.
                self._event = ""
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: deliver a last event that had no trailing blank line."""
        events: list[SSEEvent] = []
        if self._buf:
            line, self._buf = self._buf, b""
            self._field(line)
        if self._data:
            events.append(self._dispatch())
        return events

    def _field(self, line: bytes) -> None:
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEDecodeError(f"invalid UTF-8 in event stream at byte {exc.start}") from None
        name, sep, value = text.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._id = value
        # "retry" and unknown fields are ignored, as the spec says.

    def _dispatch(self) -> SSEEvent:
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        event = SSEEvent(data, self._event or "message", self._id)
        self._data = []
        self._event = ""
        return event

"""Per step, the ok requests (and their tokens) that *ended* in its measured part, read from
``requests.jsonl`` a little at a time while the run goes on — the figures behind a step's
``requests_per_s``, ``input_tokens_per_s`` and ``output_tokens_per_s`` in ``summary.json``, by the
same rule (``tokenload.results.summary``: an ok record with an E2E, ending at
``wall_start + e2e_ms / 1000``, counts in the first window ``[measure_start or start, end)``
holding that time), without re-reading the whole file at each step.

A record whose window cannot be decided yet (it ends at or after the last window's known
boundary: that window's end, or where a next one may start, is still unknown) waits in a pending
list until it can; so the totals are exact whatever the workers' clocks, once the run has moved on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["StepCompletions"]

#: Read at most this much of requests.jsonl per update (about 400 records, a few ms of parsing),
#: so catching up with a long run's file never stalls the event loop.
CHUNK_BYTES = 1 << 18


def _span(w: Any) -> tuple[float, float | None]:
    return (w.measure_start if w.measure_start is not None else w.start), w.end


class StepCompletions:
    def __init__(self, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.totals: dict[int, list[int]] = {}  # step index -> [requests, input_tokens, output_tokens]
        self.caught_up = False
        self._path: Path | None = None
        self._offset = 0
        self._rest = b""
        self._pending: list[tuple[float, int, int]] = []
        self._horizon = -math.inf

    def update(self, path: Path | None, windows: list[Any]) -> None:
        """Read what was appended since the last call (up to ``chunk_bytes``) and attribute it."""
        if path is not None and path != self._path:
            self._path, self._offset, self._rest = path, 0, b""
        new = self._read()
        horizon = self._horizon_of(windows)
        if horizon != self._horizon:  # a window boundary became known: retry the waiting ones
            self._horizon = horizon
            waiting, self._pending = self._pending, []
            for item in waiting:
                self._place(item, windows, horizon)
        for item in new:
            self._place(item, windows, horizon)

    def _read(self) -> list[tuple[float, int, int]]:
        if self._path is None:
            self.caught_up = True
            return []
        try:
            with open(self._path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(self.chunk_bytes)
        except FileNotFoundError:
            self.caught_up = True
            return []
        self._offset += len(data)
        self.caught_up = len(data) < self.chunk_bytes
        data = self._rest + data
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        out = []
        for line in data[:cut].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("status") != "ok" or rec.get("e2e_ms") is None:
                continue
            end = rec["wall_start"] + rec["e2e_ms"] / 1000.0
            out.append((end, rec.get("input_tokens") or 0, rec.get("output_tokens") or 0))
        return out

    @staticmethod
    def _horizon_of(windows: list[Any]) -> float:
        """Times before this are decided: no window still to come or to close can hold them."""
        if not windows:
            return -math.inf
        last = windows[-1]
        if last.end is not None:
            return last.end  # a next window starts after this, when the shape reaches its users
        if last.measure_start is not None:
            return last.measure_start  # the open window's end is unknown
        return last.start  # still warming up: where its measured part starts is unknown

    def _place(self, item: tuple[float, int, int], windows: list[Any], horizon: float) -> None:
        end = item[0]
        if end >= horizon:
            self._pending.append(item)
            return
        for w in windows:
            a, b = _span(w)
            if b is not None and a <= end < b:
                t = self.totals.setdefault(w.index, [0, 0, 0])
                t[0] += 1
                t[1] += item[1]
                t[2] += item[2]
                return

"""Request traces: timestamped rows read from the common public formats, cut and rescaled, and
their own statistics. Pure: files in, rows and numbers out.

Each row is an arrival time, an input and an output length, and optionally a session id, the
prompt's block hashes (Mooncake's ``hash_ids``: rows that share a hash share that block of the
prompt, so the trace's prefix reuse is reproduced) and a prompt text. Formats (``--trace-format``,
``auto`` picks by extension and header):

* ``mooncake``: JSONL, ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
  (each a block of ``block_size`` tokens, 512 in the Mooncake traces), optional ``session_id``;
* ``burstgpt``: CSV with ``Timestamp`` (s), ``Model``, ``Request tokens``, ``Response tokens``,
  ``Total tokens``, ``Log Type``; rows with 0 response tokens (requests that failed in the traced
  service) are skipped and counted;
* ``azure``: the Azure LLM inference trace CSV, ``TIMESTAMP`` (a date-time), ``ContextTokens``,
  ``GeneratedTokens``;
* ``jsonl`` / ``csv``: tokenload's own schema: ``timestamp_s`` (seconds) or ``gap_s`` (seconds
  since the previous row), ``input_tokens``, ``output_tokens``, optional ``session_id``,
  ``hash_ids`` (a JSON list, or space-separated numbers in CSV) and ``prompt``.

An unknown column or key, or a bad value, fails up front with the row number (1-based, the header
not counted). Rows of a session without hashes of their own get hashes that repeat the previous
turn's prompt (:func:`session_prefixes`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from tokenload.workload.errors import WorkloadError

__all__ = [
    "FORMATS",
    "Trace",
    "TraceRow",
    "TraceWindow",
    "implied_hit_tokens",
    "load_trace",
    "mean_rate",
    "parse_window",
    "replay_stats",
    "replay_trace",
    "session_prefixes",
    "trace_stats",
]

FORMATS = ("auto", "mooncake", "burstgpt", "azure", "jsonl", "csv")
#: Tokens per hash id in the Mooncake traces (FAST'25 paper and its trace README).
MOONCAKE_BLOCK_SIZE = 512


@dataclass(frozen=True, slots=True)
class TraceRow:
    t_s: float  # arrival, seconds after the trace's first row
    input_tokens: int
    output_tokens: int
    session_id: str | None = None
    hash_ids: tuple[int, ...] = ()
    prompt: str | None = None


def mean_rate(rows: int, duration_s: float) -> float | None:
    """The mean arrival rate of ``rows`` arrivals spread over ``duration_s`` from the first to
    the last: (rows - 1) / duration, the gaps per second (None below two rows at distinct times)."""
    return (rows - 1) / duration_s if rows > 1 and duration_s > 0 else None


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """One of the consecutive parts a trace is replayed in (``--trace-steps``): rows
    ``first_row`` to ``end_row - 1``, from ``start_s`` to ``end_s`` of the trace (the times of its
    first and last rows)."""

    index: int
    first_row: int
    end_row: int
    start_s: float
    end_s: float

    @property
    def rows(self) -> int:
        return self.end_row - self.first_row

    @property
    def mean_rate_rps(self) -> float | None:
        """Arrivals per second over the window (:func:`mean_rate`)."""
        return mean_rate(self.rows, self.end_s - self.start_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.index,
            "rows": [self.first_row, self.end_row],
            "start_s": self.start_s,
            "end_s": self.end_s,
            "mean_rate_rps": self.mean_rate_rps,
        }


@dataclass(frozen=True, slots=True)
class Trace:
    rows: tuple[TraceRow, ...]
    format: str
    source: str
    block_size: int
    #: Rows left out on reading (BurstGPT's failed requests) and by --trace-window.
    skipped: int = 0

    @property
    def duration_s(self) -> float:
        return self.rows[-1].t_s - self.rows[0].t_s if self.rows else 0.0

    @property
    def mean_rate_rps(self) -> float | None:
        """Arrivals per second over the trace (:func:`mean_rate`)."""
        return mean_rate(len(self.rows), self.duration_s)

    def times(self) -> list[float]:
        return [r.t_s for r in self.rows]

    def windows(self, n: int, option: str = "--trace-steps") -> list[TraceWindow]:
        """The trace cut into ``n`` consecutive windows of equal duration (a row on a boundary
        opens the later window; the last row closes the last). Each must hold two rows at
        distinct times, or the cut fails naming the window."""
        if n < 1:
            raise WorkloadError(f"{option}: expected a count >= 1, got {n}")
        width = self.duration_s / n
        bounds = [0]
        for k in range(1, n):
            edge = k * width
            i = bounds[-1]
            while i < len(self.rows) and self.rows[i].t_s < edge:
                i += 1
            bounds.append(i)
        bounds.append(len(self.rows))
        out = []
        for k in range(n):
            a, b = bounds[k], bounds[k + 1]
            window = TraceWindow(k, a, b, self.rows[a].t_s if b > a else k * width,
                                 self.rows[b - 1].t_s if b > a else k * width)  # fmt: skip
            if window.mean_rate_rps is None:
                raise WorkloadError(
                    f"{option}: window {k + 1} of {n} ({k * width:g}-{(k + 1) * width:g} s of the trace) "
                    f"holds {window.rows} rows; each needs two at distinct times: ask for fewer steps"
                )
            out.append(window)
        return out

    def transformed(
        self, *, window: tuple[float, float] | None = None, speed: float = 1.0, rate: float | None = None
    ) -> Trace:
        """The part of the trace from ``window`` (seconds after its first row, end excluded),
        re-based to start at 0, played ``speed`` times faster, then rescaled so that its mean
        rate is ``rate`` (every gap scaled alike: the burst shape is kept)."""
        rows = list(self.rows)
        skipped = self.skipped
        if window is not None:
            a, b = window
            kept = [r for r in rows if a <= r.t_s < b]
            skipped += len(rows) - len(kept)
            rows = kept
            if not rows:
                raise WorkloadError(f"--trace-window: no row of the trace lies in {a:g}:{b:g} s")
        t0 = rows[0].t_s
        factor = 1.0 / speed
        out = Trace(tuple(replace(r, t_s=(r.t_s - t0) * factor) for r in rows), self.format, self.source,
                    self.block_size, skipped)  # fmt: skip
        if rate is not None:
            mean = out.mean_rate_rps
            if mean is None:
                raise WorkloadError("--trace-scale-rate: the trace needs two rows at distinct times")
            k = mean / rate
            out = replace(out, rows=tuple(replace(r, t_s=r.t_s * k) for r in out.rows))
        return out


#: After a replayed trace's (or window's) last arrival its step runs this much longer (its last
#: requests are sent; the settle then waits for them to end, as for any step).
REPLAY_TAIL_S = 0.5


def replay_trace(
    path: str | Path,
    fmt: str = "auto",
    block_size: int = MOONCAKE_BLOCK_SIZE,
    window: str = "",
    speed: float = 1.0,
    rate: float | None = None,
) -> Trace:
    """The trace as a run replays it (``--trace``, ``--trace-format``, ``--trace-block-size``,
    ``--trace-window`` as START:END text, ``--trace-speed``, ``--trace-scale-rate``)."""
    trace = load_trace(path, fmt, block_size)
    return trace.transformed(window=parse_window(window) if window else None, speed=speed, rate=rate)


def parse_window(text: str, option: str = "--trace-window") -> tuple[float, float]:
    """``START:END`` seconds (either side may be empty: the trace's start or end)."""
    a, sep, b = text.partition(":")
    try:
        start = float(a) if a.strip() else 0.0
        end = float(b) if b.strip() else math.inf
    except ValueError:
        start = end = math.nan
    if not sep or not (0 <= start < end):
        raise WorkloadError(f"{option}: expected START:END seconds with 0 <= START < END, got {text!r}")
    return start, end


def _bad(source: str, row: int, what: str) -> WorkloadError:
    return WorkloadError(f"{source}: row {row}: {what}")


def _int(value: Any, source: str, row: int, name: str, minimum: int = 1) -> int:
    try:
        v = int(value) if not isinstance(value, float) or value.is_integer() else math.nan
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(v, float) or v < minimum:
        raise _bad(source, row, f"{name}: expected an integer >= {minimum}, got {value!r}")
    return v


def _float(value: Any, source: str, row: int, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v >= 0):
        raise _bad(source, row, f"{name}: expected a number >= 0, got {value!r}")
    return v


def _hashes(value: Any, source: str, row: int) -> tuple[int, ...]:
    if value in (None, ""):
        return ()
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else [int(x) for x in text.split()]
        except ValueError:
            raise _bad(source, row, f"hash_ids: expected a list of integers, got {value!r}") from None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise _bad(source, row, f"hash_ids: expected a list of integers, got {value!r}")
    return tuple(value)


def _check_keys(keys: Iterable[str], allowed: set[str], source: str, row: int) -> None:
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise _bad(
            source, row, f"unknown column {unknown[0]!r} (expected some of {', '.join(sorted(allowed))})"
        )


_MOONCAKE = {"timestamp", "input_length", "output_length", "hash_ids", "session_id"}
_GENERIC = {"timestamp_s", "gap_s", "input_tokens", "output_tokens", "session_id", "hash_ids", "prompt"}
_BURSTGPT = {"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"}
_AZURE = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as fh:
        n = 0
        for line in fh:
            if not line.strip():
                continue
            n += 1
            try:
                obj = json.loads(line)
            except ValueError:
                raise _bad(str(path), n, "not a JSON object") from None
            if not isinstance(obj, dict):
                raise _bad(str(path), n, "not a JSON object")
            yield n, obj


def _csv(path: Path) -> tuple[list[str], Iterator[tuple[int, dict[str, Any]]]]:
    fh = open(path, encoding="utf-8", newline="")  # noqa: SIM115 - closed when the rows are read
    reader = csv.DictReader(fh)
    header = [h.strip() for h in reader.fieldnames or []]

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        with fh:
            for n, rec in enumerate(reader, 1):
                if None in rec:
                    raise _bad(str(path), n, "more fields than the header names")
                yield n, {k.strip(): v for k, v in rec.items()}

    return header, rows()


def _detect(path: Path) -> str:
    if path.suffix.lower() in (".jsonl", ".json"):
        for _, obj in _jsonl(path):
            return "mooncake" if "input_length" in obj else "jsonl"
        raise WorkloadError(f"{path}: the trace has no rows")
    with open(path, encoding="utf-8", newline="") as fh:
        header = {h.strip() for h in next(csv.reader(fh), [])}
    if "TIMESTAMP" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    return "csv"


def _azure_time(text: str, source: str, row: int) -> float:
    s = text.strip()
    if "." in s:  # the traces carry 7 fraction digits; datetime takes 6
        head, frac = s.split(".", 1)
        s = f"{head}.{frac[:6]}"
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        raise _bad(
            source, row, f"TIMESTAMP: expected a date-time like 2023-11-16 18:15:46.68, got {text!r}"
        ) from None


def load_trace(path: str | Path, fmt: str = "auto", block_size: int | None = None) -> Trace:
    """Read a trace; rows in time order, times from the first row. Raises WorkloadError naming
    the file, the row and the field."""
    p = Path(path)
    if fmt not in FORMATS:
        raise WorkloadError(f"--trace-format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if not p.is_file():
        raise WorkloadError(f"--trace: no such file: {p}")
    if fmt == "auto":
        fmt = _detect(p)
    src = str(p)
    rows: list[TraceRow] = []
    skipped = 0
    if fmt in ("mooncake", "jsonl"):
        prev = 0.0
        for n, obj in _jsonl(p):
            if fmt == "mooncake":
                _check_keys(obj, _MOONCAKE, src, n)
                t = _float(obj.get("timestamp"), src, n, "timestamp") / 1000.0
                n_in = _int(obj.get("input_length"), src, n, "input_length")
                n_out = _int(obj.get("output_length"), src, n, "output_length")
                hashes = _hashes(obj.get("hash_ids"), src, n)
                rows.append(TraceRow(t, n_in, n_out, _session(obj.get("session_id")), hashes))
            else:
                prev = _generic_row(obj, src, n, prev, rows)
    else:
        header, records = _csv(p)
        allowed = {"burstgpt": _BURSTGPT, "azure": _AZURE, "csv": _GENERIC}[fmt]
        _check_keys(header, allowed, src, 0)
        prev = 0.0
        for n, rec in records:
            if fmt == "burstgpt":
                out = _int(rec.get("Response tokens"), src, n, "Response tokens", minimum=0)
                if out == 0:
                    skipped += 1
                    continue
                t = _float(rec.get("Timestamp"), src, n, "Timestamp")
                rows.append(TraceRow(t, _int(rec.get("Request tokens"), src, n, "Request tokens"), out))
            elif fmt == "azure":
                t = _azure_time(rec.get("TIMESTAMP") or "", src, n)
                n_in = _int(rec.get("ContextTokens"), src, n, "ContextTokens")
                rows.append(TraceRow(t, n_in, _int(rec.get("GeneratedTokens"), src, n, "GeneratedTokens")))
            else:
                prev = _generic_row(rec, src, n, prev, rows)
    if not rows:
        raise WorkloadError(f"{src}: the trace has no usable rows")
    rows.sort(key=lambda r: r.t_s)  # stable: rows at one time keep the file's order
    t0 = rows[0].t_s
    size = block_size or MOONCAKE_BLOCK_SIZE
    rows = session_prefixes([replace(r, t_s=r.t_s - t0) for r in rows], size)
    return Trace(tuple(rows), fmt, src, size, skipped)


def session_prefixes(rows: list[TraceRow], block_size: int) -> list[TraceRow]:
    """Rows of a session (``session_id``) without ``hash_ids`` of their own, given block hashes
    that make each turn's prompt start with the previous turn's: the whole blocks of
    min(previous input, this input) tokens carry the previous turn's hashes, the rest new ones
    (negative, so no trace's own hash is met). The conversation's history then reaches the
    server's prefix cache, as the trace's ``hash_ids`` do. The previous turn's reply is not in
    it (its text is the server's): a lower bound on a real conversation's reuse."""
    last: dict[str, tuple[int, ...]] = {}
    inputs: dict[str, int] = {}
    fresh = 0
    out = []
    for r in rows:
        if r.session_id is None or r.hash_ids or r.prompt is not None:
            out.append(r)
            continue
        prev = last.get(r.session_id, ())
        kept = prev[: min(inputs.get(r.session_id, 0), r.input_tokens) // block_size]
        need = -(-r.input_tokens // block_size) - len(kept)
        own = tuple(-(fresh + k + 1) for k in range(need))
        fresh += need
        hashes = kept + own
        last[r.session_id], inputs[r.session_id] = hashes, r.input_tokens
        out.append(replace(r, hash_ids=hashes))
    return out


def _session(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def _generic_row(obj: dict[str, Any], src: str, n: int, prev: float, rows: list[TraceRow]) -> float:
    _check_keys(obj, _GENERIC, src, n)
    has_t, has_gap = obj.get("timestamp_s") not in (None, ""), obj.get("gap_s") not in (None, "")
    if has_t == has_gap:
        raise _bad(src, n, "expected exactly one of timestamp_s and gap_s")
    t = (
        _float(obj["timestamp_s"], src, n, "timestamp_s")
        if has_t
        else prev + _float(obj["gap_s"], src, n, "gap_s")
    )
    prompt = obj.get("prompt")
    rows.append(
        TraceRow(t, _int(obj.get("input_tokens"), src, n, "input_tokens"),
                 _int(obj.get("output_tokens"), src, n, "output_tokens"), _session(obj.get("session_id")),
                 _hashes(obj.get("hash_ids"), src, n), None if prompt in (None, "") else str(prompt))
    )  # fmt: skip
    return t


def implied_hit_tokens(rows: Iterable[TraceRow], block_size: int, engine_block: int = 16) -> tuple[int, int]:
    """(prompt tokens a prefix cache of unbounded size would serve, prompt tokens in all).

    A row's leading blocks whose hashes an earlier row carried are cached (a hash stands for its
    whole prefix, as in Mooncake's traces); as in vLLM, only whole engine blocks
    (``engine_block`` tokens) are cached, and never a prompt's last token (one must be computed)."""
    seen: dict[int, int] = {}  # hash -> the most tokens of its block a row has carried
    hit = total = 0
    for r in rows:
        cached = 0
        for h in r.hash_ids:
            have = seen.get(h, 0)
            cached += min(have, block_size)
            if have < block_size:  # a block seen only in part ends the cached prefix
                break
        cached = min(cached, r.input_tokens - 1)
        hit += max(0, cached // engine_block * engine_block)
        total += r.input_tokens
        for i, h in enumerate(r.hash_ids):
            size = min(block_size, r.input_tokens - i * block_size)
            if size > seen.get(h, 0):
                seen[h] = size
    return hit, total


def _percentiles(values: list[int]) -> dict[str, float]:
    s = sorted(values)

    def q(p: float) -> float:
        return float(s[min(len(s) - 1, int(p * len(s)))])

    return {"mean": sum(s) / len(s), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": float(s[-1])}


def trace_stats(trace: Trace, bins: int = 20) -> dict[str, Any]:
    """The trace's own statistics, for summary.json's ``trace``: rows, duration, mean rate, the
    rate over time (``bins`` equal bins), length distributions and its implied prefix reuse."""
    rows = trace.rows
    d = trace.duration_s
    width = d / bins if d > 0 else 1.0
    counts = [0] * (bins if d > 0 else 1)
    for r in rows:
        counts[min(len(counts) - 1, int(r.t_s / width))] += 1
    hit, total = implied_hit_tokens(rows, trace.block_size)
    return {
        "source": trace.source,
        "format": trace.format,
        "rows": len(rows),
        "skipped_rows": trace.skipped,
        "duration_s": d,
        "mean_rate_rps": trace.mean_rate_rps,
        "block_size": trace.block_size,
        "rate_over_time": {"bin_s": width, "rps": [c / width for c in counts]},
        "input_tokens": _percentiles([r.input_tokens for r in rows]),
        "output_tokens": _percentiles([r.output_tokens for r in rows]),
        "sessions": len({r.session_id for r in rows if r.session_id is not None}),
        "with_hash_ids": sum(1 for r in rows if r.hash_ids),
        "implied_prefix_hit_rate": hit / total if total and any(r.hash_ids for r in rows) else None,
    }


def replay_stats(trace: Trace, windows: Sequence[TraceWindow]) -> dict[str, Any]:
    """summary.json's ``trace`` for a replay of ``trace`` in ``windows`` (the trace shape's and
    ``tokenload plan``'s; the report's "Trace replay" reads it): :func:`trace_stats`, and the
    windows where there are several (``--trace-steps``; one is the whole trace)."""
    stats = trace_stats(trace)
    if len(windows) > 1:
        stats["windows"] = [w.to_dict() for w in windows]
    return stats

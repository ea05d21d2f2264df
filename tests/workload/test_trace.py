"""Trace files (workload/trace.py): each public format read, bad rows refused with their row
number, cuts and rescaling that keep the burst shape, the prefix reuse a trace implies, and the
split of its rows across workers (loadgen/arrivals.py)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from tokenload.loadgen.arrivals import SlotSchedule
from tokenload.workload.errors import WorkloadError
from tokenload.workload.trace import (
    Trace,
    TraceRow,
    implied_hit_tokens,
    load_trace,
    parse_window,
    trace_stats,
)

# A BurstGPT header and an Azure LLM inference trace header, as the public files carry them.
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _bursty_times(n: int, seed: int) -> list[float]:
    """Arrival times with bursts: gamma gaps of shape 0.3 (CV 1.8), mean 50 ms."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.gammavariate(0.3, 0.05 / 0.3)
        out.append(t)
    return out


def write_trace(path: Path, fmt: str, n: int, seed: int = 0) -> list[tuple[float, int, int]]:
    """A trace of ``n`` rows in ``fmt``; returns (time s, input, output) per row."""
    rng = random.Random(seed)
    times = _bursty_times(n, seed)
    rows = [(t, rng.randint(20, 300), rng.randint(2, 40)) for t in times]
    if fmt == "mooncake":
        path.write_text(
            "".join(
                json.dumps(
                    {
                        "timestamp": round(t * 1000),
                        "input_length": i,
                        "output_length": o,
                        "hash_ids": [k, 10**6 + k],
                    }
                )
                + "\n"
                for k, (t, i, o) in enumerate(rows)
            )
        )
        return [(round(t * 1000) / 1000, i, o) for t, i, o in rows]
    if fmt == "burstgpt":
        lines = [BURSTGPT_HEADER] + [f"{t:.3f},ChatGPT,{i},{o},{i + o},Conversation log" for t, i, o in rows]
        path.write_text("\n".join(lines) + "\n")
        return [(round(t, 3), i, o) for t, i, o in rows]
    if fmt == "azure":
        from datetime import datetime, timedelta

        base = datetime(2023, 11, 16, 18, 0, 0)
        lines = [AZURE_HEADER]
        for t, i, o in rows:
            stamp = (base + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 7 digits
            lines.append(f"{stamp},{i},{o}")
        path.write_text("\n".join(lines) + "\n")
        return [(round(t, 6), i, o) for t, i, o in rows]
    if fmt == "jsonl":
        prev = 0.0
        out = []
        for t, i, o in rows:
            out.append(
                json.dumps({"gap_s": t - prev, "input_tokens": i, "output_tokens": o, "session_id": "s1"})
            )
            prev = t
        path.write_text("\n".join(out) + "\n")
        return rows
    assert fmt == "csv"
    lines = ["timestamp_s,input_tokens,output_tokens,hash_ids"] + [
        f"{t},{i},{o},{k} {k + 1}" for k, (t, i, o) in enumerate(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return rows


@pytest.mark.parametrize(
    ("fmt", "suffix"),
    [("mooncake", ".jsonl"), ("burstgpt", ".csv"), ("azure", ".csv"), ("jsonl", ".jsonl"), ("csv", ".csv")],
)
def test_each_format_reads_back_what_was_written(tmp_path: Path, fmt: str, suffix: str) -> None:
    path = tmp_path / f"trace{suffix}"
    written = write_trace(path, fmt, 300, seed=7)
    trace = load_trace(path)  # auto: by extension and header
    assert trace.format == fmt and len(trace.rows) == 300
    t0 = written[0][0]
    for row, (t, i, o) in zip(trace.rows, written, strict=True):
        assert row.t_s == pytest.approx(t - t0, abs=2e-6)
        assert (row.input_tokens, row.output_tokens) == (i, o)
    if fmt == "mooncake":
        assert trace.rows[3].hash_ids == (3, 10**6 + 3) and trace.block_size == 512
    if fmt == "csv":
        assert trace.rows[3].hash_ids == (3, 4)


_ROW = '{"timestamp": 1, "input_length": 5, "output_length": 2'
BAD_ROWS = [
    (_ROW + '}\n{"timestamp": 2, "input_len": 5}\n', ".jsonl", "row 2: unknown column 'input_len'"),
    (_ROW.replace('"input_length": 5', '"input_length": 0') + "}\n", ".jsonl",
     "row 1: input_length: expected an integer >= 1"),
    ("timestamp_s,input_tokens,output_tokens\n0,5,2\n1,five,2\n", ".csv",
     "row 2: input_tokens: expected an integer"),
    ('{"timestamp_s": 1, "gap_s": 1, "input_tokens": 5, "output_tokens": 2}\n', ".jsonl",
     "row 1: expected exactly one of timestamp_s and gap_s"),
    ("timestamp_s,input_tokens,output_tokens,colour\n0,5,2,red\n", ".csv", "unknown column 'colour'"),
    (f"{AZURE_HEADER}\nyesterday,5,2\n", ".csv", "row 1: TIMESTAMP: expected a date-time"),
    (_ROW + ', "hash_ids": [1, "x"]}\n', ".jsonl", "row 1: hash_ids: expected a list of integers"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "suffix", "message"), BAD_ROWS)
def test_a_bad_row_is_refused_with_its_number(tmp_path: Path, text: str, suffix: str, message: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_trace(path)


def test_burstgpt_rows_that_failed_in_the_traced_service_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    path.write_text(f"{BURSTGPT_HEADER}\n0,ChatGPT,10,5,15,x\n1,ChatGPT,10,0,10,x\n2,GPT-4,7,3,10,x\n")
    trace = load_trace(path)
    assert [r.input_tokens for r in trace.rows] == [10, 7] and trace.skipped == 1


def test_window_speed_and_rate_keep_the_burst_shape(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, "jsonl", 2000, seed=3)
    trace = load_trace(path)
    cut = trace.transformed(window=(10.0, 60.0))
    assert all(0 <= r.t_s < 50.0 for r in cut.rows) and cut.rows[0].t_s == 0.0
    assert cut.skipped == len(trace.rows) - len(cut.rows)
    fast = cut.transformed(speed=4.0)
    assert fast.duration_s == pytest.approx(cut.duration_s / 4)
    scaled = cut.transformed(rate=100.0)
    assert scaled.mean_rate_rps == pytest.approx(100.0)

    # Every gap scaled alike: the gaps' coefficient of variation (the burstiness) is unchanged.
    def cv(t: list[float]) -> float:
        gaps = [b - a for a, b in itertools.pairwise(t)]
        m = sum(gaps) / len(gaps)
        return math.sqrt(sum((g - m) ** 2 for g in gaps) / len(gaps)) / m

    assert cv(scaled.times()) == pytest.approx(cv(cut.times()), rel=1e-9) and cv(cut.times()) > 1.2
    with pytest.raises(WorkloadError, match="--trace-window"):
        parse_window("5:2")
    assert parse_window(":30") == (0.0, 30.0) and parse_window("30:") == (30.0, math.inf)


def test_the_prefix_reuse_a_trace_implies() -> None:
    from tokenload.workload.trace import TraceRow

    rows = [
        TraceRow(0.0, 100, 1, hash_ids=(1, 2)),  # nothing cached yet
        TraceRow(1.0, 100, 1, hash_ids=(1, 3)),  # block 1 (64 tokens) cached: 64
        TraceRow(2.0, 150, 1, hash_ids=(1, 2, 4)),  # block 1, then 2 seen only in part (36 tokens): 100 -> 96
        TraceRow(3.0, 64, 1, hash_ids=(1,)),  # the whole prompt cached but its last token: 63 -> 48
    ]
    hit, total = implied_hit_tokens(rows, block_size=64)
    assert total == 414 and hit == 64 + 96 + 48


def test_a_trace_splits_exactly_across_workers(tmp_path: Path) -> None:
    times = _bursty_times(1001, seed=2)
    times = [t - times[0] for t in times]
    seen: list[tuple[int, float]] = []
    for slot in range(3):
        sched = SlotSchedule(None, 0.0, 0, 100.0, slot, 3, times=times)
        while (t := sched.next()) != math.inf:
            seen.append((sched.last_index, t))
    assert sorted(i for i, _ in seen) == list(range(1001))
    assert all(t == pytest.approx(100.0 + times[i]) for i, t in seen)


def test_a_window_of_the_trace_splits_exactly_across_workers_with_its_global_rows() -> None:
    """--trace-steps: each window's rows, at their gaps from its first, split over the workers,
    each handed out under its index in the whole trace."""
    times = _bursty_times(601, seed=3)
    times = [t - times[0] for t in times]
    trace = Trace(tuple(TraceRow(t, 8, 2) for t in times), "jsonl", "t", 512)
    windows = trace.windows(3)
    assert [w.first_row for w in windows] == [0, windows[1].first_row, windows[2].first_row]
    assert windows[-1].end_row == 601 and all(
        a.end_row == b.first_row for a, b in itertools.pairwise(windows)
    )
    width = times[-1] / 3
    for w in windows:
        assert all(
            w.index * width <= times[i] < (w.index + 1) * width + 1e-9 for i in range(w.first_row, w.end_row)
        )
        assert (w.start_s, w.end_s) == (times[w.first_row], times[w.end_row - 1])
        seen: list[tuple[int, float]] = []
        for slot in range(2):
            part = times[w.first_row : w.end_row]
            sched = SlotSchedule(None, 0.0, 0, 50.0, slot, 2, times=part, first_index=w.first_row)
            while (t := sched.next()) != math.inf:
                seen.append((sched.last_index, t))
        assert sorted(i for i, _ in seen) == list(range(w.first_row, w.end_row))
        assert all(t == pytest.approx(50.0 + times[i] - w.start_s) for i, t in seen)
    assert trace.windows(1)[0].to_dict() == {
        "window": 0,
        "rows": [0, 601],
        "start_s": 0.0,
        "end_s": times[-1],
        "mean_rate_rps": 600 / times[-1],
    }
    sparse = Trace(tuple(TraceRow(t, 8, 2) for t in (0.0, 0.1, 9.0, 10.0)), "jsonl", "t", 512)
    with pytest.raises(WorkloadError, match=r"window 2 of 3 \(3.33333-6.66667 s of the trace\) holds 0 rows"):
        sparse.windows(3)


def test_a_sessions_turns_share_its_history_as_a_prefix(tmp_path: Path) -> None:
    """Rows of a session without hash_ids of their own: each turn's prompt starts with the
    previous turn's whole blocks; rows with their own hashes, or of no session, are left alone."""
    path = tmp_path / "s.jsonl"
    lines = [
        {"timestamp_s": 0.0, "input_tokens": 100, "output_tokens": 5, "session_id": "a"},
        {"timestamp_s": 0.5, "input_tokens": 90, "output_tokens": 5, "session_id": "b"},
        {"timestamp_s": 1.0, "input_tokens": 250, "output_tokens": 5, "session_id": "a"},
        {"timestamp_s": 1.5, "input_tokens": 40, "output_tokens": 5},
        {"timestamp_s": 2.0, "input_tokens": 400, "output_tokens": 5, "session_id": "a"},
        {"timestamp_s": 2.5, "input_tokens": 64, "output_tokens": 5, "session_id": "b", "hash_ids": [7]},
        {"timestamp_s": 3.0, "input_tokens": 70, "output_tokens": 5, "session_id": "a"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = load_trace(path, "jsonl", block_size=64).rows
    a1, b1, a2, plain, a3, b2, a4 = rows
    assert len(a1.hash_ids) == 2 and len(b1.hash_ids) == 2 and set(a1.hash_ids).isdisjoint(b1.hash_ids)
    # Turn 2 (250 tokens, 4 blocks): turn 1's one whole block (100 // 64), then three of its own.
    assert a2.hash_ids[:1] == a1.hash_ids[:1] and len(a2.hash_ids) == 4
    assert set(a2.hash_ids[1:]).isdisjoint(a1.hash_ids + b1.hash_ids)
    # Turn 3 (400 tokens): turn 2's three whole blocks (250 // 64), then its own.
    assert a3.hash_ids[:3] == a2.hash_ids[:3] and len(a3.hash_ids) == 7
    assert plain.hash_ids == () and b2.hash_ids == (7,)
    # A shorter turn keeps the whole blocks of its own length: 70 // 64 = 1.
    assert a4.hash_ids[:1] == a3.hash_ids[:1] and len(a4.hash_ids) == 2
    assert all(h < 0 for r in (a1, b1, a2, a3, a4) for h in r.hash_ids)
    hit, total = implied_hit_tokens(rows, 64)
    assert hit == 64 + 192 + 64 + 0 and total == sum(x["input_tokens"] for x in lines)


def test_the_trace_statistics(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    write_trace(path, "mooncake", 500, seed=1)
    stats = trace_stats(load_trace(path))
    assert stats["rows"] == 500 and stats["format"] == "mooncake"
    assert sum(stats["rate_over_time"]["rps"]) * stats["rate_over_time"]["bin_s"] == pytest.approx(500)
    # Every row's first hash is its own: nothing is reused.
    assert stats["implied_prefix_hit_rate"] == 0.0

"""StepTracker keeps, per step, what a shape asked of each request (the SLO search judges its
probes from there instead of reading requests.jsonl again after every probe)."""

from __future__ import annotations

from tokenload.loadgen.phases import StepTracker


def _rec(step: int, sent: float, ttft: float, status: str = "ok") -> dict:
    return {
        "step": step,
        "phase": "measure",
        "status": status,
        "wall_start": sent,
        "ttft_ms": ttft,
        "e2e_ms": 500.0,
        "output_tokens": 8,
        "prompt": "not kept",
    }


def test_nothing_is_kept_until_a_shape_asks() -> None:
    t = StepTracker()
    t.begin(0, None, 2.0, 100.0)
    t.measure(0, 100.0)
    t.note_completion(_rec(0, 100.5, 40.0), now=102.0)
    assert t.requests_of(0) == []


def test_kept_fields_by_step_once_each_even_when_put_off_to_the_windows_end() -> None:
    t = StepTracker()
    t.keep(("ttft_ms",))
    t.keep(("ttft_ms", "output_tokens"))  # asked again: the fields are not repeated
    t.begin(0, None, 2.0, 100.0)
    t.measure(0, 100.0)
    t.note_completion(_rec(0, 100.5, 40.0), now=102.0)
    t.note_completion(_rec(0, 100.7, 0.0, status="cancelled"))
    # A worker's clock ahead of the master's: the record waits for the window's end...
    t.note_completion(_rec(0, 105.0, 50.0), now=103.0)
    assert [r["ttft_ms"] for r in t.requests_of(0)] == [40.0, 0.0]
    t.end(0, 106.0)  # ... and is kept once, then
    rows = t.requests_of(0)
    assert [r["ttft_ms"] for r in rows] == [40.0, 0.0, 50.0]
    assert set(rows[0]) == {"step", "phase", "status", "wall_start", "ttft_ms", "output_tokens"}
    assert t.requests_of(1) == []

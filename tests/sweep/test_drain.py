"""--drain on real Locust processes (a master and a worker) against the emulator: between steps
no request starts, and the next step's clock starts only once nothing is in flight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sweep.test_sweep import sweep

#: A worker starts at most one request after the step's end before the hold reaches it (the
#: message's transit over loopback, well under this).
_TRANSIT_S = 0.25


def _run(tmp_path: Path, *extra: str) -> tuple[dict, list[dict]]:
    run_dir = tmp_path / ("drain" if extra else "plain")
    # 200-token outputs on the emulated H100 take about 1.5 s at these loads: when a 3 s step
    # ends, nearly every user has one streaming.
    out = sweep(
        "--concurrency", "4,8", "--step-duration", "3", "--warmup", "0.5", "--workers", "1",
        "--prompt-tokens", "64", "--output-tokens", "200", "--sim-args", "--profile h100-llama3.1-8b",
        "--out", str(run_dir), *extra,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    return summary, [r for r in records if r["status"] != "cancelled"]


def _sent(r: dict) -> float:
    return r["wall_start"] + (r.get("send_lag_ms") or 0.0) / 1000.0


def _ended(r: dict) -> float:
    return r["wall_start"] + (r.get("e2e_ms") or 0.0) / 1000.0


@pytest.mark.parametrize("drain", [False, True], ids=["plain", "drain"])
def test_drain_sends_nothing_between_steps_and_starts_the_next_step_idle(tmp_path: Path, drain: bool) -> None:
    summary, records = _run(tmp_path, *(["--drain"] if drain else []))
    first, second = summary["steps"]
    gap = [r for r in records if first["end"] + _TRANSIT_S < _sent(r) < second["start"]]
    # In flight when the second step's clock started.
    carried = [r for r in records if _sent(r) < second["start"] < _ended(r)]
    if not drain:
        # The control: load goes on through the settle, and the next step starts with the
        # previous one's users streaming.
        assert gap and carried, (len(gap), len(carried))
        assert first["drain"] is None
        return
    assert not gap, [(_sent(r) - first["end"]) for r in gap]
    assert not carried, [(_ended(r) - second["start"]) for r in carried]
    # The step says how long its drain took, and that it was complete.
    assert first["drain"]["left_in_flight"] == 0
    assert 0.0 < first["drain"]["s"] < 30.0
    assert second["drain"]["left_in_flight"] == 0
    # Requests were in flight when the step ended: the drain waited for them.
    assert any(_sent(r) < first["end"] < _ended(r) for r in records)

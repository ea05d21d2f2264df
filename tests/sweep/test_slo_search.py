"""The SLO capacity search (``--shape slo``) on real Locust processes against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

from tests.sweep.test_sweep import sweep


def test_the_slo_search_brackets_the_highest_rate_that_meets_the_slo(tmp_path: Path) -> None:
    # A median SLO (6 requests bound a p50) keeps probes a few seconds long; 512-token prompts
    # make TTFT climb within a few tens of requests/s on the emulated A40.
    run_dir = tmp_path / "run"
    out = sweep(
        "--shape", "slo", "--slo", "ttft_p50_ms=120", "--slo-start", "4", "--slo-max", "256",
        "--slo-resolution", "0.25", "--step-duration", "3", "--warmup", "0.2", "--workers", "1",
        "--prompt-tokens", "512", "--output-tokens", "16", "--max-in-flight", "256",
        "--out", str(run_dir),
        timeout=420,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((run_dir / "summary.json").read_text())
    search = s["search"]
    assert search["shape"] == "slo" and search["outcome"] == "found", search
    lo, hi = search["bracket"]
    assert search["slo_capacity_rps"] == lo and lo < hi <= lo * 1.25 + 1e-9
    steps = {st["index"]: st for st in s["steps"]}
    assert [p["step"] for p in search["probes"]] == sorted(steps)
    for p in search["probes"]:
        st = steps[p["step"]]
        assert st["target_rate_rps"] == p["rate_rps"]
        # Each probe's judgement is the step's own figure against the limit, on an interval that
        # holds the step's order-statistics interval (joined with the batch-means one).
        (check,) = p["checks"]
        assert check["value"] == st["ttft_ms"]["p50"]
        low, high = check["ci95"]
        os_low, os_high = st["ci95"]["ttft_ms"]["p50"]
        assert low <= os_low and high >= os_high
        expected = "pass" if high <= 120 else "fail" if low > 120 else "indeterminate"
        assert check["outcome"] == p["outcome"] == expected
        # Every probe started from an idle server: nothing was in flight when the next began.
        assert st["drain"]["left_in_flight"] == 0
    answer = steps[search["answer_step"]]
    assert answer["target_rate_rps"] == lo and answer["ttft_ms"]["p50"] <= 120
    assert f"slo search: found; {lo:g} req/s meets the SLO" in out.stdout
    # Both reports carry the answer as the capacity, and the probes.
    md = (run_dir / "report.md").read_text()
    assert f"Capacity per replica: {lo:g} req/s (target rate)" in md
    assert "### SLO search probes" in md
    assert "SLO search probes" in (run_dir / "report.html").read_text()


def test_the_slo_search_over_a_trace_replays_it_at_each_probes_rate(tmp_path: Path) -> None:
    from collections import Counter

    from tests.workload.test_trace import write_trace

    trace = tmp_path / "trace.jsonl"
    rows = write_trace(trace, "jsonl", 3000, seed=5)  # bursty: gamma gaps, CV 1.8
    run_dir = tmp_path / "run"
    # An SLO every probe meets: screens at 8 and 16 req/s (--slo-max), then 16 again in full
    # (the answer is never a screen), each a replay.
    out = sweep(
        "--shape", "slo", "--slo", "ttft_p50_ms=100000", "--trace", str(trace), "--slo-start", "8",
        "--slo-max", "16", "--step-duration", "3", "--workers", "1",
        "--out", str(run_dir), timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((run_dir / "summary.json").read_text())
    search = s["search"]
    assert search["outcome"] == "not_reached" and search["slo_capacity_rps"] == 16, search
    assert [st["target_rate_rps"] for st in s["steps"]] == [8, 16, 16]
    assert [p["screen"] for p in search["probes"]] == [True, True, False]
    recs = [
        json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()
    ]
    for st in s["steps"]:
        mine = [r for r in recs if r["step"] == st["index"] and r["status"] != "cancelled"]
        # Each probe replays the trace from its first row: its requests are the trace's first rows.
        asked = Counter((r["requested_input_tokens"], r["requested_output_tokens"]) for r in mine)
        assert asked == Counter((i, o) for _, i, o in rows[: len(mine)]), st["index"]
        # ... rescaled to the probe's rate: over its whole duration, about rate x duration rows.
        expected = st["target_rate_rps"] * (st["end"] - st["start"])
        assert abs(len(mine) - expected) <= 4 * expected**0.5 + 3, (len(mine), expected)

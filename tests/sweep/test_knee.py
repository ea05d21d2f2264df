"""The knee shape and the stop conditions, on real Locust processes against the emulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sweep.test_sweep import sweep


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_knee_search_brackets_the_saturation_point(tmp_path: Path) -> None:
    # Long prompts saturate the emulated A40 within a few users (see the demo), so the search
    # is short: probes 1, 2, 4, ... then bisection between the last good and first bad step.
    # Its steps are short (3.2 s measured, one to six requests of ~2 s each), so a step's verdict
    # can change when the step below it is run: the bracket must follow (it failed 1 run in 3).
    run_dir = tmp_path / "run"
    out = sweep(
        "--shape", "knee", "--knee-factor", "2", "--knee-resolution", "1.5", "--step-duration", "8",
        "--prompt-tokens", "4096", "--output-tokens", "64", "--workers", "1", "--out", str(run_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = _summary(run_dir)
    search = s["search"]
    assert search["shape"] == "knee" and search["outcome"] == "found", search
    lo, hi = search["last_unsaturated_concurrency"], search["first_saturated_concurrency"]
    assert lo < hi and (hi / lo <= 1.5 or hi - lo <= 1)
    by_conc = {st["concurrency"]: st for st in s["steps"]}
    probes = search["probes"]
    assert [p["concurrency"] for p in probes] == [st["concurrency"] for st in s["steps"]]
    # Each decision brackets the knee from every step's verdict so far. Without an upper end the
    # climb doubles the highest load run, with probes half a step long; with one, a full step
    # bisects the bracket.
    assert s["steps"][0]["concurrency"] == 1 and abs(s["steps"][0]["end"] - s["steps"][0]["start"] - 4) < 1
    for i, st in enumerate(s["steps"][1:], start=1):
        before, after = probes[i - 1]["bracket"]
        if after is None:
            assert st["concurrency"] == 2 * max(x["concurrency"] for x in s["steps"][:i])
            assert abs(st["end"] - st["start"] - 4) < 1
        else:
            assert before < st["concurrency"] < after
            assert abs(st["end"] - st["start"] - 8) < 1
    assert probes[-1]["bracket"] == [lo, hi]
    # The bracket is the summary's own: its verdicts and its knee say the same.
    assert by_conc[hi]["verdict"]["saturated"] and not by_conc[lo]["verdict"]["saturated"]
    assert s["knee"]["concurrency"] == hi and s["knee"]["last_unsaturated_concurrency"] == lo
    assert "knee search: found" in out.stdout
    # What the report's equivalent command reruns: the search's options as given.
    argv = search["argv"]
    assert argv[argv.index("--knee-factor") + 1] == "2.0" and argv[argv.index("--step-duration") + 1] == "8.0"
    assert "knee search: found" in (run_dir / "report.md").read_text()


def test_an_slo_broken_twice_in_a_row_stops_a_staircase(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = sweep(
        "--concurrency", "1,2,4,8,16", "--step-duration", "2", "--warmup", "0.25", "--workers", "0",
        "--stop-slo", "ttft_p50_ms=1", "--stop-slo-steps", "2",
        "--prompt-tokens", "32", "--output-tokens", "4", "--out", str(run_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = _summary(run_dir)
    assert [st["concurrency"] for st in s["steps"]] == [1, 2]
    # Each step measures its 2 s less its 0.5 s warm-up (0.25 of it): the shape keeps the boundaries within
    # Locust's 1 s tick (a boundary in the tick's last 50 ms waits for the next; ticks alone
    # measured 1 s of the 1.5).
    assert [st["measured_s"] for st in s["steps"]] == [pytest.approx(1.5, abs=0.1)] * 2
    assert "--stop-slo: 2 steps in a row" in s["search"]["stop_reason"]
    assert "stopped: --stop-slo" in out.stdout and (out.stdout + out.stderr).count("stopping: ") == 1
    assert "stopped: --stop-slo: 2 steps in a row" in (run_dir / "report.md").read_text()
    command = next(x for x in (run_dir / "report.md").read_text().splitlines() if "equivalent command" in x)
    assert "--stop-slo ttft_p50_ms=1" in command and "--rate" not in command, command


def test_the_time_budget_starts_no_step_that_would_overrun_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = sweep(
        "--concurrency", "1,2,4,8", "--step-duration", "3", "--warmup", "0.5", "--workers", "0",
        "--time-budget", "7.5", "--prompt-tokens", "32", "--output-tokens", "4", "--out", str(run_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = _summary(run_dir)
    assert [st["concurrency"] for st in s["steps"]] == [1, 2]
    # Locust ticks a shape once a second: the budget holds to that tick.
    assert s["steps"][-1]["end"] - s["steps"][0]["start"] <= 7.5 + 1.05
    assert "--time-budget" in s["search"]["stop_reason"]


def test_each_step_is_judged_on_every_request_of_its_measured_part(tmp_path: Path) -> None:
    # 200-token outputs take about 1.6 s: when a 4 s probe step (1 s warm-up) ends, a request
    # started in its measured part is still streaming for most users. The decision waits for
    # them (through a worker's reports), so what the knee search saw is what summary.json reports.
    run_dir = tmp_path / "run"
    out = sweep(
        "--shape", "knee", "--knee-start", "4", "--knee-factor", "4", "--knee-max", "16",
        "--step-duration", "8", "--probe-duration", "4", "--warmup", "1",
        "--prompt-tokens", "32", "--output-tokens", "200", "--workers", "1", "--out", str(run_dir),
        "--sim-args", "--profile h100-llama3.1-8b",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = _summary(run_dir)
    probes, steps = s["search"]["probes"], s["steps"]
    assert [p["concurrency"] for p in probes] == [st["concurrency"] for st in steps] == [4, 16]
    for probe, step in zip(probes, steps, strict=True):
        assert probe["unfinished_at_decision"] == 0 and step["unfinished_at_decision"] == 0
        assert probe["requests_ok"] == step["requests"]["ok"] > 0, (probe, step["requests"])


def test_a_precision_target_ends_a_step_once_it_is_met(tmp_path: Path) -> None:
    # --target-moe: each step ends as soon as its TTFT median is known to 10 % (the 95 %
    # interval's wider side); --step-duration (60 s) is only the longest it may run.
    run_dir = tmp_path / "run"
    out = sweep(
        "--concurrency", "4,8", "--step-duration", "60", "--warmup", "1", "--prompt-tokens", "32",
        "--output-tokens", "16", "--workers", "0", "--out", str(run_dir), "--target-moe", "ttft_p50=0.1",
        "--sim-args", "--profile h100-llama3.1-8b",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert [s["concurrency"] for s in steps] == [4, 8]
    for s in steps:
        p = s["precision"]
        assert p["target_moe"] == {"ttft_p50": 0.1} and p["ended_early"] and p["met"], p
        assert p["margin_of_error"]["ttft_p50"] <= 0.1 and "imprecise" not in s["flags"]
        assert s["end"] - s["start"] < 30  # far from the 60 s cap
        # The summary's own interval agrees with the margin the shape stopped on.
        lo, hi = s["ci95"]["ttft_ms"]["p50"]
        assert max(hi - s["ttft_ms"]["p50"], s["ttft_ms"]["p50"] - lo) <= 0.1 * s["ttft_ms"]["p50"] * 1.05

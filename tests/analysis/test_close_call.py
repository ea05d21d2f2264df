"""A verdict whose predicted gain from 2x load lies near the saturation line says it is a close
call (Thresholds.saturation_margin), on the steps of a real run: ``make demo``'s long-prompt
staircase against the emulated A40 (tests/analysis/demo_long_prompts.json says how it was made).
There the 4-user step's predicted gain is 0.219 against the 0.25 line; the ground truth
(tokenload.sim.oracle at that load) puts doubling at +28.5 %: not saturated."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tokenload.analysis.judge import judge_steps
from tokenload.analysis.thresholds import Thresholds
from tokenload.report.model import knee_sentence
from tokenload.report.tables import step_cells, verdict_sentence

DEMO = Path(__file__).with_name("demo_long_prompts.json")


def _judged(**overrides: float) -> tuple[list[dict], dict | None]:
    steps = json.loads(DEMO.read_text())["steps"]
    return judge_steps(steps, thresholds=Thresholds(**overrides))


def _predicted(step: dict) -> float:
    return next(
        e["value"] for e in step["verdict"]["evidence"] if e["metric"] == "predicted gain from 2x load"
    )


def test_a_gain_near_the_line_is_a_close_call_and_says_so() -> None:
    steps, knee = _judged()
    assert [s["verdict"]["bottleneck"] for s in steps] == ["none", "none", "memory_bandwidth", "compute"]
    assert [bool(s["verdict"].get("close_call")) for s in steps] == [False, False, True, False]
    head = steps[2]["verdict"]["evidence"][0]
    assert head["metric"] == "predicted gain from 2x load" and head["value"] == pytest.approx(
        0.219, abs=0.002
    )
    assert head["close_call"] is True
    assert "a close call: within 0.05 of the line" in head["rule"]
    # The steps either side are further from the line than the margin.
    assert abs(_predicted(steps[1]) - 0.25) >= 0.05 and abs(_predicted(steps[3]) - 0.25) >= 0.05
    assert knee is not None and knee["step"] == 2 and knee["close_call"] is True
    sentence = knee_sentence({"steps": steps, "knee": knee})
    assert sentence.startswith("Saturated at step 2 (4 users): memory_bandwidth ran out")
    assert "A close call" in sentence
    assert "(a close call" in verdict_sentence(steps[2])
    assert "close call" not in verdict_sentence(steps[3])
    assert [step_cells(s)[-1] for s in steps] == ["none", "none", "memory_bandwidth (close call)", "compute"]


def test_the_margin_moves_no_label() -> None:
    labels = [s["verdict"]["bottleneck"] for s in _judged()[0]]
    for margin in (0.0, 0.06, 0.2):
        steps, knee = _judged(saturation_margin=margin)
        assert [s["verdict"]["bottleneck"] for s in steps] == labels
        near = [i for i, s in enumerate(steps) if s["verdict"].get("close_call")]
        assert near == [i for i in (1, 2, 3) if abs(_predicted(steps[i]) - 0.25) < margin]
        assert knee is not None and knee["close_call"] is (margin > abs(0.219 - 0.25))
        assert ("A close call" in knee_sentence({"steps": steps, "knee": knee})) is knee["close_call"]


def test_the_margin_is_a_share() -> None:
    with pytest.raises(ValueError, match=r"saturation_margin: expected a share from 0 to 1, got 1\.5"):
        Thresholds(saturation_margin=1.5)


def test_the_bench_counts_saturated_or_not_by_distance_from_the_line(verdict_bench: ModuleType) -> None:
    # bench/verdict_accuracy.py's saturation_by_distance is what the margin was measured by: only
    # verdicts a predicted gain decided count, each in the band of its distance from 0.25, agreeing
    # when it and the oracle's doubling gain fall on the same side of the line.
    bench = verdict_bench

    def result(gain: float | None, truth: float | None) -> dict:
        ev = (
            [{"metric": "predicted gain from 2x load", "value": gain, "rule": ""}] if gain is not None else []
        )
        return {"evidence": [*ev, {"metric": "other", "value": 1, "rule": ""}], "oracle_doubling_gain": truth}

    bands = bench.saturation_by_distance(
        [
            result(0.22, 0.30),  # 0.03 from the line, across it from the truth: disagrees
            result(0.27, 0.40),  # 0.02 from the line, agrees
            result(0.18, 0.10),  # 0.07: agrees
            result(0.60, 0.10),  # 0.35: disagrees
            result(None, 0.10),  # decided by another signal: not counted
            result(0.10, None),  # no oracle gain: not counted
        ]
    )
    assert [(b["distance"], b["count"], b["agreed"]) for b in bands] == [
        ([0.0, 0.05], 2, 1),
        ([0.05, 0.1], 1, 1),
        ([0.1, 0.2], 0, 0),
        ([0.2, None], 1, 0),
    ]

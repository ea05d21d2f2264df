"""summary.json's workload_fit in sentences: said only where the lengths sent differ from the
workload's draws, each way with its count and share."""

from __future__ import annotations

import pytest

from tokenload.report.workload_text import fit_lines

pytestmark = pytest.mark.simulated_time


def test_nothing_is_said_when_every_draw_fit() -> None:
    assert fit_lines({}) == []
    assert fit_lines({"workload_fit": None}) == []
    fit = {"planned": 40, "redrawn_lengths": 0, "clamped_output": 0, "max_model_len": 4096}
    assert fit_lines({"workload_fit": fit}) == []


def test_each_way_the_lengths_were_changed_is_said_with_its_count() -> None:
    fit = {
        "planned": 30,
        "redrawn_lengths": 10,
        "clamped_output": 3,
        "dataset_skipped_too_long": 2,
        "dataset_skipped_empty": 0,
        "max_model_len": 2048,
    }
    redrawn, clamped, skipped = fit_lines({"workload_fit": fit})
    # A share of the draws made: 30 kept and 10 drawn again.
    assert redrawn.startswith("Lengths drawn again: 10 (25.0 %) of the workload's (input, output) draws")
    assert "max_model_len of 2048" in redrawn
    assert clamped.startswith("Outputs cut: 3 (10.0 %) dataset requests")
    assert skipped.startswith("Dataset items left out: 2 too long for the server's max_model_len of 2048")
    assert "empty" not in skipped
    unknown = fit_lines({"workload_fit": {**fit, "max_model_len": None, "clamped_output": 0}})
    assert "over the server's max_model_len," in unknown[0] and len(unknown) == 2

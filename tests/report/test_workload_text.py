"""summary.json's workload_fit in sentences: said only where the lengths sent differ from the
workload's draws, each way with its count and share."""

from __future__ import annotations

import pytest

from tokenload.report.workload_text import fit_lines, one_length_line

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


def _run(output_tokens: str, levels: tuple[int, ...] = (1, 4), **config: object) -> dict:
    steps = [{"concurrency": n, "target_rate_rps": None} for n in levels]
    return {"config": {"output_tokens": output_tokens, **config}, "steps": steps}


def test_a_closed_loop_of_one_output_length_is_said_to_depend_on_its_users_line_up() -> None:
    for spec in ("64", "fixed:64"):
        line = one_length_line(_run(spec))
        assert line is not None and fit_lines(_run(spec)) == []  # not a load other than asked
        assert line.startswith("One output length: every request asked for 64 tokens out")
        assert "--output-tokens lognormal:mean=64,sigma=0.5" in line
    # Drawn lengths, one user a step, rate steps, a workload file's lengths or the model's own
    # stop: nothing to say.
    assert one_length_line(_run("lognormal:mean=64,sigma=0.5")) is None
    assert one_length_line(_run("uniform:32-96")) is None
    assert one_length_line(_run("64", levels=(1, 1, 1))) is None
    rate = {"config": {"output_tokens": "64"}, "steps": [{"concurrency": None, "target_rate_rps": 4.0}]}
    assert one_length_line(rate) is None
    assert one_length_line(_run("64", workload_file="w.yaml")) is None
    assert one_length_line(_run("64", natural_stop=True)) is None
    assert one_length_line(_run("not a spec")) is None  # validated when the run started; not said twice

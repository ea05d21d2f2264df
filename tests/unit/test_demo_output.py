"""make demo reads like a tour: of each sub-run it shows tokenload's findings, not Locust's tables."""

from __future__ import annotations

import contextlib
import io

import pytest

from tokenload.demo import _findings
from tokenload.sweep import print_findings, print_steps


def test_the_demo_keeps_the_step_table_and_drops_locusts_tables() -> None:
    summary = {
        "steps": [
            {
                "index": 0, "concurrency": 4, "target_rate_rps": None, "requests_per_s": 3.2,
                "output_tokens_per_s": 200.0, "ttft_ms": {"p50": 20.0, "p99": 40.0}, "tpot_ms": {"p50": 7.0},
                "server": None, "verdict": {"bottleneck": "none"}, "flags": [],
            }
        ],
        "knee": None,
        "search": {"shape": "StaircaseShape"},
    }  # fmt: skip
    ours = io.StringIO()
    with contextlib.redirect_stdout(ours):
        print_steps(summary)
        print_findings(summary)
    locust = (
        "Type     Name             # reqs      # fails |    Avg     Min     Max |   req/s  failures/s\n"
        "POST     /v1/completions      96     0(0.00%) |    105      98     130 |    3.20        0.00\n"
        "Response time percentiles (approximated)\n"
    )
    shown = _findings("target: the built-in emulator\n" + locust + ours.getvalue() + "\nrun directory: x\n")
    assert "# reqs" not in shown and "percentiles" not in shown
    assert shown.lstrip().startswith("step") and "Not saturated at any step up to 4 users" in shown
    assert shown.rstrip().endswith("run directory: x")


def test_a_context_sweep_is_not_told_to_raise_the_load() -> None:
    # A walkthrough's context sweep (one user, longer prompts by step) ended with "raise the load
    # to find the knee", advice for a staircase.
    summary = {"steps": [], "knee": None, "search": {"shape": "context_sweep"}}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_findings(summary)
    assert "context sweep" in out.getvalue() and "raise the load" not in out.getvalue()
    from tokenload.analysis.thresholds import Thresholds
    from tokenload.report.model import ReportModel

    model = ReportModel(summary, [], [], Thresholds(), None, None, None, None, None, 0.0)
    assert "raise the load" not in model.knee_sentence() and "context sweep" in model.knee_sentence()
    staircase = ReportModel(
        {**summary, "search": None}, [], [], Thresholds(), None, None, None, None, None, 0.0
    )
    assert "raise the load" in staircase.knee_sentence()


def test_no_knee_names_the_highest_load_not_the_last_probe() -> None:
    # A knee search's steps are in the order it probed them (review finding).
    from tokenload.report.tables import no_knee_sentence

    probes = {
        "steps": [{"concurrency": 4}, {"concurrency": 64}, {"concurrency": 16}],
        "search": {"shape": "knee"},
    }
    assert (
        no_knee_sentence(probes)
        == "Not saturated at any step up to 64 users: raise the load to find the knee."
    )
    rates = {"steps": [{"concurrency": None, "target_rate_rps": 2.5}, {"target_rate_rps": 1.0}]}
    assert "up to 2.5 req/s" in no_knee_sentence(rates)
    assert no_knee_sentence({"steps": []}) == "Not saturated at any step: raise the load to find the knee."


def test_a_context_sweeps_steps_say_their_prompt_length_and_get_no_staircase_advice() -> None:
    # Walkthrough: both steps of `--shape context --prompt-lengths 128,512 --concurrency 1` read
    # "1 user", and the report advised "keep raising the load" under "(no knee to find)".
    from tokenload.analysis.thresholds import Thresholds
    from tokenload.report.model import ReportModel
    from tokenload.report.tables import load_label

    steps = [{"concurrency": 1, "prompt_tokens": "128"}, {"concurrency": 1, "prompt_tokens": "512"}]
    assert [load_label(s) for s in steps] == ["1 user, prompt 128", "1 user, prompt 512"]
    assert load_label({"concurrency": 4}) == "4 users"
    summary = {"steps": steps, "knee": None, "search": {"shape": "context_sweep"}}
    assert ReportModel(summary, [], [], Thresholds(), None, None, None, None, None, 0.0).knee_advice() == []
    staircase = {**summary, "search": None}
    assert ReportModel(staircase, [], [], Thresholds(), None, None, None, None, None, 0.0).knee_advice()


def test_a_context_sweeps_console_lines_and_table_name_the_prompt_length(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Walkthrough: `sweep --shape context` printed "step 0: 1 user, ..." for every length, and its
    # closing table had no prompt column.
    from tokenload.sweep import print_steps

    def step(i: int, prompt: str | None) -> dict:
        return {"index": i, "concurrency": 1, "prompt_tokens": prompt, "requests_per_s": 1.0,
                "output_tokens_per_s": 30.0, "ttft_ms": {"p50": 40.0, "p99": 41.0},
                "tpot_ms": {"p50": 29.0}, "verdict": {"bottleneck": "none"}, "flags": []}  # fmt: skip

    print_steps({"steps": [step(0, "128"), step(1, "512")]})
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:3] == ["step", "users", "prompt"]
    assert [line.split()[:3] for line in lines[1:]] == [["0", "1", "128"], ["1", "1", "512"]]
    print_steps({"steps": [step(0, None)]})  # a staircase: no prompt column
    assert "prompt" not in capsys.readouterr().out


def test_a_knee_search_says_its_bracket_and_when_the_summary_judges_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Walkthrough: "knee search: not_saturated; between 64 and None users", and "found; between 3
    # and 4 users" above a summary that judged every step unsaturated, unexplained.
    steps = [{"index": 0, "concurrency": 64, "verdict": {"bottleneck": "none"}}]
    search = {"shape": "knee", "outcome": "not_saturated", "probes": [1, 2],
              "last_unsaturated_concurrency": 64, "first_saturated_concurrency": None}  # fmt: skip
    print_findings({"steps": steps, "knee": None, "search": search})
    assert "knee search: not_saturated, not saturated up to 64 users (2 steps)" in capsys.readouterr().out
    search.update(outcome="found", last_unsaturated_concurrency=3, first_saturated_concurrency=4)
    print_findings({"steps": steps, "knee": None, "search": search})
    out = capsys.readouterr().out
    assert (
        "knee search: found, between 3 and 4 users (2 steps); judged again on the complete steps, no step"
        in out
    )


def test_no_knee_is_not_claimed_above_a_step_that_could_not_be_judged() -> None:
    # Review: a knee search stopped 'undecided' at 16 users (a lost worker) opened its report
    # with "Not saturated at any step up to 16 users: raise the load".
    from tokenload.report.tables import no_knee_sentence

    lost = {"bottleneck": "unknown", "saturated": False}
    steps = [{"index": 0, "concurrency": 4, "verdict": {"bottleneck": "none"}},
             {"index": 1, "concurrency": 16, "verdict": lost}]  # fmt: skip
    text = no_knee_sentence({"steps": steps, "search": {"shape": "knee"}})
    assert text.startswith(
        "Not saturated at any judged step up to 4 users; step 1 (16 users) could not be judged"
    )
    assert "raise the load" not in text
    steps[1]["verdict"] = {"bottleneck": "client", "saturated": False}
    assert "step 1 (16 users) could not be judged" in no_knee_sentence({"steps": steps})


def test_the_console_says_what_the_report_warns_of() -> None:
    # make demo's 256-user step (2026-12-06) was flagged drifting (no request ended in the first
    # third of its measured part, 31 in the last); the report said so, the console did not.
    step = {
        "index": 4, "concurrency": 256, "target_rate_rps": None, "requests_per_s": 26.67,
        "output_tokens_per_s": 2862.2, "ttft_ms": {"p50": 450.4, "p99": 666.8}, "tpot_ms": {"p50": 98.5},
        "server": None, "verdict": {"bottleneck": "compute"}, "flags": ["drifting"],
        "steady_state": {
            "ttft_p50_ms": [None, 630.9], "requests_per_s": [0.0, 9.69], "drifting": ["completions"]
        },
    }  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_steps({"steps": [step]})
        print_findings({"steps": [step], "knee": None})
    shown = out.getvalue()
    assert "compute (drifting)" in shown
    assert "Step 4 at 256 users was still drifting (flagged drifting: completions 0.00 -> 9.69 req/s" in shown

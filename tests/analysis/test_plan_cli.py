"""`tokenload plan`: a sweep predicted in simulated time, judged as a run, readable by `tokenload report`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenload", "plan", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plan_predicts_steps_and_writes_a_run_the_report_reads(tmp_path: Path) -> None:
    out = _plan("--concurrency", "4,16,64", "--prompt-tokens", "700", "--output-tokens", "50", "--json",
                "--step-duration", "20", "--out", str(tmp_path / "plan"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    pred = json.loads(out.stdout)
    assert pred["prediction"]["label"].startswith("prediction:")
    assert [s["concurrency"] for s in pred["steps"]] == [4, 16, 64]
    tput = [s["output_tokens_per_s"] for s in pred["steps"]]
    assert tput[0] < tput[1] < tput[2]
    assert all(s["verdict"]["decided_by"] for s in pred["steps"])
    rep = subprocess.run(
        [sys.executable, "-m", "tokenload", "report", str(tmp_path / "plan")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert (tmp_path / "plan" / "report.html").is_file()


def test_plan_bad_input_is_one_line() -> None:
    cases = [
        ["--rate", "1,x"],
        ["--concurrency", "2", "--sim-args", "--profile nope"],
        ["--concurrency", "2", "--sim-args", "--max-num-seqs 0"],
        ["--concurrency", "2", "--prompt-tokens", "u:"],
        ["--concurrency", "2", "--slo", "ttft_p42_ms=5"],
        ["--concurrency", "2", "--target-rps", "-3"],
        ["--concurrency", "2", "--target-users", "4", "--headroom", "-1"],
    ]
    for args in cases:
        out = _plan(*args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert "Traceback" not in out.stderr

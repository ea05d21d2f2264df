"""Exact prompt lengths through the target's /tokenize, measured by the server (usage.prompt_tokens),
from plain `locust -f locustfiles/...` runs against the emulator; and the fallback when the target
has no /tokenize."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import read_records, run_locust
from tokenload.serving.process import ServerProcess


@pytest.fixture(scope="module")
def sim_url():
    srv = ServerProcess(["-m", "tokenload.sim", "--port", "0", "--profile", "h100-llama3.1-8b"])
    yield srv.start()
    srv.stop()


@pytest.mark.parametrize("locustfile", ["locustfiles/completions.py", "locustfiles/chat.py"])
def test_requested_lengths_arrive_exactly(sim_url: str, tmp_path: Path, locustfile: str) -> None:
    for n in (121, 511, 2041):
        run = run_locust(
            locustfile, sim_url, tmp_path / f"run{n}", "-u", "2", "-t", "2s",
            "--prompt-tokens", str(n), "--output-tokens", "8",
        )  # fmt: skip
        assert run.returncode == 0, run.output[-2000:]
        records = read_records(run.run_dir)
        assert records and {(r["input_tokens"], r["requested_input_tokens"]) for r in records} == {(n, n)}
        assert "lengths exact (tokenize)" in run.output


def test_a_distribution_of_lengths_is_exact_per_request(sim_url: str, tmp_path: Path) -> None:
    run = run_locust("locustfiles/completions.py", sim_url, tmp_path / "run", "-u", "4", "-t", "3s",
                     "--prompt-tokens", "uniform:100-400", "--output-tokens", "8")  # fmt: skip
    records = read_records(run.run_dir)
    assert len({r["input_tokens"] for r in records}) > 5
    assert all(
        r["input_tokens"] == r["requested_input_tokens"] and 100 <= r["input_tokens"] <= 400 for r in records
    )


def test_without_tokenize_lengths_are_estimates(start_mock, tmp_path: Path) -> None:
    mock = start_mock("--ttft-ms", "5", "--itl-ms", "1")  # the mock has no /tokenize
    run = run_locust("locustfiles/completions.py", mock.url, tmp_path / "run", "-u", "1", "-t", "2s",
                     "--prompt-tokens", "64")  # fmt: skip
    records = read_records(run.run_dir)
    assert records and all(r["requested_input_tokens"] is None for r in records)
    assert "prompt lengths are estimates" in run.output


def test_bad_length_spec_is_one_line(tmp_path: Path) -> None:
    run = run_locust(
        "locustfiles/chat.py", "http://127.0.0.1:9", tmp_path / "run", "--prompt-tokens", "uniform:9-x"
    )
    assert run.returncode != 0 and "--prompt-tokens" in run.output and "Traceback" not in run.output

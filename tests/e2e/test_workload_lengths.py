"""Exact prompt lengths through the target's /tokenize, measured by the server (usage.prompt_tokens),
from plain `locust -f locustfiles/...` runs against the emulator; and the fallback when the target
has no /tokenize."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_records, run_locust
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


def test_conversations_grow_their_history(sim_url: str, tmp_path: Path) -> None:
    run = run_locust(
        "locustfiles/conversation.py", sim_url, tmp_path / "run", "-u", "2", "-t", "12s",
        "--workload", str(ROOT / "locustfiles/workloads/conversation.yaml"),
    )  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    records = [r for r in read_records(run.run_dir) if r["status"] == "ok"]
    by_turn: dict[str, list[int]] = {}
    for r in records:
        by_turn.setdefault(r["name"], []).append(r["input_tokens"])
    assert {"turn 1", "turn 2", "turn 3"} <= set(by_turn)
    # Each turn sends the whole history: prompts grow turn by turn (user turn + the 48-token reply).
    means = [sum(v) / len(v) for _, v in sorted(by_turn.items())]
    assert all(b > a + 48 for a, b in itertools.pairwise(means)), means
    assert "turn 1" in run.output  # the LLM table has a row per turn


def test_shared_prefix_and_length_files(sim_url: str, tmp_path: Path) -> None:
    for name in ("shared_prefix", "lengths"):
        run = run_locust(
            "locustfiles/completions.py", sim_url, tmp_path / name, "-u", "2", "-t", "3s",
            "--workload", str(ROOT / f"locustfiles/workloads/{name}.yaml"),
        )  # fmt: skip
        records = read_records(run.run_dir)
        assert records and all(r["status"] == "ok" for r in records), run.output[-2000:]
        assert all(r["input_tokens"] == r["requested_input_tokens"] for r in records)


def test_a_bad_workload_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload:\n  kind: synthetic\n  input_tokenz: 5\n")
    run = run_locust("locustfiles/chat.py", "http://127.0.0.1:9", tmp_path / "run", "--workload", str(bad))
    assert run.returncode != 0
    assert "input_tokenz" in run.output and "Traceback" not in run.output


def test_a_workload_the_user_cannot_drive_ends_the_run_nonzero(sim_url: str, tmp_path: Path) -> None:
    # The plain chat user cannot hold conversations: one line, a non-zero exit, no traceback.
    run = run_locust(
        "locustfiles/chat.py", sim_url, tmp_path / "run", "-u", "1", "-t", "10s",
        "--workload", str(ROOT / "locustfiles/workloads/conversation.yaml"),
    )  # fmt: skip
    assert run.returncode == 2, run.output[-2000:]
    assert "new_conversation" in run.output and "Traceback" not in run.output


def test_the_context_sweep_gives_each_step_its_exact_prompt_length(sim_url: str, tmp_path: Path) -> None:
    run = run_locust(
        "locustfiles/completions.py,locustfiles/context_sweep.py", sim_url, tmp_path / "run",
        "--prompt-lengths", "121,511", "--concurrency", "1", "--step-duration", "3", "--warmup", "0.5",
        "--output-tokens", "8",
    )  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    steps = json.loads((run.run_dir / "summary.json").read_text())["steps"]
    assert [(s["prompt_tokens"], s["concurrency"]) for s in steps] == [("121", 1), ("511", 1)]
    records = [r for r in read_records(run.run_dir) if r["step"] is not None]
    assert {(r["step"], r["input_tokens"]) for r in records} == {(0, 121), (1, 511)}
    assert all(r["input_tokens"] == r["requested_input_tokens"] for r in records)
    # Longer prompts, longer prefills: TTFT grows with the prompt; the steps are separate series.
    assert steps[1]["ttft_ms"]["p50"] > steps[0]["ttft_ms"]["p50"]
    # "client": a step flagged client_bound, which the host decides (a busy CI machine).
    assert all(s["verdict"]["bottleneck"] in ("none", "client") for s in steps)

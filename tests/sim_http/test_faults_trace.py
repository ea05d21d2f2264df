"""Fault injection through a real Locust run, and the --trace ground truth the client is judged by."""

from __future__ import annotations

import statistics
from pathlib import Path

from tests.conftest import locust_request_count, read_records, run_locust
from tests.sim_http.conftest import http_json


def test_injected_faults_are_classified(start_sim, tmp_path: Path) -> None:
    sim = start_sim(
        "--profile", "h100-llama3.1-8b", "--seed", "7", "--http-500-rate", "0.1", "--http-429-rate", "0.1",
        "--disconnect-rate", "0.1", "--malformed-rate", "0.1", "--error-event-rate", "0.1",
        "--fault-after-tokens", "4",
    )  # fmt: skip
    run = run_locust(
        "locustfiles/completions.py", sim.url, tmp_path / "run", "-u", "8", "-r", "8", "-t", "5s",
        "--prompt-tokens", "16", "--output-tokens", "16",
    )  # fmt: skip
    records = read_records(run.run_dir)
    classes = {r["failure_class"] for r in records}
    assert {None, "http_5xx", "http_429", "truncated", "malformed_stream", "error_event"} <= classes, classes
    assert (
        len(records)
        == locust_request_count(run.output)
        == http_json(sim.url + "/sim/stats")[1]["requests_seen"]
    )


def test_stall_fault(start_sim, tmp_path: Path) -> None:
    sim = start_sim(
        "--profile", "h100-llama3.1-8b", "--stall-rate", "0.5", "--stall-s", "2", "--fault-after-tokens", "4"
    )
    run = run_locust(
        "locustfiles/completions.py", sim.url, tmp_path / "run", "-u", "4", "-t", "4s",
        "--prompt-tokens", "16", "--output-tokens", "16", "--stall-timeout", "0.5",
    )  # fmt: skip
    records = read_records(run.run_dir)
    assert {r["failure_class"] for r in records} == {None, "stall_timeout"}


def test_trace_is_ground_truth_for_the_client(start_sim, tmp_path: Path) -> None:
    sim = start_sim("--profile", "a40-qwen2.5-7b")
    run = run_locust(
        "locustfiles/completions.py", sim.url, tmp_path / "run", "-u", "16", "-r", "16", "-t", "5s",
        "--prompt-tokens", "64", "--output-tokens", "32",
    )  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    records = [r for r in read_records(run.run_dir) if r["status"] == "ok"]
    traces = {t["request_id"]: t for t in sim.traces()}
    assert len(traces) == len(records) > 20
    lag_ms, tpot_err = [], []
    for r in records:
        t = traces[r["response_id"]]
        assert t["tokens_sent"] == r["output_tokens"] == 32
        assert t["prompt_tokens"] == r["input_tokens"]
        lag_ms.append((r["start_monotonic_s"] + r["ttft_ms"] / 1000 - t["first_token_sent_s"]) * 1000)
        server_tpot = (t["last_token_sent_s"] - t["first_token_sent_s"]) / 31 * 1000
        tpot_err.append(r["tpot_ms"] - server_tpot)
    assert min(lag_ms) > -0.01  # never before the server wrote it
    assert statistics.median(lag_ms) < 2.0
    assert abs(statistics.median(tpot_err)) < 1.0
    # The engine's own times are in the trace too: TTFT = queue + prefill as vLLM defines them.
    t = next(iter(traces.values()))
    assert t["arrival_s"] <= t["first_scheduled_s"] <= t["first_token_s"] <= t["last_token_s"]

"""`tokenload sweep`: argument checks before any load, and a real staircase run (Locust master and
worker processes against the emulator) producing the documented summary.json."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, read_records
from tokenload.serving.process import ServerProcess


def sweep(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tokenload", "sweep", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--concurrency", ""], "--concurrency: expected a list"),
        (["--concurrency", "1,-2"], "--concurrency: expected positive integers"),
        (["--concurrency", "8:2:x2"], "--concurrency: expected 1 <= start <= stop"),
        (["--step-duration", "-1"], "--step-duration: expected a positive number"),
        (["--warmup", "40", "--step-duration", "30"], "--warmup: 40 s leaves nothing"),
        (["--prompt-tokens", "0"], "--prompt-tokens: expected an integer >= 1"),
        (["--workers", "-1"], "--workers"),
        (["--host", "ftp://x"], "--host: expected an http:// or https:// URL"),
        (["--host", "http://127.0.0.1:PORT"], "--host: cannot reach"),
        (["--shape", "rate", "--rate", "-5"], "--rate: expected positive request rates"),
        (["--shape", "rate", "--rate", ""], "--rate: expected a list"),
        (["--shape", "rate", "--rate", "4:1:x2"], "--rate: expected 0 < start <= stop"),
        (["--shape", "rate", "--arrival", "gamma:0"], "--arrival: expected gamma:B"),
        (["--shape", "rate", "--arrival", "weibull"], "--arrival: expected constant, poisson or gamma"),
        (["--shape", "rate", "--max-in-flight", "0"], "--max-in-flight: expected a positive integer"),
        (["--shape", "knee", "--knee-factor", "1"], "--knee-factor: expected a factor > 1"),
        (["--shape", "knee", "--knee-max", "0"], "--knee-max: expected a positive integer"),
        (["--stop-slo", "ttft_p95=5"], "--stop-slo:"),
        (["--stop-error-rate", "2"], "--stop-error-rate: expected a share from 0 to 1"),
        (["--time-budget", "0"], "--time-budget: expected a positive number of seconds"),
        (["--shape", "context", "--prompt-lengths", "121,x"], "--prompt-lengths: "),
        (["--knee-resolution", "x"], "--knee-resolution: expected a factor > 1, got 'x'"),
        (["--prometheus-url", "ftp://x"], "--prometheus-url: "),
        (["--gpu-peaks", "bad"], "--gpu-peaks: expected FLOPS,BYTES_PER_S"),
        (["--gpu-peaks", "1,-2"], "--gpu-peaks: expected positive numbers"),
        (["--metrics-url", "ftp://x/metrics"], "--metrics-url: expected an http(s) URL"),
        (
            ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-selector", "{job=}"],
            "--prometheus-selector: ",
        ),
        # Walkthrough: a prompt the emulator's context cannot hold ran, wrote no summary, exit 0.
        (["--prompt-tokens", "40000"], "--prompt-tokens/--output-tokens: 40000 + 64 tokens at the least"),
        (
            ["--shape", "context", "--prompt-lengths", "128,9000", "--sim-args=--max-model-len 8192"],
            "--prompt-lengths/--output-tokens: 9000 + 64 tokens at the least, more than the emulator's "
            "max_model_len of 8192",
        ),
        # argparse takes a value that starts with '-' for a flag: the line says what to write.
        (
            ["--sim-args", "--profile"],
            "--sim-args: expected one argument (a value that starts with '-' goes after '='",
        ),
    ],
)
def test_bad_arguments_fail_before_any_load(args: list[str], needle: str, tmp_path: Path) -> None:
    args = [a.replace("PORT", str(_closed_port())) for a in args]
    out = sweep(*args, "--out", str(tmp_path / "run"), timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert not (tmp_path / "run").exists()  # nothing was started


def test_a_run_that_measured_nothing_is_not_a_success(tmp_path: Path) -> None:
    # Lengths that fit the context only in the far tail: the run starts, the worker's 100 draws
    # in a row do not fit, and it ends with no summary (this used to exit 0), or, when the step's
    # clock started before the worker was gone (it starts as soon as the user runs), with a step
    # in which no request ended.
    out = sweep("--concurrency", "1", "--prompt-tokens", "lognormal:mean=40000,sigma=0.05",
                "--step-duration", "5", "--out", str(tmp_path / "run"), timeout=120)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "100 draws in a row exceed the model's max_model_len of 32768" in out.stdout + out.stderr
    why = (
        "no request ended in any step" if (tmp_path / "run" / "summary.json").exists() else "no summary.json"
    )
    assert out.stderr.strip().splitlines()[-1] == (
        f"tokenload sweep: the run ended before it measured anything ({why}; the reason is logged above)"
    )


def test_a_host_given_with_v1_is_told_to_drop_it(tmp_path: Path) -> None:
    from tokenload.sweep import SweepError, _reach

    with ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp_path / "sim.log") as sim:
        with pytest.raises(
            SweepError, match=rf"answered HTTP 404 \(.*drop the /v1, --host {re.escape(sim.url)}\)$"
        ):
            _reach(sim.url + "/v1")
        _reach(sim.url)  # the base URL is fine


def test_a_server_still_loading_is_waited_for_and_not_hammered(tmp_path: Path) -> None:
    # Walkthrough: against a server whose /health answered 503 (its model loading), one user sent
    # 7,169 failing requests in a 3 s step (~2,400 a second): the sweep neither waited nor paused.
    from tokenload.sweep import SweepError, _wait_ready

    with ServerProcess(
        ["-m", "tokenload.sim", "--port", "0", "--startup-delay-s", "30"], log_path=tmp_path / "sim.log"
    ) as sim:
        with pytest.raises(SweepError, match=r"--wait-ready: .*/health still answered HTTP 503 after 1 s"):
            _wait_ready(sim.url, 1.0)
        # Not waited for (--wait-ready 0): the users that are turned away pause (0.05 s doubling
        # to 1 s) instead of asking again at once.
        run_dir = tmp_path / "run"
        out = sweep("--host", sim.url, "--wait-ready", "0", "--concurrency", "2", "--step-duration", "4",
                    "--warmup", "1", "--workers", "0", "--out", str(run_dir), timeout=120)  # fmt: skip
        records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
        assert records and all(r["http_status"] == 503 for r in records), (
            out.stdout[-2000:] + out.stderr[-2000:]
        )
        assert len(records) <= 2 * 12, len(records)  # 0.05 + 0.1 + ... + 1 + 1 s over ~5 s: ~9 each
    # Waited for: the emulator the sweep starts loads for 3 s, then every request succeeds.
    run_dir = tmp_path / "ready"
    out = sweep("--sim-args=--startup-delay-s 3", "--concurrency", "1", "--step-duration", "3",
                "--warmup", "1", "--workers", "0", "--out", str(run_dir), timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "(HTTP 503: loading; --wait-ready)" in out.stdout
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" for r in records), {r["failure_class"] for r in records}


def test_an_open_loop_ends_while_its_users_still_make_prompts(tmp_path: Path) -> None:
    # Walkthrough: with a slow /tokenize (0.5 s, one call at a time), each of the 512 users of a
    # rate step made its first prompt at start, and the run's end waited for every one of them:
    # 127 s of nothing after a 4 s step. The report then said "Not saturated" with no word of
    # the arrivals that had waited for a free user. (Bounded by the subprocess timeout: a run
    # that hangs fails here.)
    run_dir = tmp_path / "run"
    out = sweep("--sim-args=--tokenize-delay-s 0.5", "--shape", "rate", "--rate", "4", "--step-duration",
                "4", "--warmup", "1", "--workers", "0", "--out", str(run_dir), timeout=90)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # One prompt made every 0.5 s (the emulator answers /tokenize in turn), 4 arrivals a second:
    # most arrivals wait for a user whose prompt is ready.
    step = json.loads((run_dir / "summary.json").read_text())["steps"][0]
    assert "pool_exhausted" in step["flags"], step["flags"]
    assert "(flagged pool_exhausted" in (run_dir / "report.md").read_text()
    assert "(pool_exhausted)" in out.stdout


def test_a_run_directory_with_a_comma_is_refused_before_any_load(tmp_path: Path) -> None:
    # Locust reads -f as a comma-separated list: the run's locustfile there would not be found.
    out = sweep("--out", str(tmp_path / "a,b"), timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out: expected a path without commas" in lines[0], out.stderr
    assert not (tmp_path / "a,b").exists()


def test_a_run_directory_that_holds_a_run_is_refused(tmp_path: Path) -> None:
    # Walkthrough (2026-12-05): a second sweep into the same --out appended its records to the
    # first one's requests.jsonl (22 records for a 1-step summary).
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "requests.jsonl").write_text("{}\n")
    out = sweep("--concurrency", "1", "--out", str(tmp_path / "old"))
    assert out.returncode == 2, out.stdout + out.stderr
    said = f"--out: {tmp_path / 'old'} already holds a run (requests.jsonl); give a new directory"
    assert out.stderr.strip() == f"tokenload sweep: {said}"
    assert (tmp_path / "old" / "requests.jsonl").read_text() == "{}\n"


@pytest.mark.parametrize("workers", [0, 1])
def test_staircase_against_the_emulator(tmp_path: Path, workers: int) -> None:
    run_dir = tmp_path / "run"
    out = sweep(
        "--concurrency", "1,8", "--step-duration", "4", "--warmup", "1", "--prompt-tokens", "20",
        "--workers", str(workers), "--out", str(run_dir), "--metrics-interval", "0.5",
        "--stall-timeout", "29", "--sim-args", "--profile h100-llama3.1-8b",
        # Options from their variables, as a pod sets them; the flag wins over the variable.
        env={"TOKENLOAD_OUTPUT_TOKENS": "24", "TOKENLOAD_TTFT_TIMEOUT": "77",
             "TOKENLOAD_PROMPT_TOKENS": "999", "TOKENLOAD_SERVER_MAX_NUM_SEQS": "256"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["schema_version"] == 3
    assert summary["server_max_num_seqs"] == 256  # kept for the report's verdicts
    # Walkthrough: without --model, the model the run sent to was recorded nowhere.
    assert summary["model"] == "meta-llama/Llama-3.1-8B-Instruct" and summary["config"]["model"] == ""
    # Every run option reaches the Locust processes, not only the ones the sweep once listed.
    config = summary["config"]
    assert (config["stall_timeout_s"], config["ttft_timeout_s"]) == (29.0, 77.0)
    assert (config["prompt_tokens"], config["output_tokens"]) == ("20", "24")
    assert config["endpoints"] == ["/v1/completions"]  # the sweep's default --endpoint
    # The report's command reruns the emulator by its arguments, not the port it happened to have.
    assert config["target_emulator"] == "tokenload sim --profile h100-llama3.1-8b"
    line = next(x for x in (run_dir / "report.md").read_text().splitlines() if "equivalent command" in x)
    assert "`tokenload sweep '--sim-args=--profile h100-llama3.1-8b' --concurrency 1,8 " in line, line
    # Every option the run was given, the variables' included (they were dropped before).
    for given in ("--step-duration 4.0", "--ttft-timeout 77.0", "--stall-timeout 29.0", "--output-tokens 24",
                  "--metrics-interval 0.5", "--server-max-num-seqs 256"):  # fmt: skip
        assert given in line, (given, line)
    steps = summary["steps"]
    assert [s["concurrency"] for s in steps] == [1, 8]
    for s in steps:
        assert s["start"] < s["measure_start"] < s["end"]
        assert s["requests"]["ok"] > 0 and s["requests"]["failed"] == 0
        for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert set(s[m]) == {"mean", "p50", "p90", "p95", "p99", "max"} and s[m]["p50"] > 0
        assert s["output_tokens_per_s"] > 0 and s["requests_per_s"] > 0
        assert s["server"]["requests_running"]["max"] <= s["concurrency"]
        assert set(s["client"]) == {
            "cpu_percent_max",
            "loop_lag_ms_p95",
            "loop_lag_ms_p99",
            "send_lag_ms_p99",
            "coalesced_first_share",
            "coalesced_first_late_share",
            "coalesced_first_late_ms_max",
            "bound_by",
        }
        assert 0.0 <= s["client"]["coalesced_first_late_share"] <= s["client"]["coalesced_first_share"] <= 1.0
        assert len(s["steady_state"]["ttft_p50_ms"]) == 2
        assert ("drifting" in s["flags"]) == bool(s["steady_state"]["drifting"])
        assert ("client_bound" in s["flags"]) == bool(s["client"]["bound_by"])
    assert steps[0]["end"] <= steps[1]["start"]
    # More users, more throughput, and requests queued behind each other's prefills.
    assert steps[1]["output_tokens_per_s"] > 3 * steps[0]["output_tokens_per_s"]
    # Every request the emulator served is a record; none was abandoned at the end.
    records = read_records(run_dir)
    traces = (run_dir / "server_trace.jsonl").read_text().splitlines()
    assert len(records) == len(traces) and all(r["status"] == "ok" for r in records)
    assert {r["requested_output_tokens"] for r in records} == {24}
    # Requests started in a step's measured part are that step's; the rest are outside every step.
    measured = sum(s["requests"]["ok"] for s in steps)
    assert measured == sum(1 for r in records if r["phase"] == "measure")
    # Every request was planned once (a user stopped between planning and sending may leave one
    # planned, unsent); a fixed length that fits is never drawn again.
    fit = summary["workload_fit"]
    assert len(records) <= fit["planned"] <= len(records) + 8, (fit, len(records))
    assert fit["redrawn_lengths"] == 0 and fit["clamped_output"] == 0
    assert "Lengths drawn again" not in out.stdout
    assert (run_dir / "steps.csv").read_text().startswith("index,concurrency")
    assert "TTFT p50" in out.stdout and str(run_dir) in out.stdout
    # The shape ramps (and stops its users) fast on purpose: Locust's warning about it is not
    # shown (#20 item 7). Before, every sweep ended with it, from the drain's rate.
    assert "spawn rate is very high" not in out.stdout + out.stderr
    if workers == 0:
        # The twin's replica plan: `tokenload plan` of the same workload and profile sizes the
        # same target within one replica of what `tokenload report` says of the real run.
        sizing = ["--target-rps", "200", "--slo", "ttft_p95_ms=1000"]
        report = subprocess.run(
            [sys.executable, "-m", "tokenload", "report", str(run_dir), *sizing],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert report.returncode == 0, report.stderr
        measured = int(re.search(r"Replicas for the target: .* = (\d+)\.", report.stdout).group(1))
        predicted = subprocess.run(
            [sys.executable, "-m", "tokenload", "plan", "--concurrency", "1,8", "--step-duration", "4",
             "--warmup", "1", "--prompt-tokens", "20", "--output-tokens", "24",
             "--sim-args", "--profile h100-llama3.1-8b", "--json", *sizing],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert predicted.returncode == 0, predicted.stderr
        plan = json.loads(predicted.stdout)
        assert abs(plan["replicas"]["replicas"] - measured) <= 1, (plan["replicas"], report.stdout)
        assert plan["slo_capacity"]["load"] == 8


def test_lengths_drawn_again_are_counted_and_said(tmp_path: Path) -> None:
    """Lognormal outputs (CV ~0.5) against a server whose max_model_len cuts 40 % of them:
    the draws that did not fit are drawn again (no request is refused for its length), and the
    count comes from the worker process to summary.json, the console and both reports. Before,
    the planner counted them and nothing read the count: the lengths sent were silently the
    asked distribution without its tail."""
    run_dir = tmp_path / "run"
    out = sweep(
        "--concurrency", "4", "--step-duration", "3", "--warmup", "1", "--prompt-tokens", "256",
        "--output-tokens", "lognormal:mean=100,sigma=0.5", "--workers", "1", "--out", str(run_dir),
        "--sim-args", "--profile h100-llama3.1-8b --max-model-len 356",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    fit = json.loads((run_dir / "summary.json").read_text())["workload_fit"]
    records = read_records(run_dir)
    assert records and all(r["requested_output_tokens"] + 256 <= 356 for r in records)
    assert all(r["status"] == "ok" for r in records)
    assert fit["max_model_len"] == 356 and len(records) <= fit["planned"] <= len(records) + 4
    # P(lognormal(mean 100, sigma 0.5) > 100) is about 0.4: two redraws for three plans on
    # average, none in 20 plans about once in 10^4 runs.
    assert fit["planned"] >= 20 and fit["redrawn_lengths"] > 0, fit
    said = f"Lengths drawn again: {fit['redrawn_lengths']:,} ("
    assert said in out.stdout and "max_model_len of 356" in out.stdout
    assert said in (run_dir / "report.md").read_text()
    assert said in (run_dir / "report.html").read_text()


def test_step_output_rate_counts_tokens_as_they_arrive(tmp_path: Path) -> None:
    """Requests that outlive their step (lognormal outputs, CV ~0.5, 2-17 s against 6 s measured
    parts), counted by a worker process (a phase message opens and closes its measured spans):
    the client's output tokens/s of a step is the server's generation-token counter over the
    same part. Both count the same tokens; what separates them is dating at the part's edges (a
    scrape's round trip, chunks in flight, the phase message's way to the worker: milliseconds
    against 6 s), so 5 % holds with room; counting each request's tokens in the step it ended
    in, as before summary.json version 3, missed by 10-50 % in such staircases."""
    run_dir = tmp_path / "run"
    out = sweep(
        "--concurrency", "4,16", "--step-duration", "8", "--warmup", "2", "--prompt-tokens", "256",
        "--output-tokens", "lognormal:mean=600,sigma=0.5", "--workers", "1",
        "--out", str(run_dir), "--sim-args", "--profile h100-llama3.1-8b",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    steps = json.loads((run_dir / "summary.json").read_text())["steps"]
    assert len(steps) == 2
    for s in steps:
        server = s["server"]["generation_tokens"]["rate_per_s"]
        assert s["output_tokens_per_s"] == pytest.approx(server, rel=0.05), (s["index"], server)
        assert s["server"]["scraped_s"] == pytest.approx(s["measured_s"], abs=0.2)
    records = read_records(run_dir)
    assert all(isinstance(r["measured_tokens_by_step"], dict) for r in records if r["status"] == "ok")

"""`tokenload plan`: a sweep predicted in simulated time, judged as a run, readable by `tokenload report`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
        ["--concurrency", "2", "--target-users", "4", "--headroom", "20"],
        ["--concurrency", "2", "--prompt-tokens", "100000"],  # never fits the context: not a 0 tok/s knee
        ["--concurrency", "2", "--step-duration", "0"],
        # Walkthrough: a fleet or a fault in --sim-args was ignored, its label kept in the output.
        ["--concurrency", "2", "--sim-args", "--replicas 2 --routing weighted:9,1"],
        ["--concurrency", "2", "--sim-args", "--http-500-rate 0.5"],
        # Review: prompts no longer than the shared prefix, refused as a workload file's are.
        ["--concurrency", "2", "--prefix-tokens", "512", "--prompt-tokens", "128"],
    ]
    for args in cases:
        out = _plan(*args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert "Traceback" not in out.stderr
    assert (
        "--step-duration" in _plan("--concurrency", "2", "--step-duration", "0").stderr
    )  # the flag, by name
    # A spread the context cannot hold is named by plan's own options, not the workload file's.
    wide = _plan("--concurrency", "2", "--prompt-tokens", "normal:40000,100").stderr
    assert "--prompt-tokens/--output-tokens: 100 draws in a row exceed" in wide, wide


def test_what_if_is_the_same_sweep_run_with_the_changed_settings(tmp_path: Path) -> None:
    """A what-if (--set) is the emulator run with that setting: its steps equal a plan of the
    same sweep given the setting in --sim-args, and relaxing the KV cache of a KV-bound server
    (more of the GPU's memory, an FP8 cache) raises its throughput at the top step while a
    tighter scheduler cap lowers it."""
    base = ["--concurrency", "8,48", "--prompt-tokens", "1000", "--output-tokens", "300",
            "--step-duration", "30", "--seed", "3", "--json"]  # fmt: skip
    tight = "--gpu-memory-utilization 0.42 --max-model-len 8192"
    out = _plan(*base, "--sim-args", tight, "--set", "max_num_seqs=4", "--set", "gpu_memory_utilization=0.6",
                "--set", "kv_cache_dtype=fp8", "--set", "gpu=h100-llama3.1-8b")  # fmt: skip
    assert out.returncode == 0, out.stderr
    pred = json.loads(out.stdout)
    rows = {w["set"]: w for w in pred["what_if"]}
    assert list(rows) == [
        "(as is)",
        "max_num_seqs=4",
        "gpu_memory_utilization=0.6",
        "kv_cache_dtype=fp8",
        "gpu=h100-llama3.1-8b",
    ]
    assert rows["max_num_seqs=4"]["settings"] == {"max_num_seqs": "4"}
    as_is = [s["output_tokens_per_s"] for s in rows["(as is)"]["steps"]]
    assert as_is == [s["output_tokens_per_s"] for s in pred["steps"]]

    direct = _plan(*base, "--sim-args", tight + " --max-num-seqs 4")
    assert direct.returncode == 0, direct.stderr
    direct_steps = json.loads(direct.stdout)["steps"]
    assert [s["output_tokens_per_s"] for s in rows["max_num_seqs=4"]["steps"]] == [
        s["output_tokens_per_s"] for s in direct_steps
    ]
    assert [s["ttft_ms_p50"] for s in rows["max_num_seqs=4"]["steps"]] == [
        s["ttft_ms"]["p50"] for s in direct_steps
    ]

    # kv_cache_dtype=fp8 is the profile with one byte per cached element, run directly.
    from tokenload.sim.profile import load_profile

    a40 = load_profile("a40-qwen2.5-7b")
    fp8 = tmp_path / "fp8.yaml"
    model = a40.model.model_copy(update={"kv_bytes_per_element": 1})
    fp8.write_text(yaml.safe_dump(a40.model_copy(update={"model": model}).model_dump(mode="json")))
    direct_fp8 = _plan(*base, "--sim-args", f"--profile {fp8} {tight}")
    assert direct_fp8.returncode == 0, direct_fp8.stderr
    assert [s["output_tokens_per_s"] for s in rows["kv_cache_dtype=fp8"]["steps"]] == [
        s["output_tokens_per_s"] for s in json.loads(direct_fp8.stdout)["steps"]
    ]

    top = {k: w["steps"][-1]["output_tokens_per_s"] for k, w in rows.items()}
    assert top["gpu_memory_utilization=0.6"] > 1.2 * top["(as is)"], top
    assert top["kv_cache_dtype=fp8"] > 1.2 * top["(as is)"], top
    assert top["max_num_seqs=4"] < top["(as is)"], top
    # An H100's figures (5x the bandwidth, 80 GB) with the A40's fitted efficiencies: far more.
    assert top["gpu=h100-llama3.1-8b"] > 2 * top["(as is)"], top


def test_what_if_bad_input_is_one_line() -> None:
    cases = {
        "nope=1": "unknown setting",
        "max_num_seqs": "KEY=VALUE",
        "max_num_seqs=abc": "max_num_seqs=abc: Input should be a valid integer",
        "max_num_seqs=0": "max_num_seqs=0: Input should be greater than 0",
        "kv_cache_dtype=int3": "kv_cache_dtype",
        "gpu=nope": "gpu=nope: unknown profile 'nope'",
        "tensor_parallel_size=2": "not modelled",
        "max_num_seqs=2,max_num_seqs=4": "twice",
    }
    for text, needle in cases.items():
        out = _plan("--concurrency", "2", "--step-duration", "5", "--set", text)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, (text, out.stderr)
        assert lines[0].startswith("tokenload plan: --set") and needle in lines[0], (text, lines)


def test_a_planned_run_reports_as_a_prediction_with_its_what_ifs(tmp_path: Path) -> None:
    out = _plan("--concurrency", "4,16", "--step-duration", "10", "--set", "max_num_seqs=2",
                "--out", str(tmp_path / "plan"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "what if" in out.stdout and "max_num_seqs=2" in out.stdout
    rep = subprocess.run(
        [sys.executable, "-m", "tokenload", "report", str(tmp_path / "plan"), "--slo", "ttft_p95_ms=1000"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    # The terminal says it too, and a predicted capacity is not called measured (walkthrough).
    assert rep.stdout.startswith("Prediction, not a measurement"), rep.stdout[:200]
    capacity = next(line for line in rep.stdout.splitlines() if line.startswith("Capacity per replica"))
    assert capacity.endswith("output tokens/s predicted."), capacity
    for name in ("report.md", "report.html"):
        text = (tmp_path / "plan" / name).read_text()
        assert "Prediction, not a measurement" in text and "a40-qwen2.5-7b" in text, name
        assert "measurement: prediction:" not in text, name  # said once
        assert "What if (predicted)" in text and "max_num_seqs=2" in text, name


def test_a_plans_lengths_and_steps_default_as_a_sweeps() -> None:
    """`tokenload plan --concurrency 1,8,32` predicts `tokenload sweep --concurrency 1,8,32`: the
    same default lengths, step duration and warm-up (the sweep's, from the option table)."""
    from tokenload.loadgen.option_table import run_defaults
    from tokenload.plan import build_parser

    args = build_parser().parse_args(["--concurrency", "1,8,32"])
    run = run_defaults()
    assert (args.prompt_tokens, args.output_tokens) == (run["prompt_tokens"], run["output_tokens"])
    assert (args.step_duration, args.warmup) == (run["step_duration"], run["warmup"])


def test_a_plan_judges_with_the_cap_the_user_set(tmp_path: Path) -> None:
    # Found by a new-user walkthrough: with --max-num-seqs 32 the 64-user step ran 32 with the
    # rest waiting and was called memory_bandwidth; the plan knows the cap the user set, as a run
    # knows the one --server-max-num-seqs gives, and the report of its run directory keeps it.
    out = _plan("--sim-args=--max-num-seqs 32", "--concurrency", "16,64", "--step-duration", "20", "--json",
                "--out", str(tmp_path / "plan"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    top = json.loads(out.stdout)["steps"][-1]
    assert top["server"]["requests_running"]["max"] == 32
    assert top["verdict"]["bottleneck"] == "scheduler_limit", top["verdict"]
    assert json.loads((tmp_path / "plan" / "summary.json").read_text())["server_max_num_seqs"] == 32
    what_if = _plan("--concurrency", "16,64", "--step-duration", "20", "--json", "--set", "max_num_seqs=32")
    assert what_if.returncode == 0, what_if.stderr
    row = json.loads(what_if.stdout)["what_if"][1]
    assert row["steps"][-1]["bottleneck"] == "scheduler_limit", row


def test_a_plans_report_command_judges_as_the_plan_did(tmp_path: Path) -> None:
    # Walkthrough: `plan --slo ... --target-rps ... --out D` printed `tokenload report D`, which
    # then showed no capacity: a run directory keeps what was measured, not how it was judged.
    # Plan now prints the report command with its judging options and keeps them in the JSON.
    judging = ["--slo", "ttft_p95_ms=500,tpot_p95_ms=60", "--target-rps", "10", "--headroom", "0.3"]
    out = _plan("--concurrency", "1,8,32", "--step-duration", "5", "--warmup", "1", *judging,
                "--out", str(tmp_path / "plan"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    last = out.stdout.splitlines()[-1]
    assert last.endswith(f"(its report: tokenload report {tmp_path / 'plan'} {' '.join(judging)})"), last
    planned = [
        line.removeprefix("predicted: ") for line in out.stdout.splitlines() if line.startswith("predicted: ")
    ]
    # Plan's own capacity lines call its rates predicted, as the report of its run does.
    assert any("the step's predicted rates" in line for line in planned), planned
    assert not any("measured rates" in line for line in planned), planned
    rep = subprocess.run(
        [sys.executable, "-m", "tokenload", "report", str(tmp_path / "plan"), *judging],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    for line in planned:
        assert line in rep.stdout.splitlines(), (line, rep.stdout)
    summary = json.loads((tmp_path / "plan" / "summary.json").read_text())
    assert summary["prediction"]["report_args"] == judging


def test_an_open_loop_plan_shows_what_other_draws_would_measure() -> None:
    # Walkthrough: an open-loop plan was one Poisson draw, shown as if exact; the same plan with
    # other seeds put TTFT p50 anywhere from 156 to 314 ms at 4 req/s. Each draw is a plan of its
    # own (--seed S --draws 1), so the range is exactly what those plans give.
    base = ["--rate", "1,3", "--step-duration", "6", "--warmup", "1", "--prompt-tokens", "512",
            "--output-tokens", "64", "--json"]  # fmt: skip
    out = _plan(*base, "--seed", "3")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    draws = plan["draws"]
    assert draws["count"] == 5 and draws["seeds"] == [3, 4, 5, 6, 7]
    singles = []
    for seed in draws["seeds"]:
        one = _plan(*base, "--seed", str(seed), "--draws", "1")
        assert one.returncode == 0, one.stderr
        assert "draws" not in json.loads(one.stdout)
        singles.append(json.loads(one.stdout)["steps"])
    assert plan["steps"] == singles[0]  # the steps shown are the --seed draw's
    for k, d in enumerate(draws["steps"]):
        ttft = sorted(s[k]["ttft_ms"]["p50"] for s in singles)
        tput = sorted(s[k]["output_tokens_per_s"] for s in singles)
        assert d["ttft_ms_p50"] == [ttft[0], ttft[2], ttft[4]]
        assert d["output_tokens_per_s"] == [tput[0], tput[2], tput[4]]
        assert tput[0] < tput[4]  # a few seconds of Poisson arrivals do differ
        assert sum(d["bottleneck"].values()) == 5
    assert sum(draws["knee_step"].values()) == 5


def test_a_plans_capacity_and_replicas_are_judged_in_every_draw(tmp_path: Path) -> None:
    # Walkthrough: the capacity and replicas came from the --seed draw alone, while other draws
    # crossed the SLO at other rates. Each draw's are exactly those of its own single plan.
    base = ["--rate", "1,3", "--step-duration", "6", "--warmup", "1", "--prompt-tokens", "512",
            "--output-tokens", "64", "--slo", "ttft_p95_ms=150", "--target-rps", "10", "--json"]  # fmt: skip
    out = _plan(*base, "--seed", "3", "--out", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    cap = plan["draws"]["capacity"]
    singles = [json.loads(_plan(*base, "--seed", str(seed), "--draws", "1").stdout) for seed in range(3, 8)]
    loads = sorted(p["slo_capacity"]["load"] for p in singles if p["slo_capacity"])
    reps = sorted(p["replicas"]["replicas"] for p in singles if "replicas" in (p["replicas"] or {}))
    assert cap["count"] == 5 and cap["no_capacity"] == 5 - len(loads) and cap["no_replicas"] == 5 - len(reps)
    assert (
        cap["load"] == [loads[0], loads[len(loads) // 2], loads[-1]]
        and cap["load_unit"] == "req/s (target rate)"
    )
    assert cap["replicas"][0] == reps[0] and cap["replicas"][2] == reps[-1]
    assert reps[0] < reps[-1]  # the draws do disagree here: one draw's count is not the plan
    assert plan["replicas"] == singles[0]["replicas"]  # the single figure stays the --seed draw's
    line = f"Replicas over the draws: {reps[0]}-{reps[-1]}; {reps[-1]} carry the target in every draw"
    text = _plan(*base[:-1], "--seed", "3")
    assert f"predicted: {line}" in text.stdout, text.stdout
    # The report of the plan's directory shows the draws with the same words.
    rep = subprocess.run(
        [sys.executable, "-m", "tokenload", "report", str(tmp_path / "p"), "--slo", "ttft_p95_ms=150",
         "--target-rps", "10"], capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "p" / "report.md").read_text()
    assert "## Over the draws (predicted)" in md and line in md
    assert 'id="draws"' in (tmp_path / "p" / "report.html").read_text()


def test_a_staircase_plan_draws_once_unless_asked(tmp_path: Path) -> None:
    base = ["--concurrency", "2,8", "--step-duration", "5", "--warmup", "1", "--json"]
    assert "draws" not in json.loads(_plan(*base).stdout)
    out = _plan(*base, "--draws", "2", "--prompt-tokens", "uniform:100-900", "--out", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["draws"]["seeds"] == [0, 1]
    # The run directory keeps them: its report's figures are one draw of these.
    assert (
        json.loads((tmp_path / "p" / "summary.json").read_text())["draws"] == json.loads(out.stdout)["draws"]
    )
    text = _plan(*base[:-1], "--draws", "2")
    assert "Over 2 draws (seeds 0-1" in text.stdout and "Knee over the draws:" in text.stdout
    bad = _plan(*base, "--draws", "0")
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "tokenload plan: --draws: expected 1 to 100 draws, got 0"
    )


def test_a_plans_client_turnaround_is_the_users_to_set() -> None:
    # A client across a network adds its round trip to every turnaround: the plan takes it.
    base = ["--concurrency", "2,8", "--prompt-tokens", "128", "--output-tokens", "16",
            "--step-duration", "10", "--warmup", "1", "--json"]  # fmt: skip
    measured = json.loads(_plan(*base).stdout)
    assert measured["prediction"]["client_turnaround_ms"][0] > 0
    remote = json.loads(_plan(*base, "--client-turnaround-ms", "20,40").stdout)
    assert remote["prediction"]["client_turnaround_ms"] == [20.0, 40.0]
    # 20-40 ms idle between a user's ~0.5 s requests: its two users meet less often (TTFT p50
    # 71.5 -> 43.4 ms at 2 users, 2026-12-05) and send a little less.
    assert remote["steps"][0]["ttft_ms"]["p50"] < 0.8 * measured["steps"][0]["ttft_ms"]["p50"]
    assert remote["steps"][1]["output_tokens_per_s"] < measured["steps"][1]["output_tokens_per_s"]
    for bad in ("3,1", "x", "nan", "-1"):
        out = _plan(*base, "--client-turnaround-ms", bad)
        assert out.returncode == 2 and out.stderr.startswith(
            "tokenload plan: --client-turnaround-ms: expected"
        ), out
        assert len(out.stderr.strip().splitlines()) == 1


def test_a_plan_checks_what_a_sweep_checks_and_keeps_runs_apart(tmp_path: Path) -> None:
    # Walkthrough (2026-12-05): plan --out overwrote a measured run's summary.json and records
    # and left its reports; plan took a warm-up that leaves nothing to measure, and a turnaround
    # an open loop never uses; --out on an unwritable path was a traceback.
    run = tmp_path / "measured"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    cases = [
        (["--concurrency", "1", "--out", str(run)], f"--out: {run} already holds a run (summary.json)"),
        (["--concurrency", "1", "--step-duration", "5", "--warmup", "5"], "--warmup: 5 s leaves nothing"),
        (["--concurrency", "1", "--warmup", "-1"], "--warmup: expected a fraction"),
        (["--rate", "1", "--client-turnaround-ms", "3"], "--client-turnaround-ms: a closed loop's"),
        (["--concurrency", "1", "--client-turnaround-ms", ""], "--client-turnaround-ms: expected"),
        (["--concurrency", "1", "--out", "/proc/tokenload-x"], "--out: cannot create /proc/tokenload-x"),
    ]
    for argv, needle in cases:
        out = _plan(*argv)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (argv, out.stderr)
        assert out.stderr.startswith(f"tokenload plan: {needle}"), (argv, out.stderr)
    assert (run / "summary.json").read_text() == "{}"


def test_a_plans_report_reconstructs_the_sweep_it_predicts(tmp_path: Path) -> None:
    # Walkthrough: a rate plan's report said `tokenload sweep --step-duration 10 --warmup 2`,
    # which runs a staircase of users against the default profile.
    out = _plan("--rate", "1,2", "--step-duration", "10", "--sim-args", "--profile h100-llama3.1-8b",
                "--prompt-tokens", "512", "--draws", "1", "--out", str(tmp_path / "p"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    from tokenload.report.model import reconstructed_command

    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert reconstructed_command(summary) == (
        "tokenload sweep '--sim-args=--profile h100-llama3.1-8b' --shape rate --rate 1,2 --step-duration 10 "
        "--warmup 2 --prompt-tokens 512 --output-tokens 64"
    )


def test_a_plans_capacity_without_an_slo_follows_its_own_verdicts(tmp_path: Path) -> None:
    # Plan judges its capacity's steps with the engine's max_num_seqs, as its table and the --out
    # directory's report do (a review found it judged them without; this scenario's verdicts
    # happen not to depend on it). Without an SLO the capacity is the last step before the knee.
    argv = ["--concurrency", "4,16,64,256", "--step-duration", "20", "--target-users", "500",
            "--sim-args", "--max-num-seqs 32", "--json", "--out", str(tmp_path / "p")]  # fmt: skip
    out = _plan(*argv)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["knee"]["bottleneck"] == "scheduler_limit"
    assert plan["slo_capacity"]["step"] == plan["knee"]["step"] - 1
    rep = subprocess.run(
        [sys.executable, "-m", "tokenload", "report", str(tmp_path / "p"), "--target-users", "500"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert f"= {plan['replicas']['replicas']}." in rep.stdout, rep.stdout


def _trace(path: Path, rows: list[tuple[float, int, int, list[int]]]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"timestamp_s": t, "input_tokens": n, "output_tokens": o, "hash_ids": h}) + "\n"
            for t, n, o, h in rows
        )
    )
    return path


def test_a_plan_replays_a_trace_row_for_row_with_its_prefix_reuse(tmp_path: Path) -> None:
    # 120 rows over 12 s: every second row opens with the same 64-token block, the others with
    # tokens of their own.
    rows = [(i * 0.1, 100 + i % 7, 4 + i % 5, [7] if i % 2 == 0 else []) for i in range(120)]
    trace = _trace(tmp_path / "t.jsonl", rows)
    out = _plan("--trace", str(trace), "--trace-steps", "2", "--trace-block-size", "64", "--warmup", "0",
                "--sim-args=--enable-prefix-caching", "--json",
                "--out", str(tmp_path / "plan"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    pred = json.loads(out.stdout)
    # The windows once, where a replay's summary.json keeps them (the report reads them there).
    assert [w["rows"] for w in pred["trace"]["windows"]] == [[0, 60], [60, 120]]
    assert "windows" not in pred["prediction"]["workload"]
    records = [json.loads(line) for line in (tmp_path / "plan" / "requests.jsonl").read_text().splitlines()]
    # Every row once, in its window's step, with its own lengths.
    assert sorted((r["input_tokens"], r["output_tokens"]) for r in records) == sorted(
        (n, o) for _, n, o, _ in rows
    )
    assert [sum(r["step"] == k for r in records) for k in (0, 1)] == [60, 60]
    for s in pred["steps"]:
        assert s["target_rate_rps"] == pytest.approx(10.0, rel=0.02)
        # The shared blocks reach the emulated prefix cache: hits, never more than the blocks.
        hits = s["server"]["prefix_cache_hits"]["increase"]
        assert 0 < hits <= 30 * 64, s["server"]["prefix_cache_hits"]
    # The planned run reports as a replay does: its trace section, one step per window.
    rep = subprocess.run(
        [sys.executable, "-m", "tokenload", "report", str(tmp_path / "plan")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert "Replayed as 2 steps (--trace-steps)" in (tmp_path / "plan" / "report.md").read_text()


def test_a_plans_trace_input_is_checked_in_one_line(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl", [(0.0, 100, 8, []), (0.5, 100, 8, []), (9.0, 100, 8, [])])
    long = _trace(tmp_path / "long.jsonl", [(0.0, 100, 8, []), (1.0, 5000, 8, [])])
    for args, says in (
        (["--trace", str(trace), "--trace-steps", "4"], "--trace-steps: window 2 of 4"),
        (["--trace", str(trace), "--rate", "2"], "not allowed with argument --trace"),
        (["--trace", str(tmp_path / "none.jsonl")], "no such file"),
        (["--trace", str(long), "--sim-args", "--max-model-len 4096"], "--trace: row 1 asks for 5000 prompt"),
    ):
        out = _plan(*args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert says in out.stderr, (args, out.stderr)

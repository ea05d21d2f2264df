"""Verdicts from per-step data: each rule on hand-built steps (fast), then each saturation regime
the emulator produces under a real `tokenload sweep` (slow, real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, with_trusted_client
from tokenload.analysis.diagnosis import diagnose_steps, find_knee
from tokenload.analysis.thresholds import Thresholds


def step(c: int, tput: float, ttft: float = 50.0, tpot: float = 20.0, **server) -> dict:
    srv = {
        "kv_cache_usage_ratio": {
            "mean": server.get("kv", 0.1),
            "max": server.get("kv_max", server.get("kv", 0.1)),
        },
        "requests_running": {
            "mean": server.get("run", float(c)),
            "max": server.get("run_max", server.get("run", c)),
        },
        "requests_waiting": {"mean": server.get("wait", 0.0), "max": server.get("wait", 0.0)},
        "preemptions": {"increase": server.get("preempt", 0)},
    }
    return {
        "concurrency": c,
        "output_tokens_per_s": tput,
        "ttft_ms": {"p50": ttft},
        "tpot_ms": {"p50": tpot},
        "requests": {
            "ok": 100,
            "failed": server.get("failed", 0),
            "by_failure_class": server.get("classes", {}),
        },
        "server": srv,
        "client": {"cpu_percent_max": 20, "loop_lag_ms_p99": 1.0},
        "flags": server.get("flags", []),
        "measured_s": 10.0,
    }


def names(steps: list[dict], **kw) -> list[str]:
    return [v["bottleneck"] for v in diagnose_steps(steps, **kw)]


def test_scaling_is_none() -> None:
    assert names([step(1, 100), step(2, 195), step(4, 380)]) == ["none", "none", "none"]


def test_kv_capacity() -> None:
    steps = [
        step(1, 100),
        step(4, 390, kv=0.5),
        step(16, 420, ttft=900, kv=0.8, kv_max=0.97, wait=9, preempt=3),
    ]
    verdicts = diagnose_steps(steps)
    assert [v["bottleneck"] for v in verdicts] == ["none", "none", "kv_capacity"]
    metrics = {e["metric"] for e in verdicts[2]["evidence"]}
    assert {"kv_cache_usage_ratio max", "preemptions", "requests_waiting mean"} <= metrics
    assert any("max_model_len" in a or "concurrency" in a for a in verdicts[2]["advice"])
    knee = find_knee(steps, verdicts)
    assert knee["concurrency"] == 16 and knee["last_unsaturated_concurrency"] == 4


def test_kv_full_for_admission_below_the_ratio() -> None:
    # 4 running hold 0.87 of the cache: the next one (0.22) cannot fit although usage < 0.9.
    steps = [step(1, 100), step(16, 110, kv=0.87, kv_max=0.89, run=4, run_max=4, wait=12)]
    assert names(steps) == ["none", "kv_capacity"]


def test_scheduler_limit() -> None:
    steps = [step(2, 100), step(16, 120, ttft=2000, kv=0.1, run=4, run_max=4, wait=12)]
    v = diagnose_steps(steps)[1]
    assert v["bottleneck"] == "scheduler_limit" and any("max_num_seqs" in a for a in v["advice"])


def test_a_cap_the_user_gave_decides_where_no_plateau_shows() -> None:
    # Running doubled for 4x the users, so no plateau across steps shows a cap; requests wait
    # while the cache has room. From /metrics alone the resource cannot be named (unknown); the
    # user's --server-max-num-seqs 4 says running sits at the cap: scheduler_limit, and the
    # evidence says the cap was given, not seen.
    steps = [step(2, 100, run=2), step(8, 130, ttft=2000, kv=0.1, run=4, run_max=4, wait=4)]
    assert names(steps) == ["none", "unknown"]
    v = diagnose_steps(steps, max_num_seqs=4)[1]
    assert v["bottleneck"] == "scheduler_limit", v["evidence"]
    cap = next(e for e in v["evidence"] if e["metric"] == "requests_running max")
    assert cap["value"] == 4 and "max_num_seqs 4 (given)" in cap["rule"]
    # A cap the batch is far from changes nothing.
    assert names(steps, max_num_seqs=256) == ["none", "unknown"]


def _timed(s: dict, step_ms: float, tokens: float, gen_share: float = 0.5, ctx_in: float = 200) -> dict:
    """Give a hand-built step the server's step time and tokens per step (the step-time model)."""
    s["server"]["itl_ms"] = {"mean": step_ms}
    s["server"]["iteration_tokens"] = {"mean": tokens}
    gen = s["output_tokens_per_s"]
    s["server"]["generation_tokens"] = {"rate_per_s": gen}
    s["server"]["prompt_tokens"] = {"rate_per_s": gen * (1 - gen_share) / gen_share}
    s["requests_per_s"] = gen / 100
    s["input_tokens_per_s"] = s["requests_per_s"] * ctx_in
    return s


def test_compute_vs_bandwidth_by_the_step_time_model() -> None:
    # Step time grew in proportion to the tokens per step, mostly prefill tokens: compute.
    steps = [_timed(step(16, 400), 20.0, 400, 0.1), _timed(step(64, 500), 75.0, 1600, 0.1)]
    v = diagnose_steps(steps)[1]
    assert v["bottleneck"] == "compute", v["evidence"]
    assert v["decided_by"] == "predicted gain from 2x load"
    # Step time flat (the weights read each step), long contexts: memory bandwidth.
    steps = [_timed(step(16, 400), 30.0, 16, 0.95, 4000), _timed(step(64, 410), 31.0, 64, 0.95, 4000)]
    steps[1]["server"]["requests_waiting"] = {"mean": 30.0, "max": 40}
    steps[1]["server"]["kv_cache_usage_ratio"] = {"mean": 0.2, "max": 0.3}
    steps[1]["server"]["requests_running"] = {"mean": 34.0, "max": 64}
    v = diagnose_steps(steps)[1]
    assert v["bottleneck"] == "memory_bandwidth", v["evidence"]


def test_latency_growth_alone_names_no_resource() -> None:
    # The old fallback called this compute because TTFT grew more than TPOT: noise decided.
    assert names([step(16, 400), step(64, 500, ttft=600, tpot=30)]) == ["none", "unknown"]
    assert names([step(16, 400), step(64, 500, ttft=60, tpot=90)]) == ["none", "unknown"]


def test_no_data_is_unknown_with_the_missing_signal_named() -> None:
    steps = [{"concurrency": 1}, {"concurrency": 8}]
    for v in diagnose_steps(steps):
        assert v["bottleneck"] in ("none", "unknown")
        assert all(e["value"] is not None for e in v["evidence"]), v["evidence"]
    bare = [step(16, 400), step(64, 420)]  # saturated by throughput, nothing else known
    v = diagnose_steps(bare)[1]
    assert v["bottleneck"] == "unknown" and v["saturated"]
    assert any(e["metric"] == "missing" for e in v["evidence"])


def test_a_step_with_a_lost_worker_is_not_judged_as_saturation() -> None:
    steps = [step(16, 400), step(64, 150, flags=["worker_lost"]), step(128, 3000)]
    verdicts = diagnose_steps(steps)
    assert verdicts[1]["bottleneck"] == "unknown" and not verdicts[1]["saturated"]
    assert verdicts[1]["decided_by"] == "flag"
    assert verdicts[2]["bottleneck"] == "none"  # compared with the step below the lost one
    assert find_knee(steps, verdicts) is None  # the lost worker's dip is no knee


def test_a_step_that_measured_nothing_is_not_judged() -> None:
    # Walkthrough: a trace step that sent nothing read "not saturated: still scaling - 0.0 output
    # tokens/s".
    empty = step(64, 0.0)
    empty["requests"] = {"ok": 0, "failed": 0, "by_failure_class": {}}
    empty["server"]["requests_running"] = {"mean": 0.0, "max": 0.0}
    steps = [step(16, 400), empty, step(128, 3000)]
    verdicts = diagnose_steps(steps)
    assert verdicts[1]["bottleneck"] == "unknown" and not verdicts[1]["saturated"]
    assert verdicts[1]["decided_by"] == "requests measured" and verdicts[1]["evidence"][0]["value"] == 0
    assert verdicts[2]["bottleneck"] == "none"  # compared with the step below the empty one
    assert find_knee(steps, verdicts) is None
    # A server busy with requests that outlive the step is judged by its own signals.
    empty["server"]["requests_running"] = {"mean": 4.0, "max": 4.0}
    assert diagnose_steps(steps)[1]["decided_by"] != "requests measured"


def test_running_that_grows_with_the_load_is_no_scheduler_cap() -> None:
    # Issue #15: running grew 29 -> 90 with the load, some waiting: not pinned at max_num_seqs.
    steps = [step(32, 400, run=29, run_max=31), step(100, 430, run=90, run_max=97, wait=2.0)]
    assert names(steps)[1] != "scheduler_limit"


def test_compute_vs_bandwidth_by_utilization_when_peaks_known() -> None:
    s = step(64, 500, ttft=600, tpot=30)
    s["server"]["estimated_flops"] = {"increase": 10 * 0.2 * 1e15}
    s["server"]["estimated_read_bytes"] = {"increase": 10 * 0.8 * 2e12}
    peaks = {"flops_per_s": 1e15, "bytes_per_s": 2e12}
    assert names([step(16, 400), s], peaks=peaks) == ["none", "memory_bandwidth"]


def test_roofline_decides_below_the_old_bound_and_latency_growth_only_when_the_gpu_idles() -> None:
    # TTFT grew more than TPOT (chunked prefill: prefills ride in the decode step), but the
    # bandwidth is run far closer to its peak than the FLOPs: decode-bound.
    peaks = {"flops_per_s": 1e15, "bytes_per_s": 2e12}
    s = step(64, 500, ttft=600, tpot=30)
    s["server"]["estimated_flops"] = {"increase": 10 * 0.2 * 1e15}
    s["server"]["estimated_read_bytes"] = {"increase": 10 * 0.5 * 2e12}
    assert names([step(16, 400), s], peaks=peaks) == ["none", "memory_bandwidth"]
    s["server"]["estimated_read_bytes"] = {"increase": 10 * 0.1 * 2e12}  # both shares < 0.3
    assert names([step(16, 400), s], peaks=peaks) == ["none", "compute"]


def test_latency_growth_while_throughput_keeps_up_is_not_saturation() -> None:
    assert names([step(1, 100, ttft=20), step(4, 400, ttft=80)]) == ["none", "none"]


def test_waiting_while_throughput_keeps_up_is_not_saturation() -> None:
    # A burst's arrivals waiting a step for the token budget, throughput still 0.9 of the load's growth.
    assert names([step(16, 400), step(64, 1480, wait=0.75)]) == ["none", "none"]
    # A queue that persists (more than a passing moment next to the running batch) is.
    assert names([step(16, 400), step(64, 1120, wait=20, run=44)])[1] != "none"


def test_client_and_errors_come_first() -> None:
    bad_client = step(64, 100, flags=["client_bound"])
    failing = step(64, 100, failed=20, classes={"http_5xx": 15, "http_429": 5})
    assert names([step(1, 100), bad_client, failing]) == ["none", "client", "errors"]
    v = diagnose_steps([step(1, 100), failing])[1]
    assert "http_5xx" in v["evidence"][0]["rule"]


def test_failures_that_burn_the_clients_cpu_are_errors_not_the_clients_limit() -> None:
    """A target that refuses connections: every closed-loop user fails at once and tries again,
    the client's CPU goes to that (client_bound), and the step is the failures' (helper's
    walkthrough, 2026-12-05: a killed emulator's steps were judged `client`, "add workers")."""
    storm = step(8, 0.0, failed=23_000, classes={"connect_error": 23_000}, flags=["client_bound"])
    v = diagnose_steps([step(2, 100), storm])[1]
    assert v["bottleneck"] == "errors" and v["decided_by"] == "failed share"
    assert "connect_error" in v["evidence"][0]["rule"] and v["evidence"][1]["value"] == "client_bound"
    # Timeouts a late reader causes itself stay the client's.
    late = step(8, 50.0, failed=30, classes={"stall_timeout": 25, "http_5xx": 5}, flags=["client_bound"])
    assert names([step(2, 100), late]) == ["none", "client"]


def test_a_queue_growing_past_a_lagging_client_is_still_saturation() -> None:
    # The client fell behind (client_bound) yet the server's queue grew through the step: the
    # server could not keep up even with less than the asked load.
    lagging = step(64, 120, run=2, run_max=2, wait=30, flags=["client_bound", "oversaturated"])
    lagging["waiting_trend"] = {"per_s": 12.0, "oversaturated": True}
    v = diagnose_steps([step(2, 100, run=2, run_max=2), lagging])[1]
    assert v["saturated"] and v["bottleneck"] not in ("client", "none")
    assert v["decided_by"] == "requests_waiting trend"
    # Lagging alone, or a lagging client with a settled queue, is the client's.
    settled = step(64, 120, flags=["client_bound"])
    assert names([step(2, 100), settled]) == ["none", "client"]


def test_thresholds_are_overridable() -> None:
    steps = [step(1, 100), step(2, 150)]  # efficiency 0.5
    assert names(steps) == ["none", "none"]
    # Saturated by the stricter threshold; nothing says which resource.
    assert names(steps, thresholds=Thresholds.with_overrides({"scaling_efficiency": 0.6})) == [
        "none",
        "unknown",
    ]
    with pytest.raises(ValueError, match="unknown name"):
        Thresholds.with_overrides({"nope": 1})


SCENARIOS = [
    # (sim args, concurrency, prompt tokens or a workload file, output tokens, expected verdicts)
    ("--profile h100-llama3.1-8b", "1,2", 20, 32, ["none", "none"]),
    # 4 users already fill the cache (doubling them adds nothing) and relaxing bandwidth helps
    # most there; at 16, requests wait for KV: the oracle (tokenload.sim.oracle) says the same.
    ("--profile h100-llama3.1-8b --num-gpu-blocks 400 --max-model-len 4096", "1,4,16", 1300, 200,
     ["none", "memory_bandwidth", "kv_capacity"]),
    ("--profile h100-llama3.1-8b --max-num-seqs 4", "2,16", 20, 64, ["none", "scheduler_limit"]),
    # Two workers share the 256 streams: one local process reached a loop lag p95 of 11 ms at
    # 256 on the CI machine (flagged client_bound, rightly not judged).
    ("--profile a40-qwen2.5-7b", "8,32,256", 160, 48, ["none", "none", "compute"]),
    # 128 users, not 256: at 256 streams the one local client's loop lag p95 reached 10.1 ms on a
    # quiet clean clone (flagged client_bound, rightly not judged); the oracle and the virtual
    # sweep both call 128 memory_bandwidth (2x load +14 %, 2x bandwidth +54 %).
    ("--profile h200-llama3.1-70b-fp8 --enable-prefix-caching --max-num-seqs 512 --max-model-len 8192",
     "8,16,128", "decode_bound.yaml", 256, ["none", "none", "memory_bandwidth"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("sim_args", "conc", "words", "out", "expected"),
    SCENARIOS,
    ids=["none", "kv", "seqs", "compute", "decode"],
)
def test_emulator_regimes_get_the_right_verdicts(
    tmp_path: Path, sim_args: str, conc: str, words: int | str, out: int, expected: list[str]
) -> None:
    lengths = ["--prompt-tokens", str(words), "--output-tokens", str(out)]
    if isinstance(words, str):  # a workload file
        lengths = ["--workload", str(Path(__file__).parent / words)]
    # Decode-bound requests last ~20 s: longer steps, and the server's token counter for throughput.
    step_s = "15" if isinstance(words, str) else "6"
    workers = "2" if conc.endswith(",256") else "0"

    def sweep(run_dir: Path) -> dict:
        proc = subprocess.run(
            [
                sys.executable, "-m", "tokenload", "sweep", "--concurrency", conc, "--step-duration", step_s,
                "--warmup", "2", *lengths, "--workers", workers,
                "--out", str(run_dir), "--metrics-interval", "1", "--sim-args", sim_args,
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return json.loads((run_dir / "summary.json").read_text())

    # The server's verdicts need a client whose own timing is trusted (a busy host's is not).
    summary = with_trusted_client(sweep, tmp_path / "run")
    got = [s["verdict"]["bottleneck"] for s in summary["steps"]]
    assert got == expected, [s["verdict"]["evidence"] for s in summary["steps"]]
    knee = summary["knee"]
    if expected[-1] == "none":
        assert knee is None
    else:
        first = next(v for v in expected if v != "none")
        assert knee["bottleneck"] == first and knee["step"] == expected.index(first)


def test_counters_that_miss_a_per_token_cost_do_not_hide_saturation() -> None:
    # A step like those of real vLLM's CPU build (tests/real_vllm, the roomy server, whose
    # saturated 64-user step the counters alone judged `none`): the FLOP/byte counters see a
    # weights-bound step whose work barely grows with the batch, but here the step time triples
    # from 4 to 64 users while throughput grows 1.4x: the step-time line, which measured that,
    # predicts the smaller gain from more load, and the smaller decides.
    def counted(s: dict, step_ms: float, tokens: float, flops: float, rbytes: float) -> dict:
        s = _timed(s, step_ms, tokens, 0.5, 32)
        count = s["measured_s"] * 1000 / step_ms
        s["server"]["iteration_tokens"]["count"] = count
        s["server"]["estimated_flops"] = {"increase": flops * count}
        s["server"]["estimated_read_bytes"] = {"increase": rbytes * count}
        return s

    steps = [
        counted(step(4, 300), 10.0, 8, 2e6 * 8, 1.0e6),
        counted(step(64, 420, run=40), 30.0, 80, 2e6 * 80, 1.3e6),
    ]
    v = diagnose_steps(steps)[1]
    assert v["saturated"], v["evidence"]

"""``tokenload sweep`` against the real engine, made to saturate in different ways, and the verdicts
the analysis gives. Each scenario is checked twice: the engine's own figures show what ran out
(so the scenario is what it claims), then the verdict must name it.

The tiny model on two cores is fast (a decode step of a few ms), so 6 s steps hold hundreds of
requests; a sweep takes 20-40 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, with_trusted_client
from tests.real_vllm.conftest import ServerPool

pytestmark = pytest.mark.slow

#: Every server figure diagnosis.py reads (estimated FLOPs/bytes only with --gpu-peaks, not here).
ANALYSIS_FIGURES = (
    "kv_cache_usage_ratio",
    "requests_running",
    "requests_waiting",
    "requests_waiting_capacity",
    "preemptions",
    "generation_tokens",
    "prompt_tokens",
    "queue_time_ms",
    "prefill_time_ms",
    "decode_time_ms",
    "ttft_ms",
    "itl_ms",
)


def sweep(
    url: str, out: Path, concurrency: str, prompt_tokens: int, output_tokens: int, step_s: int = 6
) -> dict[str, Any]:
    """A staircase sweep whose every step had a trusted client (tests.conftest.with_trusted_client)."""
    return with_trusted_client(
        lambda run_dir: _sweep_once(url, run_dir, concurrency, prompt_tokens, output_tokens, step_s), out
    )


def _sweep_once(
    url: str, out: Path, concurrency: str, prompt_tokens: int, output_tokens: int, step_s: int
) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable, "-m", "tokenload", "sweep", "--host", url, "--workers", "0", "--out", str(out),
            "--concurrency", concurrency, "--step-duration", str(step_s), "--warmup", "1",
            "--metrics-interval", "0.5", "--prompt-tokens", str(prompt_tokens),
            "--output-tokens", str(output_tokens),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for step in summary["steps"]:
        assert step["requests"]["failed"] == 0, step["requests"]
        assert step["requests"]["ok"] >= 10, step["requests"]
        assert step["server"] is not None
        missing = [k for k in ANALYSIS_FIGURES if step["server"].get(k) is None]
        assert missing == [], f"step {step['index']}: server figures not scraped: {missing}"
    return summary


def verdicts(summary: dict[str, Any]) -> dict[int, str]:
    return {s["concurrency"]: s["verdict"]["bottleneck"] for s in summary["steps"]}


def assert_capped(summary: dict[str, Any], concurrency: int, cap: str) -> None:
    """1 user unsaturated; at ``concurrency`` the cap or compute named (the step-time model's
    call on this CPU server), the cap ranked among the 2x relaxations, and the knee there."""
    found = verdicts(summary)
    assert found[1] == "none" and found[concurrency] in (cap, "compute"), found
    top = next(s for s in summary["steps"] if s["concurrency"] == concurrency)["verdict"]
    ranked = next(e for e in top["evidence"] if e["metric"] == "predicted gain from relaxing each 2x")
    assert cap in ranked["value"], top["evidence"]
    assert summary["knee"]["bottleneck"] == found[concurrency]


#: A predicted gain from doubling the load this close to the saturation line (either side) is a
#: borderline call on this shared 2-core VM: the 64-user step's gain was 0.085 on a quiet run and
#: 0.283 on a clean CI run (2026-12-02 15:20) whose 4-user step made 371 output tokens/s against
#: 876 on the quiet one (the host was slower). A verdict on such a step is not what these tests
#: check; the rule's margin is issue #15's.
BORDERLINE_GAIN = 0.1


def skip_if_borderline(summary: dict[str, Any], concurrency: int) -> None:
    """Skip the verdict check of a step judged unsaturated by a predicted gain within
    BORDERLINE_GAIN of the saturation line."""
    from tokenload.analysis.thresholds import Thresholds

    verdict = next(s for s in summary["steps"] if s["concurrency"] == concurrency)["verdict"]
    gain = next(
        (e["value"] for e in verdict["evidence"] if e["metric"] == "predicted gain from 2x load"), None
    )
    line = Thresholds().saturation_gain
    if verdict["bottleneck"] == "none" and gain is not None and abs(gain - line) < BORDERLINE_GAIN:
        pytest.skip(f"{concurrency} users: predicted gain from 2x load {gain:.3f}, within "
                    f"{BORDERLINE_GAIN} of the saturation line {line}: a borderline call")  # fmt: skip


def server(summary: dict[str, Any], concurrency: int, figure: str, stat: str) -> float:
    step = next(s for s in summary["steps"] if s["concurrency"] == concurrency)
    return step["server"][figure][stat]


@pytest.fixture(scope="module")
def roomy_sweep(vllm_servers: ServerPool, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Short prompts, a roomy cache: 1, 2 and 4 users scale; 64 users saturate the server's CPU."""
    out = tmp_path_factory.mktemp("roomy") / "run"
    return sweep(vllm_servers.get("roomy").url, out, "1,2,4,64", 32, 32)


def test_a_roomy_cache_with_short_prompts_blames_neither_the_cache_nor_the_scheduler(
    roomy_sweep: dict[str, Any],
) -> None:
    """Neither the KV cache nor the scheduler is blamed while both have room. Whether 4 users
    still scale depends on the CPU left to the server (quiet: all "none" up to 4). When they do
    not, the engine ran out of its one core, and which name that gets depends on which phase's
    time grew: decode here (32-token prompts), so "memory_bandwidth" (a clean CI run of 9e192fa,
    2026-12-02: 4 users memory_bandwidth) is as right as "compute" on a CPU engine; "none" before
    "compute" was all this test had seen, and all it allowed, until then."""
    for c in (1, 2, 4, 64):
        # Every user's request that reached the engine is in the running batch; the cache is nearly
        # empty; nothing is preempted.
        assert server(roomy_sweep, c, "requests_waiting", "mean") < 0.5
        assert server(roomy_sweep, c, "kv_cache_usage_ratio", "max") < 0.2
        assert server(roomy_sweep, c, "preemptions", "increase") == 0
    found = verdicts(roomy_sweep)
    assert found[1] == "none"
    engine_or_frontend = {"none", "compute", "memory_bandwidth", "frontend"}
    assert set(found.values()) <= engine_or_frontend, found
    skip_if_borderline(roomy_sweep, 64)
    assert roomy_sweep["knee"] is not None and roomy_sweep["knee"]["bottleneck"] in engine_or_frontend - {
        "none"
    }


@pytest.fixture(scope="module")
def short_requests_sweep(
    vllm_servers: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Short requests (32 tokens in, 8 out) at 4 and 64 users: many requests a second, each
    costing the API server its HTTP, tokenization and hand-over for few generated tokens. With 32
    tokens out (the roomy sweep's) a faster host (2026-12-07) kept 42.6 of 64 requests running:
    the API server did not clearly saturate and the test below skipped in both CI runs of that
    day; with 8 out the same host ran 12.1 of 64, 83 % of the server's TTFT before the engine's
    queue, and the verdict at 64 users was frontend."""
    out = tmp_path_factory.mktemp("short") / "run"
    return sweep(vllm_servers.get("roomy").url, out, "4,64", 32, 8)


def test_a_saturated_api_server_is_not_called_prefill_bound(short_requests_sweep: dict[str, Any]) -> None:
    """At 64 users the server's core runs out. The engine shows it is not what saturated: nothing waits
    in its queue, prefill is a small share of a request's time, the running batch holds well under
    64 requests, and most of the server's own TTFT passes before the engine queue sees the request
    (the API server's HTTP, tokenization and hand-over to the engine core)."""
    srv = next(s for s in short_requests_sweep["steps"] if s["concurrency"] == 64)["server"]
    assert srv["requests_waiting"]["mean"] < 0.5
    if srv["requests_running"]["mean"] >= 0.6 * 64:
        # How far the API process falls behind depends on the host's CPU: on some runs (47.5-54.5
        # of 64 running, seen on this VM) it did not clearly saturate, and the scenario did not
        # occur. At 47.5 (the old line was 48) the engine already held most users and the time
        # before its queue was 0.47 of TTFT: a borderline run, not the scenario this test names.
        pytest.skip(f"the API server did not clearly saturate (running mean "
                    f"{srv['requests_running']['mean']:.1f} of 64 users)")  # fmt: skip
    prefill, decode = srv["prefill_time_ms"]["mean"], srv["decode_time_ms"]["mean"]
    assert prefill / (prefill + decode) < 0.2
    before_queue_ms = srv["ttft_ms"]["mean"] - srv["queue_time_ms"]["mean"] - prefill
    assert before_queue_ms > 0.5 * srv["ttft_ms"]["mean"]
    skip_if_borderline(short_requests_sweep, 64)
    assert verdicts(short_requests_sweep)[64] == "frontend"


def test_a_tiny_kv_cache_with_long_prompts_is_kv_capacity(vllm_servers: ServerPool, tmp_path: Path) -> None:
    # The engine's gauges are its state after each step, and a step that prefills one of these
    # prompts lasts ~0.6 s on this CPU build: while it runs they show the one request left from
    # the step before. Two requests in the cache show only in the decode steps between two
    # prefills. With 16 output tokens that was ~10 % of the time (2 of 20 scrapes, 2026-12-06);
    # a clean CI run of 3c7ca13 caught none in its 4-user step. 64 output tokens make the decode
    # steps ~1/3 of the time, and 1,800 + 64 tokens still take 15 blocks (1,920 tokens).
    # One user then completes a request about every 1.2 s: 16 s steps hold more than 10.
    summary = sweep(vllm_servers.get("tiny_kv").url, tmp_path / "run", "1,4", 1800, 64, step_s=16)
    # The engine: two requests hold the cache (15 of 31 blocks each) and the other two wait for it.
    assert server(summary, 4, "kv_cache_usage_ratio", "max") >= 0.9
    assert server(summary, 4, "requests_running", "max") == 2
    assert server(summary, 4, "requests_waiting_capacity", "mean") > 1
    # Saturated at 4, and the KV cache is a binding cap. Which relaxation would buy more on this
    # CPU server is the step-time model's call (its prefill-heavy steps grow with the batch, so
    # the rules may name compute, with kv_capacity ranked in the evidence); no counterfactual run
    # of real vLLM with a doubled cache has checked it yet (issue #15, item 6).
    assert_capped(summary, 4, "kv_capacity")
    assert summary["knee"]["last_unsaturated_concurrency"] == 1


def test_max_num_seqs_2_is_the_scheduler_limit(vllm_servers: ServerPool, tmp_path: Path) -> None:
    summary = sweep(vllm_servers.get("two_seqs").url, tmp_path / "run", "1,8", 32, 32)
    # The engine: two running, six waiting, the cache nearly empty.
    assert server(summary, 8, "requests_running", "max") == 2
    assert server(summary, 8, "requests_waiting", "mean") > 4
    assert server(summary, 8, "kv_cache_usage_ratio", "max") < 0.1
    # vLLM counts requests held by max_num_seqs as reason="capacity" too, not only KV waits.
    assert server(summary, 8, "requests_waiting_capacity", "mean") > 4
    # Saturated at 8, and max_num_seqs is a binding cap. As in the tiny-KV case, which 2x
    # relaxation would buy more on this CPU server is the step-time model's call: on one clean
    # CI run (1cbaf28) its noisy CPU step times ranked compute above the cap, on three others the
    # cap first; no counterfactual run of real vLLM has checked it (issue #15, item 6).
    assert_capped(summary, 8, "scheduler_limit")

"""The /metrics page: same families, types, labels and buckets as a real vLLM, and values that
agree with what the engine did."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.metrics import SimMetrics, build_1_2_5_buckets
from tokenload.sim.virtual import RequestSpec, run_closed_loop

pytestmark = pytest.mark.simulated_time

GOLDEN = Path(__file__).parents[1] / "goldens" / "vllm-0.32-cpu-metrics.txt"

# Golden families the emulator deliberately does not export, and why. Empty: every family of the
# vLLM 0.32 page is exported, the ones for features the emulator lacks (external KV connector,
# multi-modal cache, admission queue limits, sleep mode) with the values an idle real server shows.
# python_*/process_* come from prometheus_client's own collectors and http_* appear once the
# server records a request (SimMetrics.observe_http), as with vLLM's instrumentator.
NOT_EXPORTED: dict[str, str] = {}


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def label_names(family: object) -> set[str]:
    samples: list[Sample] = family.samples  # type: ignore[attr-defined]
    return {k for s in samples for k in s.labels if k not in ("le", "quantile")}


def buckets(family: object) -> list[str]:
    samples: list[Sample] = family.samples  # type: ignore[attr-defined]
    bounds: list[str] = []
    for s in samples:
        if s.name.endswith("_bucket") and s.labels["le"] not in bounds:
            bounds.append(s.labels["le"])
    return bounds


def sample_value(fams: dict[str, object], sample_name: str, **labels: str) -> float:
    for family in fams.values():
        for s in family.samples:  # type: ignore[attr-defined]
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(sample_name)


def run_with_metrics(names: str, **config: object) -> tuple[SimEngine, SimMetrics, dict[str, object]]:
    metrics = SimMetrics("tiny", names=names)  # type: ignore[arg-type]
    engine = SimEngine(
        "a40-qwen2.5-7b",
        EngineConfig(max_model_len=2048, **config),
        served_model_name="tiny",
        metrics=metrics,
    )
    run_closed_loop(
        engine, 8, 4, lambda c, i: RequestSpec([(c + i + k) % 256 for k in range(300)], max_tokens=40)
    )
    metrics.observe_http("/v1/completions", "POST", 200, 1.2, 512, 0)
    return engine, metrics, families(metrics.render().decode())


def test_golden_file_parses() -> None:
    golden = families(GOLDEN.read_text())
    assert "vllm:num_requests_waiting_by_reason" in golden
    assert golden["vllm:time_to_first_token_seconds"].type == "histogram"  # type: ignore[attr-defined]


def test_v1_exposition_matches_the_vllm_032_golden() -> None:
    golden = families(GOLDEN.read_text())
    _, _, ours = run_with_metrics("v1")
    missing = {name for name in golden if name not in ours}
    assert missing == set(NOT_EXPORTED), f"golden families not exported: {sorted(missing)}"
    checked = 0
    for name, expected in golden.items():
        if name not in ours:
            continue
        actual = ours[name]
        assert actual.type == expected.type, name  # type: ignore[attr-defined]
        assert actual.documentation == expected.documentation, name  # type: ignore[attr-defined]
        if name.startswith(("vllm:", "http_")):
            assert label_names(actual) == label_names(expected), name
            assert buckets(actual) == buckets(expected), name
        checked += 1
    assert checked > 80


def test_token_buckets_follow_max_model_len() -> None:
    assert build_1_2_5_buckets(2048) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    metrics = SimMetrics("m", max_model_len=32768)
    fams = families(metrics.render().decode())
    assert buckets(fams["vllm:request_prompt_tokens"])[-2:] == ["20000.0", "+Inf"]


def test_v1_values_agree_with_the_engine() -> None:
    engine, _, fams = run_with_metrics("v1")
    labels = {"engine": "0", "model_name": "tiny"}
    n_requests, prompt, output = 32, 300, 40
    assert sample_value(fams, "vllm:request_success_total", finished_reason="length", **labels) == n_requests
    assert sample_value(fams, "vllm:prompt_tokens_total", **labels) == n_requests * prompt
    assert sample_value(fams, "vllm:generation_tokens_total", **labels) == n_requests * output
    assert sample_value(fams, "vllm:time_to_first_token_seconds_count", **labels) == n_requests
    # One inter-token latency per token after the first, as in the golden (73472 = 73728 - 256).
    assert sample_value(fams, "vllm:inter_token_latency_seconds_count", **labels) == n_requests * (output - 1)
    # Per-step tokens add up to prompt + generation tokens, as in the golden (204828 = 131100 + 73728).
    assert sample_value(fams, "vllm:iteration_tokens_total_sum", **labels) == n_requests * (prompt + output)
    assert sample_value(fams, "vllm:iteration_tokens_total_count", **labels) == engine.counters.num_steps
    assert sample_value(fams, "vllm:e2e_request_latency_seconds_count", **labels) == n_requests
    assert sample_value(fams, "vllm:num_requests_running", **labels) == 0
    assert sample_value(fams, "vllm:kv_cache_usage_perc", **labels) == 0
    assert sample_value(fams, "vllm:estimated_flops_per_gpu_total", **labels) > 0
    assert sample_value(fams, "vllm:engine_sleep_state", sleep_state="awake", **labels) == 1
    assert (
        sample_value(
            fams, "vllm:cache_config_info", block_size="16", num_gpu_blocks=str(engine.num_gpu_blocks)
        )
        == 1
    )
    assert sample_value(fams, "http_requests_total", handler="/v1/completions", status="2xx") == 1


def test_v1_gauges_and_counters_under_kv_pressure() -> None:
    metrics = SimMetrics("tiny")
    engine = SimEngine(
        "a40-qwen2.5-7b",
        EngineConfig(num_gpu_blocks=300, max_model_len=4096, enable_prefix_caching=True),
        served_model_name="tiny",
        metrics=metrics,
    )
    labels = {"engine": "0", "model_name": "tiny"}
    for i in range(8):
        # A shared 500-token prefix, then 500 tokens of its own: about 45 blocks each, 300 in all.
        engine.add_request(
            f"r{i}", [7] * 500 + [i] * 500, max_tokens=200, ignore_eos=True, arrival_time_s=0.0
        )
    saw_waiting = False
    now = 0.0
    step = 0
    while engine.has_work:
        plan = engine.schedule(now)
        assert plan is not None
        now += plan.duration_s
        engine.complete(plan, now)
        step += 1
        if step % 7:
            continue  # parsing the page every step would be slow; every 7th step is plenty
        fams = families(metrics.render().decode())
        waiting = sample_value(fams, "vllm:num_requests_waiting", **labels)
        assert (
            sample_value(fams, "vllm:num_requests_waiting_by_reason", reason="capacity", **labels) == waiting
        )
        assert sample_value(fams, "vllm:num_requests_waiting_by_reason", reason="deferred", **labels) == 0
        assert sample_value(fams, "vllm:num_requests_running", **labels) == engine.num_running
        assert sample_value(fams, "vllm:kv_cache_usage_perc", **labels) == engine.kv_cache_usage_ratio
        if waiting and engine.current_waiting_cause == "kv_cache":
            saw_waiting = True
            cause = sample_value(fams, "tokenload_sim:num_requests_waiting_by_cause", cause="kv_cache")
            assert cause == waiting
    assert saw_waiting
    fams = families(metrics.render().decode())
    assert sample_value(fams, "vllm:num_preemptions_total", **labels) == engine.counters.num_preemptions > 0
    assert sample_value(fams, "vllm:request_num_preemptions_sum", **labels) == engine.counters.num_preemptions
    # The shared prefix hits; hits and queries are counted once per request, not on readmission.
    assert sample_value(fams, "vllm:prefix_cache_hits_total", **labels) == engine.kv.hit_tokens > 0
    assert sample_value(fams, "vllm:prefix_cache_queries_total", **labels) == 8 * 1000
    hits = sample_value(fams, "vllm:prompt_tokens_by_source_total", source="local_cache_hit", **labels)
    computed = sample_value(fams, "vllm:prompt_tokens_by_source_total", source="local_compute", **labels)
    assert hits + computed == sample_value(fams, "vllm:prompt_tokens_total", **labels) == 8 * 1000


def test_v0_names() -> None:
    engine, _, fams = run_with_metrics("v0", enable_prefix_caching=True)
    for name in (
        "vllm:gpu_cache_usage_perc",
        "vllm:time_per_output_token_seconds",
        "vllm:num_requests_swapped",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:cpu_cache_usage_perc",
        "vllm:tokens",
        "vllm:time_in_queue_requests",
    ):
        assert name in fams, name
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:inter_token_latency_seconds",
        "vllm:num_requests_waiting_by_reason",
    ):
        assert name not in fams, name
    assert not any(name.endswith("_created") for name in fams)
    assert label_names(fams["vllm:num_requests_running"]) == {"model_name"}
    assert label_names(fams["vllm:request_success"]) == {"model_name", "finished_reason"}
    assert buckets(fams["vllm:time_to_first_token_seconds"])[-2:] == ["10.0", "+Inf"]
    assert buckets(fams["vllm:iteration_tokens_total"])[:5] == ["1.0", "2.0", "4.0", "8.0", "16.0"]
    assert sample_value(fams, "vllm:time_per_output_token_seconds_count", model_name="tiny") == 32 * 39
    rate = sample_value(fams, "vllm:gpu_prefix_cache_hit_rate", model_name="tiny")
    assert rate == pytest.approx(engine.kv.hit_tokens / engine.kv.query_tokens)
    assert sample_value(fams, "vllm:cpu_prefix_cache_hit_rate", model_name="tiny") == -1


def test_abort_counts_under_finished_reason_abort() -> None:
    metrics = SimMetrics("tiny")
    engine = SimEngine(config=EngineConfig(max_model_len=2048), served_model_name="tiny", metrics=metrics)
    engine.add_request("a", [1] * 10, max_tokens=10, arrival_time_s=0.0)
    engine.abort("a")
    fams = families(metrics.render().decode())
    assert sample_value(fams, "vllm:request_success_total", finished_reason="abort") == 1
    assert sample_value(fams, "vllm:num_requests_waiting", engine="0") == 0


def test_render_before_configure_has_no_vllm_families() -> None:
    metrics = SimMetrics("m")
    assert not metrics.configured
    assert b"vllm:" not in metrics.render()
    metrics.configure(4096)
    assert b"vllm:num_requests_running" in metrics.render()
    assert metrics.content_type.startswith("text/plain")


def test_waiting_gauge_counts_only_requests_the_scheduler_has_seen() -> None:
    # vLLM's engine core takes new requests in between steps and computes its scheduler stats at
    # the end of a step, so a request that arrived during the step is not in num_requests_waiting.
    metrics = SimMetrics("tiny")
    engine = SimEngine(
        config=EngineConfig(max_num_seqs=1, max_model_len=2048), served_model_name="tiny", metrics=metrics
    )
    engine.add_request("a", [1] * 10, max_tokens=5, arrival_time_s=0.0)
    engine.add_request("b", [1] * 10, max_tokens=5, arrival_time_s=0.0)
    plan = engine.schedule(0.0)
    assert plan is not None
    engine.add_request("c", [1] * 10, max_tokens=5, arrival_time_s=0.01)  # during the step
    engine.complete(plan, plan.duration_s)
    fams = families(metrics.render().decode())
    assert engine.num_waiting == 2
    assert sample_value(fams, "vllm:num_requests_waiting", engine="0") == 1
    assert sample_value(fams, "vllm:num_requests_waiting_by_reason", reason="capacity") == 1
    assert sample_value(fams, "tokenload_sim:num_requests_waiting_by_cause", cause="max_num_seqs") == 1
    assert sample_value(fams, "tokenload_sim:num_requests_waiting_by_cause", cause="new") == 1


def test_v0_exposition_matches_a_real_vllm_06_page() -> None:
    # A 0.6-series page (gauges, counters, cache_config_info), kept next to the 0.32 golden.
    golden = families((GOLDEN.parent / "vllm-0.6-v0-excerpt-metrics.txt").read_text())
    _, _, ours = run_with_metrics("v0")
    assert golden
    for name, expected in golden.items():
        assert name in ours, name
        actual = ours[name]
        assert actual.type == expected.type, name  # type: ignore[attr-defined]
        assert actual.documentation == expected.documentation, name  # type: ignore[attr-defined]
        assert label_names(actual) == label_names(expected), name


def test_v0_average_throughput_gauges_refresh_every_interval() -> None:
    metrics = SimMetrics("tiny", names="v0")
    engine = SimEngine(config=EngineConfig(max_model_len=2048), served_model_name="tiny", metrics=metrics)
    run = run_closed_loop(engine, 4, 10**6, lambda c, i: RequestSpec([c] * 200, max_tokens=50), until_s=12.0)
    fams = families(metrics.render().decode())
    generation = sample_value(fams, "vllm:avg_generation_throughput_toks_per_s", model_name="tiny")
    prompt = sample_value(fams, "vllm:avg_prompt_throughput_toks_per_s", model_name="tiny")
    assert generation == pytest.approx(run.num_output_tokens / run.duration_s, rel=0.2)
    assert prompt > 0

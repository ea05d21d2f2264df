"""The canonical vocabulary over golden /metrics pages, and the window maths."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenload.servermetrics.parse import HistogramState, ParseError, parse_page
from tokenload.servermetrics.window import (
    counter_increase,
    gauge_summary,
    histogram_delta,
    histogram_quantile,
    histogram_summary,
)

GOLDENS = Path(__file__).resolve().parent.parent / "goldens"


def test_vllm_v1_golden() -> None:
    v = parse_page((GOLDENS / "vllm-0.32-cpu-metrics.txt").read_text())
    assert v.scalars["preemptions"] == 164.0
    assert v.scalars["generation_tokens"] == 73728.0
    assert v.scalars["request_success"] == 256.0  # summed over finished_reason
    assert v.scalars["requests_waiting_capacity"] == 0.0
    for name in (
        "ttft_s",
        "itl_s",
        "tpot_s",
        "e2e_s",
        "queue_time_s",
        "prefill_time_s",
        "decode_time_s",
        "inference_time_s",
    ):
        assert v.histograms[name].count == (73472.0 if name == "itl_s" else 256.0), name
    assert {"kv_cache_usage_ratio", "requests_running", "requests_waiting", "estimated_flops"} <= set(
        v.scalars
    )


def test_vllm_v0_golden() -> None:
    v = parse_page((GOLDENS / "vllm-0.6-v0-excerpt-metrics.txt").read_text())
    assert v.scalars["kv_cache_usage_ratio"] == 0.0  # from vllm:gpu_cache_usage_perc
    assert "requests_swapped" in v.scalars and "preemptions" in v.scalars


def test_sglang_golden() -> None:
    v = parse_page((GOLDENS / "sglang-docs-example-metrics.txt").read_text())
    assert v.scalars["kv_cache_usage_ratio"] == 0.28
    assert v.scalars["requests_running"] == 162.0 and v.scalars["requests_waiting"] == 2826.0
    assert v.histograms["itl_s"].count == 7.400757e06  # sglang:time_per_output_token_seconds
    assert v.histograms["ttft_s"].count == 11008.0


def test_garbage_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_page('vllm:num_requests_running{model_name="x" 1\n')
    assert parse_page("<html>nope</html>").scalars == {}


def test_counter_increase_handles_resets() -> None:
    assert counter_increase([(0, 10), (1, 15), (2, 20)]) == 10
    # restart between t=1 and t=2: 15 -> 3 means 3 new since the restart
    assert counter_increase([(0, 10), (1, 15), (2, 3), (3, 7)]) == 5 + 3 + 4
    assert counter_increase([(0, 1)]) is None


def test_gauge_time_weighted() -> None:
    s = gauge_summary([(0.0, 0.0), (1.0, 1.0), (4.0, 0.0)], t_end=5.0)
    assert s["mean"] == pytest.approx(3 / 5)
    assert s["max"] == 1.0 and s["p95"] == 1.0


def h(buckets: list[tuple[float, float]], s: float) -> HistogramState:
    return HistogramState(buckets, s, buckets[-1][1])


def test_histogram_quantile_like_prometheus() -> None:
    hist = h([(0.1, 10), (0.5, 30), (1.0, 40), (float("inf"), 40)], 12.0)
    assert histogram_quantile(0.25, hist) == pytest.approx(0.1)  # rank 10 ends the first bucket
    assert histogram_quantile(0.5, hist) == pytest.approx(0.1 + 0.4 * (20 - 10) / 20)
    assert histogram_quantile(1.0, hist) == pytest.approx(1.0)
    inf = h([(0.1, 1), (float("inf"), 10)], 5.0)
    assert histogram_quantile(0.9, inf) == 0.1  # in the +Inf bucket: the highest finite bound


def test_histogram_delta_and_reset() -> None:
    a = h([(0.1, 10), (1.0, 20), (float("inf"), 20)], 5.0)
    b = h([(0.1, 15), (1.0, 30), (float("inf"), 30)], 9.0)
    d = histogram_delta(a, b)
    assert d.count == 10 and d.sum == 4.0 and d.buckets[0] == (0.1, 5)
    restarted = h([(0.1, 2), (1.0, 3), (float("inf"), 3)], 0.5)
    assert histogram_delta(b, restarted).count == 3
    summary = histogram_summary(d, scale=1000)
    assert summary["count"] == 10 and summary["mean"] == pytest.approx(400.0)


def test_a_quantile_never_contradicts_the_mean() -> None:
    # Walkthrough: every queue time 0 s, all in vLLM's first bucket (0-0.3 s): the interpolated
    # p50 was 150 ms beside a mean of 0. Markov's inequality caps the q-quantile at mean / (1 - q).
    zeros = h([(0.3, 40), (1.0, 40), (float("inf"), 40)], 0.0)
    assert histogram_quantile(0.5, zeros) == pytest.approx(0.15)  # Prometheus' answer, unchanged
    s = histogram_summary(zeros, scale=1000)
    assert s["mean"] == 0.0 and s["p50"] == 0.0 and s["p99"] == 0.0
    # A few long waits among many short ones: the cap only binds where the bucket misleads.
    mixed = h([(0.3, 95), (10.0, 100), (float("inf"), 100)], 95 * 0.01 + 5 * 2.0)
    s = histogram_summary(mixed, scale=1000)
    mean = s["mean"]
    assert s["p50"] == pytest.approx(min(0.3 * 50 / 95 * 1000, 2 * mean))
    assert s["p99"] == pytest.approx(min((0.3 + 9.7 * 4 / 5) * 1000, 100 * mean))
    assert s["p99"] > s["p95"] > s["p50"]


def test_tick_series_counts_a_target_once_per_tick() -> None:
    from types import SimpleNamespace

    from tokenload.servermetrics.summary import tick_series

    def pt(t: float, target: str, v: float) -> SimpleNamespace:
        scalars = {"preemptions": v, "kv_cache_usage_ratio": v / 10}
        return SimpleNamespace(t=t, target=target, ok=True, scalars=scalars)

    pts = [pt(10.0, "a", 1), pt(10.01, "b", 2), pt(10.03, "a", 3), pt(11.0, "a", 4), pt(11.0, "b", 4)]
    assert tick_series(pts, "preemptions") == [(10.0, 5.0), (11.0, 8.0)]
    assert tick_series(pts, "kv_cache_usage_ratio") == [(10.0, 0.25), (11.0, 0.4)]


def _sim_page(names: str) -> str:
    from tokenload.sim.engine import EngineConfig, SimEngine
    from tokenload.sim.metrics import SimMetrics

    metrics = SimMetrics("m", 4096, names=names)
    engine = SimEngine("h100-llama3.1-8b", EngineConfig(max_model_len=4096), metrics=metrics)
    t = 0.0
    for i in range(20):
        engine.add_request(f"r{i}", list(range(50 + i)), max_tokens=30, ignore_eos=True, arrival_time_s=t)
    while engine.has_work:
        plan = engine.schedule(t)
        t += plan.duration_s
        engine.complete(plan, t)
    return metrics.render().decode()


@pytest.mark.parametrize(
    "page",
    [
        "vllm-0.32-cpu-metrics.txt",
        "sglang-docs-example-metrics.txt",
        "vllm-0.6-v0-excerpt-metrics.txt",
        "sim-v1",
        "sim-v0",
        'vllm:request_success_total{model_name="a \\"q\\" \\\\ b",finished_reason="stop"} 3\n'
        'vllm:request_success_total{finished_reason="length"} 4 1700000000000\n',
    ],
)
def test_fast_parser_equals_prometheus_client(page: str) -> None:
    if page.endswith(".txt"):
        text = (GOLDENS / page).read_text()
    elif page.startswith("sim-"):
        text = _sim_page(page[4:])
    else:
        text = "# TYPE vllm:request_success_total counter\n" + page
    fast, ref = parse_page(text), parse_page(text, reference=True)
    assert fast.scalars == ref.scalars and fast.histograms == ref.histograms
    assert fast.families_seen == ref.families_seen and fast.families_seen

"""How the emulator saturates, in virtual time: on the GPU (compute and bandwidth), on KV cache
capacity, and on max_num_seqs, each recognisable from the engine's state as in vLLM."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.virtual import RequestSpec, VirtualRun, run_closed_loop

pytestmark = pytest.mark.simulated_time


def prompt_of(length: int) -> Callable[[int, int], list[int]]:
    return lambda client, i: [(client * 31 + i * 7 + k) % 256 for k in range(length)]


def tokens_per_s(run: VirtualRun, start_s: float, end_s: float) -> float:
    """Output throughput over a window (skips the ramp-up)."""
    n = sum(1 for r in run.requests for t in r.token_times_s if start_s <= t < end_s)
    return n / (end_s - start_s)


def test_gpu_bound_throughput_flattens_while_kv_stays_low() -> None:
    prompt = prompt_of(256)
    throughput: dict[int, float] = {}
    step_s: dict[int, float] = {}
    for concurrency in (1, 2, 32, 128, 256):
        engine = SimEngine("a40-qwen2.5-7b", EngineConfig())
        run = run_closed_loop(
            engine, concurrency, 10**6, lambda c, i: RequestSpec(prompt(c, i), max_tokens=128), until_s=40.0
        )
        throughput[concurrency] = tokens_per_s(run, 10.0, 40.0)
        step_s[concurrency] = sum(s.duration_s for s in run.timeline) / len(run.timeline)
        # Bounded by the GPU, not by memory for the KV cache: nobody waits for blocks.
        assert engine.counters.max_kv_cache_usage_ratio < 0.5
        assert engine.counters.steps_waiting_by_cause["kv_cache"] == 0
        assert engine.counters.num_preemptions == 0
    # Doubling one client doubles throughput; doubling 128 clients gains far less: a plateau forming.
    assert throughput[2] / throughput[1] > 1.9
    assert throughput[256] / throughput[128] < 1.5
    assert throughput[32] < throughput[128] < throughput[256]
    # Per-client throughput collapses because every step takes longer.
    assert throughput[256] / 256 < 0.35 * throughput[1]
    assert step_s[256] > 2.5 * step_s[1]


@pytest.mark.parametrize("preset", ["v1", "v0"])
def test_kv_bound_run_preempts_and_still_completes_every_request(preset: str) -> None:
    # 800 blocks of 16 = 12,800 tokens: room for about 7 of these 1,800-token sequences.
    engine = SimEngine("a40-qwen2.5-7b", EngineConfig(preset=preset, num_gpu_blocks=800, max_model_len=4096))
    prompt = prompt_of(1500)
    run = run_closed_loop(
        engine, 24, 3, lambda c, i: RequestSpec(prompt(c, i), max_tokens=300), stagger_s=0.05
    )
    timeline = run.timeline
    assert max(s.kv_cache_usage_ratio for s in timeline) >= 0.95
    assert engine.counters.num_preemptions > 0
    assert engine.counters.steps_waiting_by_cause["kv_cache"] > 0
    assert any(s.waiting_cause == "kv_cache" and s.num_waiting > 0 for s in timeline)
    assert max(s.num_running for s in timeline) < 24  # far from max_num_seqs: KV is the limit
    assert len(run.requests) == 72
    for r in run.requests:
        assert r.finish_reason == "length"
        assert r.num_output_tokens == 300
        assert len(r.token_times_s) == 300
    preempted = [r for r in run.requests if r.times is not None and r.times.num_preemptions > 0]
    assert preempted
    # A preempted request stalls (its blocks were recomputed) but keeps the tokens it had sent.
    assert max(max(r.itls_s) for r in preempted) > 5 * min(min(r.itls_s) for r in preempted)


def test_preemption_resumes_where_the_stream_stopped() -> None:
    engine = SimEngine("a40-qwen2.5-7b", EngineConfig(num_gpu_blocks=300, max_model_len=4096))
    for i in range(6):
        engine.add_request(f"r{i}", [i] * 1000, max_tokens=200, ignore_eos=True, arrival_time_s=0.0)
    counts: dict[str, list[int]] = {f"r{i}": [] for i in range(6)}
    texts: dict[str, str] = {f"r{i}": "" for i in range(6)}
    now = 0.0
    while engine.has_work:
        plan = engine.schedule(now)
        assert plan is not None
        now += plan.duration_s
        for out in engine.complete(plan, now):
            counts[out.request_id].append(out.num_output_tokens)
            texts[out.request_id] += out.new_text
    assert engine.counters.num_preemptions > 0
    for request_id, seen in counts.items():
        assert seen == list(range(1, 201)), request_id  # no token repeated or skipped
    # The generated text depends only on the request, not on how often it was preempted.
    alone = SimEngine("a40-qwen2.5-7b", EngineConfig(max_model_len=4096))
    for i in range(6):
        alone.add_request(f"r{i}", [i] * 1000, max_tokens=200, ignore_eos=True, arrival_time_s=0.0)
    alone_texts = {f"r{i}": "" for i in range(6)}
    while alone.has_work:
        plan = alone.schedule(now)
        assert plan is not None
        for out in alone.complete(plan, now):
            alone_texts[out.request_id] += out.new_text
    assert texts == alone_texts


def test_max_num_seqs_bound_run_pins_running_while_kv_has_room() -> None:
    engine = SimEngine("a40-qwen2.5-7b", EngineConfig(max_num_seqs=8))
    prompt = prompt_of(64)
    run = run_closed_loop(engine, 32, 4, lambda c, i: RequestSpec(prompt(c, i), max_tokens=64))
    timeline = run.timeline
    busy = [s for s in timeline if s.num_waiting > 0]
    assert len(busy) > 0.8 * len(timeline)
    assert all(s.num_running == 8 for s in busy)
    assert max(s.num_running for s in timeline) == 8
    assert max(s.kv_cache_usage_ratio for s in timeline) < 0.05
    assert engine.counters.steps_waiting_by_cause["max_num_seqs"] > 0.5 * len(timeline)
    assert engine.counters.steps_waiting_by_cause["kv_cache"] == 0
    assert all(r.num_output_tokens == 64 for r in run.requests)

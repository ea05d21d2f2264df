"""CPU cost of a step: proportional to the running requests, independent of the KV cache size."""

from __future__ import annotations

import time

from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.metrics import SimMetrics


def decode_step_cpu_s(num_running: int, num_gpu_blocks: int | None = None, steps: int = 50) -> float:
    """Median CPU time of schedule() + complete() with ``num_running`` requests all decoding."""
    config = EngineConfig(
        max_num_seqs=1024, max_num_batched_tokens=8192, num_gpu_blocks=num_gpu_blocks, max_model_len=16_000
    )
    engine = SimEngine("a40-qwen2.5-7b", config, metrics=SimMetrics("m"))
    for i in range(num_running):
        engine.add_request(f"r{i}", [i % 256] * 100, max_tokens=10_000, ignore_eos=True, arrival_time_s=0.0)
    now = 0.0
    while True:  # until every prompt is prefilled
        plan = engine.schedule(now)
        assert plan is not None
        now += plan.duration_s
        engine.complete(plan, now)
        if plan.num_prefill_tokens == 0:
            break
    assert engine.num_running == num_running
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        plan = engine.schedule(now)
        assert plan is not None and plan.num_decode_tokens == num_running
        now += plan.duration_s
        outputs = engine.complete(plan, now)
        samples.append(time.perf_counter() - start)
        assert len(outputs) == num_running
    return sorted(samples)[len(samples) // 2]


def test_thousand_running_sequences_step_in_about_a_millisecond() -> None:
    cpu_s = decode_step_cpu_s(1000)
    # About 1 ms on a 2-core Xeon VM (0.2 ms schedule, 0.8 ms complete); generous for slow CI machines.
    assert cpu_s < 0.01, f"{cpu_s * 1e3:.2f} ms per step"


def test_step_cost_does_not_grow_with_the_kv_cache() -> None:
    small = min(decode_step_cpu_s(200, num_gpu_blocks=2_000) for _ in range(3))
    large = min(decode_step_cpu_s(200, num_gpu_blocks=200_000) for _ in range(3))
    assert large < 3 * small

"""The A40 profile against published measurements: one request at a time, 64 output tokens."""

from __future__ import annotations

import pytest

from tokenload.sim.engine import EngineConfig, SimEngine
from tokenload.sim.virtual import RequestSpec, run_closed_loop

pytestmark = pytest.mark.simulated_time

# Source: the project's reference notes (shared/reference/seed-context-length.md), from the
# llm-inference-lab write-up: vLLM 0.6.6.post1, Qwen2.5-7B-Instruct bf16, one NVIDIA A40,
# concurrency 1, output fixed at 64 tokens, times from vLLM's /metrics histograms, in ms.
REFERENCE = [
    # input tokens, TTFT ms, TPOT ms
    (121, 37.3, 29.07),
    (511, 73.6, 28.86),
    (2041, 261.8, 28.96),
    (8191, 1736.0, 30.70),
]
TOLERANCE = 0.10


def replay(input_tokens: int) -> tuple[float, float]:
    """TTFT and TPOT (ms) of the emulator for one row: v0 preset, one client, 64 tokens."""
    engine = SimEngine("a40-qwen2.5-7b", EngineConfig(preset="v0"))
    prompt = [(7 * i) % 256 for i in range(input_tokens)]
    run = run_closed_loop(engine, 1, 3, lambda c, i: RequestSpec(prompt, max_tokens=64, ignore_eos=True))
    ttfts = [r.ttft_s for r in run.requests]
    tpots = [r.tpot_s for r in run.requests]
    assert all(r.num_output_tokens == 64 for r in run.requests)
    # Concurrency 1: no queueing, so every request sees the same times.
    assert max(ttfts) - min(ttfts) < 1e-9
    return ttfts[0] * 1e3, sum(tpots) / len(tpots) * 1e3


@pytest.mark.parametrize(("input_tokens", "ttft_ms", "tpot_ms"), REFERENCE)
def test_a40_reproduces_reference_row(input_tokens: int, ttft_ms: float, tpot_ms: float) -> None:
    sim_ttft_ms, sim_tpot_ms = replay(input_tokens)
    assert sim_ttft_ms == pytest.approx(ttft_ms, rel=TOLERANCE), f"TTFT {sim_ttft_ms:.1f} vs {ttft_ms}"
    assert sim_tpot_ms == pytest.approx(tpot_ms, rel=TOLERANCE), f"TPOT {sim_tpot_ms:.2f} vs {tpot_ms}"


def test_prefill_grows_superlinearly_like_the_reference() -> None:
    # 2041 -> 8191 tokens is 4x the input and 6.6x the TTFT in the reference: attention's quadratic term.
    ttft_2k, _ = replay(2041)
    ttft_8k, _ = replay(8191)
    assert 5.5 < ttft_8k / ttft_2k < 7.5


def test_v1_preset_chunks_long_prompts_and_is_slower_to_first_token_there() -> None:
    # V1's 2048-token budget splits the 8191-token prompt into 4 steps, each paying the weight
    # read and overhead: TTFT is higher than V0's single prefill, and decode is unchanged.
    prompt = [(7 * i) % 256 for i in range(8191)]
    engine = SimEngine("a40-qwen2.5-7b", EngineConfig(preset="v1"))
    run = run_closed_loop(engine, 1, 1, lambda c, i: RequestSpec(prompt, max_tokens=64))
    v1_ttft_ms = run.requests[0].ttft_s * 1e3
    v0_ttft_ms, _ = replay(8191)
    assert v0_ttft_ms < v1_ttft_ms < 1.3 * v0_ttft_ms
    assert engine.counters.num_steps == 4 + 63

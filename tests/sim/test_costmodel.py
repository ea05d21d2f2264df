"""The roofline step-time model."""

from __future__ import annotations

import pytest

from tokenload.sim.costmodel import BatchShape, CostModel, PrefillChunk, step_cost
from tokenload.sim.profile import EfficiencySpec, load_profile

pytestmark = pytest.mark.simulated_time


@pytest.fixture
def a40() -> CostModel:
    return CostModel.from_profile(load_profile("a40-qwen2.5-7b"))


def test_decode_is_memory_bound_and_reads_the_weights(a40: CostModel) -> None:
    cost = a40.cost(num_decode_seqs=1, decode_context_tokens=100)
    assert cost.memory_s > 10 * cost.compute_s
    assert cost.read_bytes == pytest.approx(a40.weight_bytes + 100 * a40.kv_bytes_per_token)
    # Reference: about 15.2 GB of weights over 696 GB/s is about 22 ms; measured TPOT 29 ms.
    assert 0.022 < cost.duration_s < 0.032


def test_long_prefill_is_compute_bound_and_quadratic(a40: CostModel) -> None:
    short = a40.batch_cost(BatchShape(prefill_chunks=[PrefillChunk(1024)]))
    long = a40.batch_cost(BatchShape(prefill_chunks=[PrefillChunk(8192)]))
    assert long.compute_s > long.memory_s
    assert long.compute_s / short.compute_s > 8 * 1.2  # more than linear in the tokens


def test_chunk_against_its_context_costs_more_than_the_same_chunk_alone(a40: CostModel) -> None:
    alone = a40.batch_cost(BatchShape(prefill_chunks=[PrefillChunk(2048, 0)]))
    late = a40.batch_cost(BatchShape(prefill_chunks=[PrefillChunk(2048, 6144)]))
    assert late.duration_s > alone.duration_s
    assert late.read_bytes - alone.read_bytes == pytest.approx(6144 * a40.kv_bytes_per_token)


def test_more_decode_sequences_cost_more_but_less_than_proportionally(a40: CostModel) -> None:
    one = a40.cost(1, 500)
    many = a40.cost(64, 64 * 500)
    assert one.duration_s < many.duration_s < 64 * one.duration_s


def test_overlap_one_is_the_ideal_roofline_and_zero_the_sum() -> None:
    profile = load_profile("a40-qwen2.5-7b")
    batch = BatchShape(num_decode_seqs=32, decode_context_tokens=32 * 800, prefill_chunks=[PrefillChunk(512)])
    costs = {}
    for overlap in (0.0, 1.0):
        eff = EfficiencySpec(**{**profile.efficiency.model_dump(), "compute_memory_overlap": overlap})
        costs[overlap] = step_cost(profile.model_copy(update={"efficiency": eff}), batch)
    ideal, serial = costs[1.0], costs[0.0]
    overhead = profile.step_overhead_s
    assert ideal.duration_s == pytest.approx(max(ideal.compute_s, ideal.memory_s) + overhead)
    assert serial.duration_s == pytest.approx(serial.compute_s + serial.memory_s + overhead)


def test_empty_batch_costs_nothing(a40: CostModel) -> None:
    assert a40.batch_cost(BatchShape()).duration_s == 0.0


def test_fp8_profile_uses_the_fp8_peak() -> None:
    profile = load_profile("h200-llama3.1-70b-fp8")
    model = CostModel.from_profile(profile)
    expected = profile.gpu.peak_fp8_flops_per_s * profile.efficiency.prefill_matmul  # type: ignore[operator]
    assert model.matmul_flops_per_s == pytest.approx(expected)

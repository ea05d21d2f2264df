"""The diagnosis' counterfactual step model (tokenload.analysis.stepmodel): each relaxation
changes the term it names, and the fixed time is found from two steps of a series."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenload.analysis.stepmodel import MACHINE_BALANCE, STEP_OVERHEAD_MS, StepModel

pytestmark = pytest.mark.simulated_time


def roofline(c: float, m: float, overlap: float) -> float:
    return max(c, m) + (1 - overlap) * min(c, m)


def test_a_memory_bound_step_gains_from_bandwidth_not_flops() -> None:
    # 40 FLOP/byte per step against a balance of 270: memory time is 6.75x the compute time.
    m = StepModel.from_counters(40e9, 1e9, 0.9e9, MACHINE_BALANCE, "t")
    assert m.gain(bandwidth=2.0) > 0.6
    assert m.gain(flops=2.0) < 0.1
    assert m.memory_share > 0.8 > 0.2 > m.compute_share


def test_a_compute_bound_step_gains_from_flops() -> None:
    m = StepModel.from_counters(1000e9, 1e9, 0.9e9, MACHINE_BALANCE, "t")  # 1000 FLOP/byte
    assert m.gain(flops=2.0) > 0.6 > 0.1 > m.gain(bandwidth=2.0)


def test_the_batch_grows_compute_and_the_kv_reads_not_the_weights() -> None:
    m = StepModel(compute=2.0, memory_fixed=8.0, memory_batch=2.0, overlap=0.0, how="t")
    assert m.time() == pytest.approx(12.0)
    assert m.time(batch=2.0) == pytest.approx(4.0 + 8.0 + 4.0)
    # Twice the tokens per step in 16/12 the time.
    assert m.gain(batch=2.0) == pytest.approx(2 * 12 / 16 - 1)


def test_overlap_hides_the_shorter_term() -> None:
    for overlap in (0.0, 0.5, 1.0):
        m = StepModel(3.0, 5.0, 0.0, overlap, "t")
        assert m.time() == pytest.approx(roofline(3.0, 5.0, overlap))


def test_overhead_found_from_a_second_step_of_the_series() -> None:
    # Hidden truth: 4 ms of fixed time plus 1 ms per unit of roofline work.
    small = StepModel(1.0, 10.0, 1.0, 0.5, "t")
    large = StepModel(8.0, 10.0, 8.0, 0.5, "t")
    ms_small, ms_large = 4.0 + small.time(), 4.0 + large.time()
    found = large.with_overhead(ms_large, small, ms_small, floor_ms=STEP_OVERHEAD_MS)
    assert found.overhead == pytest.approx(4.0)  # units of 1 ms here
    # Same work in both steps: not determined, so the floor.
    floor = large.with_overhead(ms_large, large, ms_large, floor_ms=STEP_OVERHEAD_MS)
    assert floor.overhead * (ms_large - STEP_OVERHEAD_MS) / large.time() == pytest.approx(STEP_OVERHEAD_MS)


def test_a_fixed_time_favours_a_larger_batch_over_more_bandwidth() -> None:
    # Weights-bound decode with a tiny batch (the KV cache holds few requests): without any fixed
    # time both relaxations would double the throughput; with it only the batch still does.
    bare = StepModel(0.1, 20.0, 0.2, 0.5, "t")
    assert bare.gain(bandwidth=2.0) > bare.gain(batch=2.0)
    real = bare.with_overhead(22.0, floor_ms=STEP_OVERHEAD_MS)
    assert real.gain(batch=2.0) > real.gain(bandwidth=2.0)


def test_prior_models_do_not_claim_a_measured_growth() -> None:
    assert not StepModel.from_tokens(64, 32, 1000, 800, "t").measured_growth
    assert not StepModel.from_counters(1e9, 1e9, None, MACHINE_BALANCE, "t").measured_growth
    assert StepModel.from_counters(1e9, 1e9, 0.5e9, MACHINE_BALANCE, "t").measured_growth
    assert StepModel.from_line(20.0, 0.1, 64, 0.2, "t", STEP_OVERHEAD_MS).measured_growth


def test_the_judge_and_the_ground_truth_share_their_definitions() -> None:
    from tokenload.analysis.thresholds import Thresholds
    from tokenload.sim.oracle import SATURATION_GAIN, SECONDARY_SHARE

    assert Thresholds().saturation_gain == SATURATION_GAIN
    assert Thresholds().secondary_share == SECONDARY_SHARE


def test_a_given_cap_bounds_the_demand_a_larger_cache_must_hold() -> None:
    # An open loop's queue grows without bound, so a cache twice the size fills again and the
    # preemptions go on, one a cache overrun as now, among twice the batch: half the share is
    # saved (RECOMPUTE_SAVED_OVERFILLED; it was none, which the oracle contradicted: cache-bound
    # preempting steps gained up to +211 % from a 2x cache). With max_num_seqs 8 given, no more
    # than 8 ever run: a cache that holds twice the 4.7 running holds them all, and the
    # recomputation ends.
    from tokenload.analysis.headroom import recompute_share
    from tokenload.analysis.signals import StepSignals

    sig = StepSignals(
        load=2.0, prev_load=1.0, closed_loop=False, throughput=600.0, throughput_source="t",
        prev_throughput=590.0, step_ms=7.1, step_source="t", prev_step_ms=7.0, tokens_per_step=12.4,
        prev_tokens_per_step=11.9, ref_step_ms=None, ref_tokens_per_step=None, decode_share=0.35,
        context_tokens=890.0, running_mean=4.7, running_max=6.0, prev_running_max=6.0,
        waiting_mean=24.0, kv_mean=0.93, kv_max=1.0, preemptions=11.0, flops_share=None,
        bytes_share=None, engine_steps=2107.0,
    )  # fmt: skip
    redone = 11.0 * 890.0
    share = redone / (redone + 12.4 * 2107)
    assert recompute_share(sig) == pytest.approx(0.5 * share)
    assert recompute_share(replace(sig, max_num_seqs=8.0)) == pytest.approx(share)
    assert recompute_share(replace(sig, max_num_seqs=16.0)) == pytest.approx(0.5 * share)  # 16 would not fit
    assert recompute_share(replace(sig, preemptions=0.0)) == 0.0


def test_a_line_whose_intercept_is_worth_more_than_a_weights_read_does_not_split_a_step() -> None:
    # Development seed 5 #98 (Llama-3.1-70B FP8, H200, 9,952-token prompts), as the virtual sweep
    # timed it before its steps settled: the line through a mostly-decode step and a prefill one,
    # 20.2 ms + 0.0075 ms/token, has an intercept worth ~2,600 tokens of matmuls (it spans the
    # roofline's corner); a line whose intercept is a weights' read is kept.
    from tokenload.analysis.headroom import _line_rejected
    from tokenload.analysis.stepmodel import WEIGHTS_READ_MAX_TOKENS

    why = _line_rejected((20.2, 0.0075), STEP_OVERHEAD_MS)
    assert why is not None and "intercept worth" in why
    assert (20.2 - STEP_OVERHEAD_MS) / 0.0075 > WEIGHTS_READ_MAX_TOKENS
    assert (
        _line_rejected((STEP_OVERHEAD_MS + 0.5 * WEIGHTS_READ_MAX_TOKENS * 0.01, 0.01), STEP_OVERHEAD_MS)
        is None
    )
    assert "saw no growth" in (_line_rejected((12.0, 0.0), STEP_OVERHEAD_MS) or "")
    assert _line_rejected(None, STEP_OVERHEAD_MS) is None


def test_the_step_overhead_floor_is_a_threshold_the_model_obeys() -> None:
    # One step of an open loop with no step below: the tokens' model, its fixed time the floor.
    # A user who knows the engine's (vLLM V0's steps cost about 3 ms outside their kernels) sets
    # it with --threshold step_overhead_ms=3, and the model takes that share of the step.
    from tokenload.analysis.headroom import step_model
    from tokenload.analysis.signals import StepSignals
    from tokenload.analysis.thresholds import Thresholds

    sig = StepSignals(
        load=2.0, prev_load=None, closed_loop=False, throughput=600.0, throughput_source="t",
        prev_throughput=None, step_ms=20.0, step_source="t", prev_step_ms=None, tokens_per_step=40.0,
        prev_tokens_per_step=None, ref_step_ms=None, ref_tokens_per_step=None, decode_share=0.9,
        context_tokens=900.0, running_mean=36.0, running_max=40.0, prev_running_max=None,
        waiting_mean=0.0, kv_mean=0.3, kv_max=0.4, preemptions=0.0, flops_share=None,
        bytes_share=None, engine_steps=2000.0,
    )  # fmt: skip
    for ms in (1.0, 3.0):
        model = step_model(sig, Thresholds(step_overhead_ms=ms))
        assert model is not None
        assert model.overhead / model.time() == pytest.approx(ms / 20.0)
    with pytest.raises(ValueError, match="step_overhead_ms"):
        Thresholds(step_overhead_ms=-1.0)

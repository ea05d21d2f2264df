"""The twin's host scales (tests/real_vllm/twin.py ``host_scales``): pure, no vLLM needed.
A context sweep at one user whose TPOT does not grow with the context bounds the KV reads'
cost, and so raises the bandwidth scale above what the weights' read alone allows."""

from __future__ import annotations

import pytest

from tests.real_vllm.twin import TPOT_RESOLUTION, base_profile, host_scales, kv_bytes_per_token, tiny_params

pytestmark = pytest.mark.simulated_time


def sweep(tpot_ms: tuple[float, float, float]) -> list[dict]:
    """A context sweep at one user, out of order (host_scales sorts it): the 2026-12-07 host's
    TTFT p50 at 1,024 / 64 / 256 prompt tokens (bench/RESULTS.md, twin_vllm), the TPOTs given."""
    steps = zip((1024, 64, 256), (22.4, 10.7, 12.1), tpot_ms, strict=True)
    return [{"prompt_tokens": n, "ttft_ms": {"p50": t}, "tpot_ms": {"p50": p}} for n, t, p in steps]


def kv_cost_s(bandwidth: float, tokens: int) -> float:
    """What the sweep's extra context costs a step at the base kv_read efficiency."""
    return kv_bytes_per_token() * tokens / (base_profile()["efficiency"]["kv_read"] * bandwidth)


def weights_s(bandwidth: float) -> float:
    return 2 * tiny_params() / (base_profile()["efficiency"]["decode_bandwidth"] * bandwidth)


def test_a_flat_sweep_prices_the_kv_reads_by_its_spread_not_by_the_weights_read() -> None:
    # TPOT p50 3.49 / 3.56 / 3.42 ms at 1,024 / 64 / 256 tokens: no growth beyond 0.14 ms.
    _, bw = host_scales(sweep((3.49, 3.56, 3.42)))
    assert kv_cost_s(bw, 1024 - 64) == pytest.approx(0.00014, rel=1e-6)
    # The weights' read is then a small part of the step: the rest is fixed time to fit.
    assert weights_s(bw) < 0.2 * 0.00342


def test_a_steep_sweep_keeps_the_weights_bound() -> None:
    # TPOT growing 3 ms across the contexts: the KV bound is below the weights' one, which holds
    # (the weights' read takes the fastest TPOT at the base efficiency, as before the KV bound).
    _, bw = host_scales(sweep((6.0, 3.0, 3.5)))
    assert weights_s(bw) == pytest.approx(0.003, rel=1e-6)
    assert kv_cost_s(bw, 1024 - 64) < 0.003


def test_a_perfectly_flat_sweep_is_bounded_by_the_resolution() -> None:
    _, bw = host_scales(sweep((3.5, 3.5, 3.5)))
    assert kv_cost_s(bw, 1024 - 64) == pytest.approx(TPOT_RESOLUTION * 0.0035, rel=1e-6)

"""The metric formulas, on hand-computed examples."""

import pytest

from tokenload.metrics.definitions import FORMULAS, compute_timing
from tokenload.metrics.records import itl_summary


def test_ttft_tpot_e2e_itl() -> None:
    # sent at 10.0 s; content at +50 ms, +60 ms, +80 ms (a chunk of 2 tokens); ends at +81 ms
    t = compute_timing(10.0, [10.050, 10.060, 10.080], [1, 1, 2], 10.081, output_tokens=4)
    assert t.ttft_ms == pytest.approx(50.0)
    assert t.e2e_ms == pytest.approx(81.0)
    assert t.tpot_ms == pytest.approx((81.0 - 50.0) / 3)
    assert [(round(v, 6), k) for v, k in t.itl_ms] == [(10.0, 1), (10.0, 2)]


def test_undefined_metrics_are_none() -> None:
    t = compute_timing(0.0, [], [], None, output_tokens=0)
    assert (t.ttft_ms, t.e2e_ms, t.tpot_ms, t.itl_ms) == (None, None, None, [])
    one = compute_timing(0.0, [0.1], [1], 0.2, output_tokens=1)
    assert one.tpot_ms is None and one.ttft_ms == pytest.approx(100.0)


def test_itl_summary_weights_by_tokens() -> None:
    s = itl_summary([(10.0, 1), (2.0, 3)])
    assert s["itl_count"] == 4
    assert s["itl_mean_ms"] == pytest.approx(4.0)
    assert s["itl_p50_ms"] == 2.0 and s["itl_max_ms"] == 10.0


def test_formulas_are_documented_for_every_metric() -> None:
    assert {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_time_ms"} <= set(FORMULAS)
    assert "(output_tokens - 1)" in FORMULAS["tpot_ms"]

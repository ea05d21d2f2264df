"""--target-moe: parsing, and the margin of error of a figure on realistic (lognormal) latencies."""

from __future__ import annotations

import math
import random

import pytest

from tokenload.metrics.histogram import LogHistogram
from tokenload.metrics.precision import MoeError, margin_of_error, parse_target_moe, targets_met


def test_parse() -> None:
    assert parse_target_moe("ttft_p95=0.05, tpot_mean=0.02") == {"ttft_p95": 0.05, "tpot_mean": 0.02}
    assert parse_target_moe("") == {}
    for bad in ("ttft_p95", "ttft_p97=0.1", "kv_p50=0.1", "ttft_p95=1.5", "ttft_p95=0", "ttft_p95=x",
                "ttft_p95=0.1,ttft_p95=0.2"):  # fmt: skip
        with pytest.raises(MoeError, match=r"^--target-moe: "):
            parse_target_moe(bad)


def _lognormal(n: int, sigma: float, seed: int) -> LogHistogram:
    rng = random.Random(seed)
    h = LogHistogram()
    for _ in range(n):
        h.add(200.0 * math.exp(rng.gauss(0, sigma)))
    return h


def test_the_margin_shrinks_with_requests_and_needs_enough_of_them() -> None:
    sigma = 0.83  # CV 1.0
    small, large = _lognormal(100, sigma, 1), _lognormal(10_000, sigma, 1)
    assert margin_of_error(_lognormal(60, sigma, 1), "p99") is None  # p99 of 60: not bounded
    m_small, m_large = margin_of_error(small, "p50"), margin_of_error(large, "p50")
    assert m_small is not None and m_large is not None and m_large < m_small / 5
    # The median of 10,000 lognormal values (CV 1.0) is known to about +-2.1 % (normal theory:
    # 1.96 x sqrt(pi/2) x sigma / sqrt(n)); the histogram's 1 % buckets widen it a little.
    expected = 1.96 * math.sqrt(math.pi / 2) * sigma / math.sqrt(10_000)
    assert expected * 0.7 < m_large < expected * 1.8 + 0.01, (m_large, expected)
    assert margin_of_error(large, "mean") is not None


def test_targets_are_met_only_when_every_one_is() -> None:
    hists = {"ttft_ms": _lognormal(3000, 0.47, 2), "tpot_ms": _lognormal(30, 0.47, 3)}
    met, margins = targets_met(hists, {"ttft_p50": 0.05})
    assert met and margins["ttft_p50"] <= 0.05
    met, margins = targets_met(hists, {"ttft_p50": 0.05, "tpot_p95": 0.05})
    assert not met and (margins["tpot_p95"] is None or margins["tpot_p95"] > 0.05)

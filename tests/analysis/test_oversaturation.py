"""The waiting-queue trend that tells over-saturation (a queue growing without bound) from a
queue that settled."""

from __future__ import annotations

import pytest

from tokenload.analysis.oversaturation import waiting_trend

pytestmark = pytest.mark.simulated_time


def test_a_growing_queue_is_oversaturated() -> None:
    t = waiting_trend([(i * 1.0, 2.0 * i) for i in range(10)])
    assert t is not None and t["oversaturated"] and t["per_s"] == 2.0 and t["growth"] == 18.0


def test_a_settled_queue_is_not() -> None:
    # A high but flat queue (a saturated closed loop): no trend.
    t = waiting_trend([(i * 1.0, 30.0 + (i % 2)) for i in range(12)])
    assert t is not None and not t["oversaturated"]
    # A queue that fills during the ramp and then holds: growth is small against its level.
    t = waiting_trend([(i * 1.0, min(i, 3) * 1.0) for i in range(12)])
    assert t is not None and not t["oversaturated"]


def test_too_few_samples_say_nothing() -> None:
    assert waiting_trend([(0.0, 1.0), (1.0, 5.0), (2.0, 9.0)]) is None

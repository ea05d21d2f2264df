"""What ends a staircase early (``StepShape._stop_condition``): a step whose failed share of its
ended requests is above ``--stop-error-rate``."""

from __future__ import annotations

from locust.event import Events

from types import SimpleNamespace
from typing import Any

from tokenload.loadgen.shapes import StaircaseShape


def _shape(stop_error_rate: float) -> Any:
    opts = SimpleNamespace(concurrency="1,2", stop_error_rate=stop_error_rate, no_stop_oversaturated=True)
    shape = StaircaseShape()
    shape.runner = SimpleNamespace(
        user_count=0, environment=SimpleNamespace(parsed_options=opts, events=Events())
    )
    return shape


def _step(ok: int, failed: int) -> dict[str, Any]:
    return {"index": 1, "requests": {"ok": ok, "failed": failed, "by_failure_class": {"http_5xx": failed}}}


def test_a_failed_share_above_the_limit_stops_the_run_and_says_of_how_many() -> None:
    shape = _shape(0.2)
    assert shape._stop_condition([_step(7, 3)]) == "--stop-error-rate: step 1 failed 3 of 10 (> 0.2)"
    assert shape._stop_condition([_step(8, 2)]) is None  # 0.2 is not above 0.2
    # A step none of whose requests ended has no failed share: nothing to stop on.
    assert shape._stop_condition([_step(0, 0)]) is None
    assert shape._stop_condition([{"index": 0}]) is None
    assert shape._stop_condition([]) is None

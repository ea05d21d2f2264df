"""A closed-loop step whose users paused after turn-aways (HTTP 429/503, an unreachable target)
offered less than its concurrency: ``backoff_share`` (FORMULAS) and the ``turned_away`` flag
above 1 % of the users' time, counted through a worker's report as on the master."""

from __future__ import annotations

from typing import Any

import pytest

from tokenload.loadgen.phases import StepWindow
from tokenload.metrics.aggregate import LLMStats, NameStats
from tokenload.metrics.step_tally import new_tally
from tokenload.results.summary import TURNED_AWAY_SHARE, step_summary


def _record(backoff_ms: float | None, failure: str | None = None) -> dict[str, Any]:
    return {
        "name": "/v1/completions",
        "failure_class": failure,
        "input_tokens": 100,
        "output_tokens": 0 if failure else 33,
        "token_count_diff": 0,
        "ttft_ms": None if failure else 40.0,
        "tpot_ms": None if failure else 7.0,
        "e2e_ms": 3.0 if failure else 264.0,
        "backoff_ms": backoff_ms,
    }


def _step(stats: LLMStats, users: int | None = 16, rate: float | None = None) -> dict[str, Any]:
    # 8 s measured (102 -> 110).
    return step_summary(StepWindow(0, users, rate, 100.0, 102.0, 110.0), stats, new_tally(), None, 20.0, [])


def test_the_users_pauses_are_a_share_of_the_asked_concurrency() -> None:
    stats = LLMStats()
    for _ in range(200):
        stats.record(_record(None), [(7.0, 1)] * 32)
    for pause in (50.0, 100.0, 200.0, 50.0):  # 400 ms after four 429s
        stats.record(_record(None, "http_429"), [])
        stats.record(_record(pause), [(7.0, 1)] * 32)
    step = _step(stats)
    assert step["backoff_share"] == pytest.approx(0.4 / (16 * 8.0))  # 0.3 %: a 429 now and then
    assert "turned_away" not in step["flags"]
    for _ in range(30):  # 30 more pauses of 1 s: 30.4 s of 128 user-seconds
        stats.record(_record(1000.0), [(7.0, 1)] * 32)
    step = _step(stats)
    assert step["backoff_share"] == pytest.approx(30.4 / 128) and step["backoff_share"] > TURNED_AWAY_SHARE
    assert "turned_away" in step["flags"]
    # What a worker reports, merged on the master, counts the same.
    master = NameStats()
    master.merge_dict(stats.total.to_dict())
    assert master.backoff_ms == pytest.approx(30_400.0)


def test_an_open_loop_step_has_no_backoff_share() -> None:
    stats = LLMStats()
    stats.record(_record(None), [(7.0, 1)] * 32)
    step = _step(stats, users=None, rate=4.0)
    assert step["backoff_share"] is None and "turned_away" not in step["flags"]

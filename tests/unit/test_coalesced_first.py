"""A first token read behind later ones makes a step ``client_bound`` only when it may be dated
later than the client's tolerance (metrics.definitions: coalesced_first_late_share): a first token
dated by the next one's packet at a short TPOT is late by less than a loop lag the client accepts."""

from __future__ import annotations

from typing import Any

import pytest

from tokenload.loadgen.phases import StepWindow
from tokenload.metrics.aggregate import LLMStats, NameStats
from tokenload.metrics.definitions import CLIENT_LAG_LIMIT_MS, coalesced_first_is_late
from tokenload.metrics.step_tally import new_tally
from tokenload.results.summary import step_summary


def test_a_coalesced_read_is_late_when_its_bound_passes_the_tolerance_or_is_unknown() -> None:
    assert not coalesced_first_is_late(False, 5, 50.0)
    assert not coalesced_first_is_late(None, None, None)
    # (k - 1) x TPOT: 1 x 8 ms and 2 x 5 ms are within 10 ms; 1 x 12 ms and 3 x 5 ms are not.
    assert not coalesced_first_is_late(True, 2, 8.0)
    assert not coalesced_first_is_late(True, 3, CLIENT_LAG_LIMIT_MS / 2)
    assert coalesced_first_is_late(True, 2, 12.0)
    assert coalesced_first_is_late(True, 4, 5.0)
    # A lateness that cannot be bounded (one output token, or no event count) counts.
    assert coalesced_first_is_late(True, 2, None)
    assert coalesced_first_is_late(True, None, 5.0)


def _record(coalesced: bool, events: int, tpot_ms: float) -> dict[str, Any]:
    return {
        "name": "/v1/completions",
        "failure_class": None,
        "input_tokens": 100,
        "output_tokens": 33,
        "token_count_diff": 0,
        "ttft_ms": 400.0,
        "tpot_ms": tpot_ms,
        "e2e_ms": 400.0 + 32 * tpot_ms,
        "first_read_coalesced": coalesced,
        "first_read_events": events,
    }


def _stats(coalesced: int, events: int, tpot_ms: float, n: int = 200) -> LLMStats:
    stats = LLMStats()
    for i in range(n):
        stats.record(_record(i < coalesced, events if i < coalesced else 1, tpot_ms), [(tpot_ms, 1)] * 32)
    return stats


def _client(stats: LLMStats) -> tuple[dict[str, Any], list[str]]:
    s = step_summary(
        StepWindow(0, 16, None, 100.0, 102.0, 110.0), stats, new_tally(), None, 20.0, [0.001] * 50
    )
    return s["client"], s["flags"]


def test_many_first_tokens_a_short_token_gap_late_do_not_bound_the_client() -> None:
    # 20 of 200 first tokens (10 %) dated by the next one's packet, 7 ms behind.
    client, flags = _client(_stats(20, 2, 7.0))
    assert client["coalesced_first_share"] == pytest.approx(0.1)
    assert client["coalesced_first_late_share"] == 0.0
    assert client["coalesced_first_late_ms_max"] == pytest.approx(7.0)
    assert client["bound_by"] == [] and "client_bound" not in flags


def test_first_tokens_possibly_later_than_the_tolerance_bound_the_client() -> None:
    # The same 10 %, each possibly 2 x 7 ms late.
    client, flags = _client(_stats(20, 3, 7.0))
    assert client["coalesced_first_late_share"] == pytest.approx(0.1)
    assert client["bound_by"] == ["coalesced_first_late_share"] and "client_bound" in flags
    # Two of 200 (1 %) is not above 1 % beyond sampling noise.
    client, flags = _client(_stats(2, 3, 7.0))
    assert client["bound_by"] == [] and "client_bound" not in flags


def test_the_late_count_survives_a_workers_report() -> None:
    worker = _stats(20, 3, 7.0).total
    master = NameStats()
    master.merge_dict(worker.to_dict())
    assert (master.first_reads, master.coalesced_first, master.coalesced_first_late) == (200, 20, 20)

"""A worker whose wall clock is ahead of the master's still starts a rate step on schedule: the
master sends the schedule's age, and the worker anchors it to its own clock on receipt.

The skew is faked (one host has one clock): the worker's time.time() runs 50 ms ahead."""

from __future__ import annotations

import time

import pytest

from tokenload.loadgen import pacing
from tokenload.loadgen.pacing import Pacer

SKEW_S = 0.05


def _rate(t0: float, **extra: float) -> dict:
    return {
        "rps": 100.0,
        "arrival": "constant",
        "burstiness": 1.0,
        "seed": 1,
        "t0": t0,
        "slot": 0,
        "of": 1,
    } | extra


@pytest.fixture
def worker_clock_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.time
    monkeypatch.setattr(pacing.time, "time", lambda: real() + SKEW_S)


def test_the_age_sent_by_the_master_makes_the_schedule_skew_free(worker_clock_ahead: None) -> None:
    master_now = time.time() - SKEW_S  # the master's clock, 50 ms behind the worker's
    t0 = master_now + 0.05  # begin_step schedules 50 ms ahead
    pacer = Pacer()
    pacer.apply(_rate(t0, age_s=master_now - t0), step=0)
    first = pacer._schedule.peek()
    # The first arrival is about 50 ms away on this process's clock, as the master meant.
    assert first - time.perf_counter() == pytest.approx(0.05, abs=0.01)


def test_without_the_age_the_skew_makes_arrivals_overdue(worker_clock_ahead: None) -> None:
    # What a worker did before (and does for a master that sends no age): the wall clock
    # conversion shifts the whole schedule 50 ms into the past, so the first arrivals are due now.
    master_now = time.time() - SKEW_S
    pacer = Pacer()
    pacer.apply(_rate(master_now + 0.05), step=0)
    assert pacer._schedule.peek() - time.perf_counter() == pytest.approx(0.0, abs=0.01)

"""A step's token rates count tokens as they arrived in its measured part (FORMULAS
["output_tokens_per_s"]), not all of a request's tokens in the step it ended in; and the server's
counter rates are over the seconds their scrapes cover."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from tokenload.loadgen.phases import StepTracker
from tokenload.metrics.definitions import tokens_in_window
from tokenload.metrics.step_tally import new_tally, tally_record, tokens_by_step
from tokenload.servermetrics.summary import summarize_window


def test_tokens_in_window_puts_the_first_token_at_ttft_and_spreads_the_rest() -> None:
    # 11 tokens: the first at 0 s, ten more evenly over (0, 10].
    assert tokens_in_window(0.0, 10.0, 11, 0.0, 5.0) == 6.0
    assert tokens_in_window(0.0, 10.0, 11, 5.0, 10.0) == 5.0
    assert tokens_in_window(0.0, 10.0, 11, 10.0, 20.0) == 0.0
    assert tokens_in_window(0.0, 0.0, 5, 0.0, 1.0) == 5.0  # every token in one read
    assert tokens_in_window(2.0, 2.0, 5, 0.0, 1.0) == 0.0
    assert tokens_in_window(0.0, 10.0, 0, 0.0, 10.0) == 0.0


def test_tokens_by_step_counts_chunks_by_arrival_and_scales_to_usage() -> None:
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    tokens = [1, 1, 2, 1, 1, 2]  # 8 tokens in 6 chunks
    spans = {0: (0.0, 2.5), 1: (4.5, math.inf), 7: (10.0, 20.0)}
    assert tokens_by_step(times, tokens, spans, 8) == {"0": 2.0, "1": 3.0}
    # The server's usage said 16: every chunk's share doubles.
    assert tokens_by_step(times, tokens, spans, 16) == {"0": 4.0, "1": 6.0}
    assert tokens_by_step([], [], spans, 0) == {}
    assert tokens_by_step(times, tokens, {}, 8) == {}


def _rec(wall_start: float, ttft_ms: float, e2e_ms: float, n: int, by_step: dict | None = None) -> dict:
    rec = {
        "step": 0,
        "phase": "measure",
        "status": "ok",
        "wall_start": wall_start,
        "ttft_ms": ttft_ms,
        "e2e_ms": e2e_ms,
        "input_tokens": 100,
        "output_tokens": n,
    }
    if by_step is not None:
        rec["measured_tokens_by_step"] = by_step
    return rec


def test_a_record_with_its_arrivals_adds_exactly_those_tokens() -> None:
    d = new_tally()
    # Sent at 5, first token at 6, ended at 30: outlives the window [10, 20).
    rec = _rec(5.0, 1000.0, 25000.0, 500, {"3": 120.0, "4": 300.0})
    sent_in, ended_in = tally_record(d, rec, 10.0, 20.0, 3)
    assert (sent_in, ended_in) == (False, False)
    assert d["output_tokens_received"] == 120.0
    assert d["input_tokens_received"] == 0  # its first token came before the window
    assert d["requests"] == 0 and d["output_tokens"] == 0
    # The same record without the field (an older run's): spread evenly between 6 s and 30 s.
    d = new_tally()
    tally_record(d, _rec(5.0, 1000.0, 25000.0, 500), 10.0, 20.0, 3)
    assert d["output_tokens_received"] == pytest.approx(499 * 10 / 24)
    # An empty field means no token arrived in any measured part: nothing is spread.
    d = new_tally()
    tally_record(d, _rec(5.0, 1000.0, 25000.0, 500, {}), 10.0, 20.0, 3)
    assert d["output_tokens_received"] == 0.0


def _long_requests(seed: int) -> tuple[list[dict], float]:
    """Closed-loop users whose requests outlive a step: lognormal output lengths (CV ~1), a
    token every 20-60 ms, so a request lasts 2-100 s against 10 s measured parts."""
    rng = random.Random(seed)
    spans = {k: (10.0 + 20.0 * k, 20.0 + 20.0 * k) for k in range(5)}
    records, exact = [], 0.0
    for user in range(40):
        t = rng.uniform(0.0, 5.0) + user * 0.01
        while t < 100.0:
            n = max(2, int(rng.lognormvariate(math.log(600), 0.85)))
            ttft = rng.lognormvariate(math.log(0.3), 0.6)
            gaps = [rng.lognormvariate(math.log(0.04), 0.5) for _ in range(n - 1)]
            times = [t + ttft]
            for g in gaps:
                times.append(times[-1] + g)
            exact += sum(1 for x in times if 50.0 <= x < 60.0)
            by_step = tokens_by_step(times, [1] * n, spans, n)
            records.append(_rec(t, ttft * 1000.0, (times[-1] - t) * 1000.0, n, by_step))
            t = times[-1] + 0.01
    return records, exact / 10.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_step_counts_the_tokens_that_arrived_in_it_when_requests_outlive_it(seed: int) -> None:
    records, exact = _long_requests(seed)
    tracker = StepTracker()
    for k in range(5):
        tracker.begin(k, 40, None, 20.0 * k)
        tracker.measure(k, 10.0 + 20.0 * k)
        tracker.end(k, 20.0 + 20.0 * k)
    for rec in records:
        tracker.note_completion(rec, now=math.inf)
    d = tracker.done[2]  # the measured part [50, 60)
    assert d["output_tokens_received"] / 10.0 == pytest.approx(exact, rel=1e-9)


def _point(t: float, v: float) -> SimpleNamespace:
    return SimpleNamespace(t=t, target="a", ok=True, scalars={"generation_tokens": v}, histograms={})


def test_a_counter_rate_is_over_the_seconds_its_scrapes_cover() -> None:
    # 100 tokens/s; scrapes every second at .9, so the window [10, 18] sees 10.9 ... 17.9.
    pts = [_point(t + 0.9, 100.0 * (t + 0.9)) for t in range(25)]
    out = summarize_window(pts, 10.0, 18.0)
    assert out["generation_tokens"]["increase"] == pytest.approx(700.0)
    assert out["generation_tokens"]["rate_per_s"] == pytest.approx(100.0)
    assert out["scraped_s"] == pytest.approx(7.0)


def test_the_scrape_taken_as_a_window_closes_belongs_to_it() -> None:
    # The master scrapes when a step ends; the scrape is dated a fraction of a ms later.
    pts = [_point(10.0, 1000.0), _point(11.0, 1100.0), _point(12.0004, 1200.04), _point(13.0, 1300.0)]
    out = summarize_window(pts, 10.0, 12.0)
    assert out["generation_tokens"]["increase"] == pytest.approx(200.04)
    assert out["scraped_s"] == pytest.approx(2.0004)

"""A synthetic server for the SLO capacity search (analysis/slo_search.py), shared by
tests/analysis/test_slo_search.py and bench/slo_repeats.py: probes' TTFTs are lognormal and wide
(sigma 0.6, CV ~0.66) around a median that blows up as the rate nears the server's capacity, and
each probe is judged by the search's own code."""

from __future__ import annotations

import math
import random

from tokenload.analysis.slo_search import (
    Probe,
    SearchPlan,
    judge_probe,
    min_requests,
    next_probe,
    search_result,
)
from tokenload.metrics.histogram import LogHistogram
from tokenload.metrics.intervals import quantile_interval
from tokenload.report.capacity import parse_slo

SLO = parse_slo("ttft_p95_ms=300")


def step_of(values: list[float], failed: int = 0, field: str = "ttft_ms", q: float = 0.95) -> dict:
    """A step's summary as the search reads it: one percentile, its 95 % interval, the counts."""
    h = LogHistogram()
    for v in values:
        h.add(v)
    name = f"p{round(q * 100)}"
    return {
        field: {name: h.quantile(q)},
        "ci95": {field: {name: quantile_interval(h, q)}},
        "requests": {"ok": len(values), "failed": failed},
    }


def probe_at(rate: float, rng: random.Random, capacity: float, duration_s: float) -> list[float]:
    """TTFTs of a probe at ``rate`` against a server of ``capacity`` req/s: lognormal with sigma
    0.6 (CV ~0.66) around a median of 50 ms / (1 - rate / capacity), an M/M/1-like blow-up."""
    n = max(1, round(rate * duration_s))
    load = min(rate / capacity, 0.995)
    median = 50.0 / (1.0 - load)
    return [median * math.exp(rng.gauss(0, 0.6)) for _ in range(n)]


def simulate_search(seed: int, capacity: float, plan: SearchPlan) -> tuple[dict, list[Probe]]:
    """One whole search against the model: its result and its probes."""
    rng = random.Random(seed)
    probes: list[Probe] = []
    for index in range(60):  # bounded: a search that does not end raises below
        nxt = next_probe(probes, plan)
        if isinstance(nxt, str):
            return search_result(probes, nxt, SLO, None), probes
        rate, repeat, screen = nxt
        # As the shape plans it: twice the fewest requests that bound a p95, at least 10 s; a
        # screen 10 s.
        duration = max(10.0, 0 if screen else 2 * min_requests(SLO, None) / rate) * 2**repeat
        outcome, meets, checks = judge_probe(
            step_of(probe_at(rate, rng, capacity, duration)), SLO, None, None, 0.5
        )
        probes.append(Probe(index, rate, duration, outcome, meets, checks, repeat=repeat, screen=screen))
    raise AssertionError("the search did not end in 60 probes")


#: The model's true highest rate: p95 = median x exp(1.645 x 0.6) = 2.68 x 50 / (1 - r / 40)
#: <= 300 ms  <=>  r <= 22.1.
CAPACITY = 40.0
TRUE_RATE = CAPACITY * (1 - 2.6823 * 50 / 300)

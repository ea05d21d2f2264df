"""The comparison's noise rule on synthetic runs (pure, fast, seeded): identical distributions
are not flagged, a 30 % shift is; a big change on a handful of requests, a shift within the
requests' own spread, a jitter-sized change and a client-bound step's rates are noise; a small
real change is within tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from tokenload.report.compare_math import compare_runs, render_markdown, request_samples
from tokenload.report.noise import bootstrap_interval, count_variance, rate_interval, spread


def make_run(
    seed: int,
    n: int,
    tpot: float = 7.0,
    ttft: float = 30.0,
    users: int = 4,
    run_id: str = "r",
    tpot_cv: float = 0.02,
    ttft_cv: float = 0.1,
    flags: tuple[str, ...] = (),
):
    """A one-step run whose summary figures are the exact percentiles of its records."""
    rng = np.random.default_rng(seed)
    ttfts = rng.normal(ttft, ttft_cv * ttft, n).clip(1)
    tpots = rng.normal(tpot, tpot_cv * tpot, n).clip(0.1)
    records = [
        {
            "step": 0,
            "phase": "measure",
            "status": "ok",
            "ttft_ms": float(a),
            "tpot_ms": float(b),
            "e2e_ms": float(a + 63 * b),
            "itl_p50_ms": float(b),
            "itl_p99_ms": float(b * 1.5),
            "output_tokens": 64,
        }
        for a, b in zip(ttfts, tpots, strict=True)
    ]
    records.append({**records[0], "phase": "warmup", "ttft_ms": 1e6})  # must be ignored

    def pcts(values: list[float]) -> dict:
        return {"p50": float(np.quantile(values, 0.5)), "p99": float(np.quantile(values, 0.99))}

    measured = [r for r in records if r["phase"] == "measure"]
    e2e_mean = float(np.mean([r["e2e_ms"] for r in measured]))
    rps = users / (e2e_mean / 1000)
    step = {
        "index": 0,
        "concurrency": users,
        "target_rate_rps": None,
        "measured_s": n / rps,
        "requests_per_s": rps,
        "output_tokens_per_s": rps * 64,
        "ttft_ms": pcts([r["ttft_ms"] for r in measured]),
        "tpot_ms": pcts([r["tpot_ms"] for r in measured]),
        "itl_ms": pcts([r["itl_p50_ms"] for r in measured]),
        "e2e_ms": pcts([r["e2e_ms"] for r in measured]),
        "verdict": {"bottleneck": "none"},
        "flags": list(flags),
    }
    summary = {"run_id": run_id, "steps": [step], "config": {"prompt_tokens": "128", "run_dir": run_id}}
    return summary, records


def regressions(c) -> set[str]:
    return {m.metric for _, m in c.regressions}


def test_request_samples_take_the_steps_measured_ok_requests() -> None:
    _, records = make_run(0, 20)
    records.append({**records[0], "status": "failed"})
    records.append({**records[0], "step": 1})
    assert len(request_samples(records, 0, "ttft_ms", "p50")) == 20
    assert request_samples(records, 0, "itl_ms", "p99")[0] == records[0]["itl_p99_ms"]


def test_bootstrap_interval_is_seeded_and_needs_a_tail() -> None:
    a = list(np.random.default_rng(1).normal(10, 1, 50))
    b = [x * 1.3 for x in a]
    i1 = bootstrap_interval(a, b, 0.5, np.random.default_rng(7))
    i2 = bootstrap_interval(a, b, 0.5, np.random.default_rng(7))
    assert i1 == i2 and i1 is not None and 0.2 < i1[0] < 0.3 < i1[1] < 0.4
    same = bootstrap_interval(a, list(a), 0.5, np.random.default_rng(7))
    assert same is not None and same[0] < 0 < same[1]
    # p50 needs 10 samples a side, p99 needs 500: a p99 of 50 values is their maximum.
    assert bootstrap_interval(a[:9], b[:9], 0.5, np.random.default_rng(7)) is None
    assert bootstrap_interval(a, b, 0.99, np.random.default_rng(7)) is None


def test_spread_is_the_central_80_percent() -> None:
    assert spread(list(range(101))) == pytest.approx(80.0)
    assert spread([5.0]) is None


def test_rate_interval_models_a_closed_loop() -> None:
    # 4 users, very regular requests: about +-1 completion per user is all the noise there is.
    var = count_variance(40, 4, [500.0, 505.0, 495.0])
    assert var == pytest.approx(40 * (5.0 / 500.0) ** 2 + 1.0, rel=1e-6)
    lo, hi = rate_interval(10.0, 40, var, 10.0, 40, var)
    assert lo < 0 < hi and hi < 0.2
    lo, hi = rate_interval(10.0, 40, var, 7.0, 28, var)
    assert hi < 0  # a 30 % drop over 40 completions is beyond that noise
    # An open loop (rate step) is Poisson, wider; an idle side still gives a finite interval.
    assert count_variance(40, None, []) == 40
    lo, hi = rate_interval(10.0, 40, 40, 0.0, 0, 0.5)
    assert hi < 0


def test_identical_distributions_are_not_regressions() -> None:
    for seed in range(5):
        a, ra = make_run(seed, 60, run_id="a")
        b, rb = make_run(seed + 100, 60, run_id="b")
        c = compare_runs(a, ra, b, rb, tolerance=0.1)
        assert not c.regressions, render_markdown(c)


def test_a_30_percent_slower_decode_is_a_regression() -> None:
    a, ra = make_run(1, 60, tpot=7.0)
    b, rb = make_run(2, 60, tpot=9.1)
    c = compare_runs(a, ra, b, rb, tolerance=0.1)
    assert {"tpot_ms p50", "itl_ms p50", "e2e_ms p50"} <= regressions(c)
    assert {"output_tokens_per_s", "requests_per_s"} <= regressions(c)  # 4 users, 30 % slower
    assert "ttft_ms p50" not in regressions(c)
    # The reverse direction is an improvement, not a regression.
    assert not compare_runs(b, rb, a, ra, tolerance=0.1).regressions
    # A client-bound step: its rates are the load generator's, not judged; latencies still are.
    b, rb = make_run(2, 60, tpot=9.1, flags=("client_bound",))
    c = compare_runs(a, ra, b, rb, tolerance=0.1)
    assert "tpot_ms p50" in regressions(c) and "output_tokens_per_s" not in regressions(c)
    rate = next(m for m in c.steps[0].changes if m.metric == "output_tokens_per_s")
    assert rate.worse and rate.flag == "worse (not judged: client_bound in B)"
    assert "B was client_bound" in render_markdown(c)


def test_within_tolerance_or_within_noise_is_not_flagged() -> None:
    a, ra = make_run(1, 60, tpot=20.0, tpot_cv=0.005)
    b, rb = make_run(2, 60, tpot=21.0, tpot_cv=0.005)  # +5 %: real, but within a 10 % tolerance
    c = compare_runs(a, ra, b, rb, tolerance=0.1)
    tpot = next(m for m in c.steps[0].changes if m.metric == "tpot_ms p50")
    assert tpot.beyond_noise and tpot.worse and not tpot.regression
    assert "tpot_ms p50" in regressions(compare_runs(a, ra, b, rb, tolerance=0.02))  # flagged at 2 %
    # +15 % of a 10 ms TTFT is 1.5 ms: under the 2 ms jitter floor of a single timestamp.
    a, ra = make_run(1, 60, ttft=10.0, ttft_cv=0.005)
    b, rb = make_run(2, 60, ttft=11.5, ttft_cv=0.005)
    ttft = next(m for m in compare_runs(a, ra, b, rb).steps[0].changes if m.metric == "ttft_ms p50")
    assert ttft.interval is not None and ttft.interval[0] > 0.1 and not ttft.beyond_noise
    # +40 % TTFT on 6 requests each: too few to tell from noise.
    a, ra = make_run(3, 6, ttft=30)
    b, rb = make_run(4, 6, ttft=42)
    c = compare_runs(a, ra, b, rb, tolerance=0.1)
    ttft = next(m for m in c.steps[0].changes if m.metric == "ttft_ms p50")
    assert ttft.change > 0.2 and ttft.interval is None and not ttft.regression
    assert "too few samples" in ttft.flag


def test_a_shift_within_the_requests_spread_is_not_a_regression() -> None:
    # What identical closed-loop runs did: TTFT p50 19.6 vs 26.2 ms at 8 users (the loop fell
    # into another rhythm), each run's requests spread over ~14 ms. Many samples make the
    # bootstrap interval exclude zero, yet the bulk of the requests overlap: not beyond noise.
    a, ra = make_run(1, 130, ttft=19.6, ttft_cv=0.27)
    b, rb = make_run(2, 130, ttft=26.2, ttft_cv=0.2)
    ttft = next(m for m in compare_runs(a, ra, b, rb).steps[0].changes if m.metric == "ttft_ms p50")
    assert ttft.change > 0.25 and ttft.interval[0] > 0
    assert ttft.spread > ttft.b - ttft.a and not ttft.beyond_noise and not ttft.regression


def test_steps_are_matched_by_load_and_differences_reported() -> None:
    a, ra = make_run(1, 30, users=4)
    b, rb = make_run(2, 30, users=8)
    b["config"]["prompt_tokens"] = "256"
    c = compare_runs(a, ra, b, rb)
    assert c.steps == [] and c.only_a == ["4 users"] and c.only_b == ["8 users"]
    assert c.config_diff == {"prompt_tokens": ("128", "256")}  # run_dir is incidental
    text = render_markdown(c)
    assert "nothing to compare" in text and "prompt_tokens" in text
    b["steps"][0]["verdict"] = {"bottleneck": "kv_capacity"}
    b["steps"][0]["concurrency"] = 4
    c = compare_runs(a, ra, b, rb)
    assert c.steps[0].verdict_changed and "none -> kv_capacity" in render_markdown(c)
    d = c.to_dict()
    assert d["steps"][0]["verdict_changed"] and {"regressions", "tolerance"} <= set(d)


def test_tolerance_must_be_a_share() -> None:
    a, ra = make_run(1, 10)
    with pytest.raises(ValueError, match="--tolerance"):
        compare_runs(a, ra, a, ra, tolerance=-0.1)

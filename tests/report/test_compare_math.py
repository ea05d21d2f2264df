"""The comparison's noise rule on synthetic runs (pure, fast, seeded): identical distributions
are not flagged, a 30 % shift is; a 20 % TTFT slowdown on wide lognormal latencies (CV 0.5, 1.0)
is, and 40 identical pairs raise at most 2 alarms; a big change on a handful of requests, a
jitter-sized change and a client-bound step's rates are noise; run-to-run noise comes from
repeated baseline runs; a small real change is within tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from tokenload.report.compare_math import compare_runs, request_samples
from tokenload.report.compare_text import render_markdown
from tokenload.report.noise import (
    bootstrap_interval,
    count_variance,
    rate_interval,
    run_to_run_bound,
    spread,
    t_quantile,
)

pytestmark = pytest.mark.simulated_time


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
    assert rate.worse and rate.flag == "worse, not judged: client_bound in B"
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


def test_run_to_run_noise_comes_from_repeated_runs() -> None:
    # What identical closed-loop runs did: TTFT p50 19.6 vs 26.2 ms at 8 users (the loop fell
    # into another rhythm), each with a tight interval. One pair cannot tell that from a real
    # change: flagged, with run-to-run noise reported as not measured ...
    a, ra = make_run(1, 130, ttft=19.6, ttft_cv=0.27)
    b, rb = make_run(2, 130, ttft=26.2, ttft_cv=0.2)
    c = compare_runs(a, ra, b, rb)
    ttft = next(m for m in c.steps[0].changes if m.metric == "ttft_ms p50")
    assert ttft.change > 0.25 and ttft.regression and ttft.run_to_run is None
    assert "Run-to-run noise is not measured" in render_markdown(c)
    # ... and not flagged once repeated baseline runs show the configuration moves that much.
    repeats = [make_run(s, 130, ttft=t, ttft_cv=0.25)[0] for s, t in ((3, 24.8), (4, 21.0), (5, 27.0))]
    c = compare_runs(a, ra, b, rb, baselines=repeats)
    ttft = next(m for m in c.steps[0].changes if m.metric == "ttft_ms p50")
    assert ttft.run_to_run is not None and ttft.run_to_run[0] < ttft.b < ttft.run_to_run[1]
    assert not ttft.regression and "from 4 runs of A's configuration" in render_markdown(c)
    # A change beyond the repeats' spread still is a regression.
    b, rb = make_run(2, 130, ttft=45.0, ttft_cv=0.2)
    assert "ttft_ms p50" in regressions(compare_runs(a, ra, b, rb, baselines=repeats))


def test_the_flag_says_why_a_change_is_not_a_regression() -> None:
    # Walkthrough: "+0.1 %" flagged "worse (not judged: too few samples)" and "+0.2 %" "worse
    # (beyond noise)" on two runs of one configuration: a change within the tolerance says so.
    from tokenload.report.compare_math import MetricChange

    def flag(change: float, beyond: bool = False, not_judged: str | None = None) -> str:
        return MetricChange("m", 1.0, 1.0 + change, change, None, None, (9, 9), beyond, change > 0,
                            False, not_judged, None, 0.1).flag  # fmt: skip

    assert flag(0.0004) == "" and flag(0.002, beyond=True) == "worse, within tolerance"
    assert flag(0.001, not_judged="too few samples") == "worse, within tolerance"
    assert flag(0.3, not_judged="too few samples") == "worse, not judged: too few samples"
    assert flag(0.3) == "worse, within noise" and flag(-0.3, beyond=True) == "better, beyond noise"


def test_one_repeat_is_too_few_to_hide_a_drop() -> None:
    # Walkthrough (2026-12-05): with one --baseline-runs, a -73 % drop in requests/s was called
    # "within noise": two runs' 99 % prediction interval is +- 55 times their difference (here
    # -19.8 .. 35.3 req/s). Two runs give no interval; three do.
    def rate(c) -> object:
        return next(m for m in c.steps[0].changes if m.metric == "requests_per_s")

    a, ra = make_run(1, 400, tpot=7.0, ttft_cv=0.5)
    slow, rslow = make_run(2, 400, tpot=20.0, ttft_cv=0.5)
    again = make_run(3, 400, tpot=7.6, ttft_cv=0.5)[0]
    c = compare_runs(a, ra, slow, rslow, baselines=[again])
    assert rate(c).run_to_run is None and rate(c).regression
    assert "not judged: 2 runs of A's configuration are too few" in render_markdown(c)
    c = compare_runs(a, ra, slow, rslow, baselines=[again, make_run(4, 400, tpot=6.8, ttft_cv=0.5)[0]])
    lo, hi = rate(c).run_to_run
    assert 0.0 <= lo < rate(c).a < hi and rate(c).regression


def test_runs_that_sent_other_requests_are_not_compared() -> None:
    a, ra = make_run(1, 50)
    b, rb = make_run(2, 50)
    a["config"], b["config"] = {"prompt_tokens": "128"}, {"prompt_tokens": "1024"}
    with pytest.raises(ValueError, match=r"sent different requests \(prompt_tokens: '128' -> '1024'\)"):
        compare_runs(a, ra, b, rb)
    b["config"] = {"prompt_tokens": "128", "model": "other"}  # another model: what compare is for
    assert set(compare_runs(a, ra, b, rb).config_diff) == {"model"}
    a["model"], b["model"] = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct-AWQ"  # /v1/models'
    assert compare_runs(a, ra, b, rb).config_diff["model (served)"] == (a["model"], b["model"])
    b["config"] = {"prompt_tokens": "fixed:128"}  # the same spec written out
    assert compare_runs(a, ra, b, rb).steps
    # A repeat of A that sent other requests (or to another model) is no measure of A's noise.
    other = {**make_run(3, 50)[0], "config": {"prompt_tokens": "1024"}}
    with pytest.raises(ValueError, match=r"A and baseline run 1 sent different requests \(prompt_tokens"):
        compare_runs(a, ra, b, rb, baselines=[other])
    other = {**make_run(3, 50)[0], "config": {"prompt_tokens": "128"}, "model": "another"}
    with pytest.raises(ValueError, match=r"A and baseline run 1 sent different requests \(model \(served\)"):
        compare_runs(a, ra, b, rb, baselines=[other])
    # On purpose (the same workload file at another path): B is compared, the change listed;
    # a baseline repeat still has to be one.
    moved = {**b, "config": {"prompt_tokens": "128", "workload_file": "/elsewhere/w.yaml"}}
    a["config"]["workload_file"] = "/here/w.yaml"
    with pytest.raises(ValueError, match="--allow-workload-change"):
        compare_runs(a, ra, moved, rb)
    c = compare_runs(a, ra, moved, rb, allow_workload_change=True)
    assert c.steps and c.config_diff["workload_file"] == ("/here/w.yaml", "/elsewhere/w.yaml")
    with pytest.raises(ValueError, match="baseline run 1 sent different requests"):
        compare_runs(a, ra, moved, rb, baselines=[moved], allow_workload_change=True)


def test_rates_are_judged_against_the_baseline_runs_too() -> None:
    # A closed loop's rhythm moves its throughput between identical runs as it moves latencies.
    # B's rate 15 % under A's (TPOT 7.0 -> 8.3 ms on a 30 ms TTFT, 64 tokens): a regression
    # from one pair; not once repeats of A's configuration spread that wide (TPOT 7.2-8.6 ms);
    # still one when B falls beyond their prediction interval (four runs at 99 %: wide; TPOT
    # 20 ms, -64 %, is beyond it).
    def rate(c) -> object:
        return next(m for m in c.steps[0].changes if m.metric == "requests_per_s")

    a, ra = make_run(1, 400, tpot=7.0)
    b, rb = make_run(2, 400, tpot=8.3)
    one_pair = rate(compare_runs(a, ra, b, rb))
    assert one_pair.change < -0.1 and one_pair.regression and one_pair.run_to_run is None
    repeats = [make_run(s, 400, tpot=t)[0] for s, t in ((3, 8.0), (4, 7.2), (5, 8.6))]
    judged = rate(compare_runs(a, ra, b, rb, baselines=repeats))
    assert judged.run_to_run is not None and judged.run_to_run[0] < judged.b < judged.run_to_run[1]
    assert not judged.regression
    slow, rslow = make_run(2, 400, tpot=20.0)
    assert "requests_per_s" in regressions(compare_runs(a, ra, slow, rslow, baselines=repeats))


def _lognormal_run(seed: int, n: int, median: float, cv: float, drift: float = 0.0):
    """A one-step run of n requests whose TTFT, TPOT and E2E are lognormal with the given CV (TPOT
    and E2E independent of the planted TTFT change); ``drift`` moves the TTFT median linearly
    through the step (requests that move together)."""
    rng = np.random.default_rng(seed)
    sigma = float(np.sqrt(np.log(1 + cv * cv)))
    trend = 1 + drift * (np.arange(n) / n - 0.5)
    ttft = median * trend * rng.lognormal(0, sigma, n)
    tpot = 10.0 * rng.lognormal(0, sigma, n)
    e2e = 900.0 * rng.lognormal(0, sigma, n)
    records = [
        {"step": 0, "phase": "measure", "status": "ok", "wall_start": float(i), "ttft_ms": float(a),
         "tpot_ms": float(t), "e2e_ms": float(e), "itl_p50_ms": float(t), "itl_p99_ms": float(t * 3)}
        for i, (a, t, e) in enumerate(zip(ttft, tpot, e2e, strict=True))
    ]  # fmt: skip

    def pcts(v: np.ndarray) -> dict:
        return {"p50": float(np.quantile(v, 0.5)), "p99": float(np.quantile(v, 0.99))}

    step = {"index": 0, "concurrency": 32, "target_rate_rps": None, "measured_s": 60.0,
            "requests_per_s": n / 60, "output_tokens_per_s": n / 60 * 90, "ttft_ms": pcts(ttft),
            "tpot_ms": pcts(tpot), "itl_ms": pcts(tpot), "e2e_ms": pcts(e2e), "flags": [],
            "verdict": {"bottleneck": "none"}}  # fmt: skip
    return {"run_id": str(seed), "steps": [step], "config": {}}, records


@pytest.mark.parametrize("cv", [0.5, 1.0])
def test_a_20_percent_ttft_slowdown_on_wide_lognormal_latencies_is_flagged(cv: float) -> None:
    # Issue #16: the old rule (a change wider than the P10-P90 spread) could not flag even 3x.
    a, ra = _lognormal_run(1, 1000, 200.0, cv)
    b, rb = _lognormal_run(2, 1000, 240.0, cv)
    assert "ttft_ms p50" in regressions(compare_runs(a, ra, b, rb, rounds=1000))


def test_identical_configurations_rarely_raise_a_false_alarm() -> None:
    # 40 pairs of runs of one configuration (lognormal, CV 0.3 to 1.0, 300 to 3,000 requests).
    false_alarms = 0
    for i in range(40):
        cv, n = (0.3, 0.5, 0.8, 1.0)[i % 4], (300, 1000, 3000)[i % 3]
        a, ra = _lognormal_run(1000 + 2 * i, n, 200.0, cv)
        b, rb = _lognormal_run(1001 + 2 * i, n, 200.0, cv)
        false_alarms += bool(compare_runs(a, ra, b, rb, seed=i, rounds=500).regressions)
    assert false_alarms <= 2


def test_requests_that_move_together_widen_the_interval() -> None:
    a, ra = _lognormal_run(1, 1000, 200.0, 0.3, drift=0.8)
    b, rb = _lognormal_run(2, 1000, 200.0, 0.3, drift=0.8)
    iid_a, iid_ra = _lognormal_run(1, 1000, 200.0, 0.3)
    iid_b, iid_rb = _lognormal_run(2, 1000, 200.0, 0.3)

    def width(c) -> float:
        m = next(m for m in c.steps[0].changes if m.metric == "ttft_ms p50")
        return m.interval[1] - m.interval[0]

    assert width(compare_runs(a, ra, b, rb)) > 1.5 * width(compare_runs(iid_a, iid_ra, iid_b, iid_rb))


def test_steps_are_matched_by_load_and_differences_reported() -> None:
    a, ra = make_run(1, 30, users=4)
    b, rb = make_run(2, 30, users=8)
    b["config"]["metrics_interval_s"] = 2.0
    c = compare_runs(a, ra, b, rb)
    assert c.steps == [] and c.only_a == ["4 users"] and c.only_b == ["8 users"]
    assert c.config_diff == {"metrics_interval_s": (None, 2.0)}  # run_dir is incidental
    text = render_markdown(c)
    assert "nothing was compared" in text and "metrics_interval_s" in text and "No regression" not in text
    b["steps"][0]["verdict"] = {"bottleneck": "kv_capacity"}
    b["steps"][0]["concurrency"] = 4
    c = compare_runs(a, ra, b, rb)
    assert c.steps[0].verdict_changed and "none -> kv_capacity" in render_markdown(c)
    d = c.to_dict()
    assert d["steps"][0]["verdict_changed"] and {"regressions", "tolerance"} <= set(d)
    assert "close call" not in render_markdown(c)
    # A verdict that was a close call (Thresholds.saturation_margin) says so where it changed.
    b["steps"][0]["verdict"] = {"bottleneck": "memory_bandwidth", "close_call": True}
    text = render_markdown(compare_runs(a, ra, b, rb))
    assert "none -> memory_bandwidth" in text and "Note: the verdict was a close call in B" in text
    a["steps"][0]["verdict"] = {"bottleneck": "memory_bandwidth", "close_call": True}
    assert "close call" not in render_markdown(compare_runs(a, ra, b, rb))  # unchanged: nothing to say


def test_a_prediction_is_said_to_be_one_and_has_no_options_to_compare() -> None:
    a, ra = make_run(1, 30)
    b, rb = make_run(2, 30)
    b["config"] = {}
    b["prediction"] = {"label": "prediction: tokenload sim --profile a40-qwen2.5-7b in simulated time"}
    c = compare_runs(a, ra, b, rb)
    assert c.config_diff == {} and c.prediction_a is None and c.prediction_b.startswith("tokenload sim")
    assert "B is a prediction, not a measurement (tokenload sim" in render_markdown(c)


def test_token_rates_counted_two_ways_are_not_compared() -> None:
    # Version 3 counts a step's tokens as they arrived, older runs when their requests ended.
    a, ra = make_run(1, 40)
    b, rb = make_run(2, 40)
    a["schema_version"], b["schema_version"] = 2, 3
    b["steps"][0]["output_tokens_per_s"] *= 0.5  # would be a regression if compared
    c = compare_runs(a, ra, b, rb)
    metrics = {m.metric for m in c.steps[0].changes}
    assert "output_tokens_per_s" not in metrics and "requests_per_s" in metrics
    assert "output_tokens_per_s not compared" in render_markdown(c)
    a["schema_version"] = 3
    c = compare_runs(a, ra, b, rb)
    assert "output_tokens_per_s" in regressions(c)
    assert "not compared" not in render_markdown(c)


def test_tolerance_must_be_a_share() -> None:
    a, ra = make_run(1, 10)
    with pytest.raises(ValueError, match="--tolerance"):
        compare_runs(a, ra, a, ra, tolerance=-0.1)


def test_run_to_run_bound_is_a_t_prediction_interval() -> None:
    assert run_to_run_bound([5.0]) is None
    assert run_to_run_bound([5.0, 5.1]) is None  # one difference: no interval (noise.RUN_TO_RUN_MIN_RUNS)
    assert run_to_run_bound([1.0, 9.0, 1.0])[0] == 0.0  # latencies and rates are not negative
    lo, hi = run_to_run_bound([10.0, 12.0, 11.0, 13.0], confidence=0.95)
    # mean 11.5, sd 1.29, t(0.975, 3) = 3.18 (Cornish-Fisher within 1 %), sqrt(1 + 1/4)
    assert abs((hi - lo) / 2 - 3.18 * 1.291 * 1.118) < 0.1
    assert abs(t_quantile(0.995, 1) - 63.657) < 0.01 and abs(t_quantile(0.975, 10) - 2.228) < 0.01


def test_the_noise_interval_holds_the_change_it_is_the_noise_of() -> None:
    """The summary's ITL p50 is every token's; the samples are each request's median, a little
    off it (helper's walkthrough, 2026-12-05: a change of 0.0 % shown with the interval
    [+0.09 %, +0.12 %]). The interval lies about the change reported."""
    a, ra = make_run(1, 200, tpot_cv=0.001)
    b, rb = make_run(1, 200, tpot_cv=0.001)
    for r in rb:
        r["itl_p50_ms"] *= 1.001  # the per-request medians moved; every token's did not
    c = compare_runs(a, ra, b, rb)
    itl = next(m for m in c.steps[0].changes if m.metric == "itl_ms p50")
    assert itl.change == 0.0 and itl.interval is not None
    assert itl.interval[0] <= 0.0 <= itl.interval[1], itl.interval
    assert not itl.beyond_noise


def test_two_emulator_runs_differ_by_what_was_served_not_by_its_ports() -> None:
    from tokenload.loadgen.options import config_differences

    a = {
        "run_dir": "r/a",
        "metrics_urls": ["http://127.0.0.1:4001/metrics"],
        "target_emulator": "tokenload sim",
    }
    b = {**a, "run_dir": "r/b", "metrics_urls": ["http://127.0.0.1:5002/metrics"]}
    assert config_differences(a, b) == {}
    b["target_emulator"] = "tokenload sim --profile h100-llama3.1-8b"
    assert config_differences(a, b) == {
        "target_emulator": ("tokenload sim", "tokenload sim --profile h100-llama3.1-8b")
    }
    # Real servers: their /metrics URLs are what was scraped, a difference worth saying.
    real_a = {"metrics_urls": ["http://gpu-1:8000/metrics"]}
    real_b = {"metrics_urls": ["http://gpu-2:8000/metrics"], "prometheus_selector": []}
    # A run from before a key existed reads as its default (target_emulator '', selector []).
    assert config_differences(real_a, real_b) == {
        "metrics_urls": (["http://gpu-1:8000/metrics"], ["http://gpu-2:8000/metrics"])
    }
    assert config_differences({"target_emulator": ""}, {}) == {}

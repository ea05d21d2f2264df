"""SLO parsing, per-step SLO checks, capacity, goodput and replica sizing on hand-built steps
and records (pure, fast)."""

from __future__ import annotations

import pytest

from tokenload.report.capacity import (
    SLO,
    SLOError,
    SLOItem,
    Target,
    check_steps,
    find_capacity,
    good_share,
    parse_slo,
    replicas_needed,
    replicas_scraped,
    search_capacity,
)

pytestmark = pytest.mark.simulated_time


def step(
    i: int, users: int, ttft95: float, tpot95: float, rps: float = 1.0, tput: float = 100.0, **kw
) -> dict:
    return {
        "index": i,
        "concurrency": users,
        "target_rate_rps": None,
        "ttft_ms": {"p50": ttft95 / 2, "p95": ttft95, "p99": ttft95 * 1.2},
        "tpot_ms": {"p50": tpot95 / 2, "p95": tpot95, "p99": tpot95 * 1.2},
        "e2e_ms": {"p95": 1000.0},
        "itl_ms": {"p95": tpot95},
        "requests_per_s": rps,
        "output_tokens_per_s": tput,
        "verdict": kw.get("verdict", {"bottleneck": "none", "saturated": False}),
    }


def rec(
    step_i: int, ttft: float, tpot: float | None, status: str = "ok", phase: str = "measure", out: int = 10
):
    return {
        "step": step_i,
        "phase": phase,
        "status": status,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2e_ms": ttft + (tpot or 0) * (out - 1),
        "output_tokens": out,
    }


def test_parse_slo_reads_every_metric_and_percentile() -> None:
    slo = parse_slo(" ttft_p95_ms=1000, tpot_p99_ms=50.5,itl_p50_ms=20,E2E_P90_MS=8000 ")
    assert slo.items == (
        SLOItem("ttft", "p95", 1000.0),
        SLOItem("tpot", "p99", 50.5),
        SLOItem("itl", "p50", 20.0),
        SLOItem("e2e", "p90", 8000.0),
    )
    assert str(slo.items[0]) == "TTFT p95 <= 1000 ms"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("ttft_p95_ms=1000,foo_p95_ms=3", "'foo_p95_ms=3'"),
        ("ttft_p97_ms=10", "'ttft_p97_ms=10'"),
        ("ttft_p95=10", "'ttft_p95=10'"),
        ("ttft_p95_s=1", "milliseconds"),
        ("ttft_p95_ms", "'ttft_p95_ms'"),
        ("ttft_p95_ms=fast", "'fast' is not a number"),
        ("ttft_p95_ms=-1", "positive"),
        ("ttft_p95_ms=nan", "positive"),
        ("ttft_p95_ms=1,ttft_p95_ms=2", "given twice"),
        ("", "empty"),
        (" , ", "empty"),
    ],
)
def test_parse_slo_errors_are_one_line_naming_the_item(text: str, needle: str) -> None:
    with pytest.raises(SLOError) as exc:
        parse_slo(text)
    msg = str(exc.value)
    assert msg.startswith("--slo: ") and needle in msg and "\n" not in msg


def test_check_steps_judges_each_percentile() -> None:
    slo = parse_slo("ttft_p95_ms=500,tpot_p95_ms=40")
    checks = check_steps([step(0, 1, 100, 20), step(1, 4, 600, 20), step(2, 8, 100, 45)], slo)
    assert [c.meets for c in checks] == [True, False, False]
    assert checks[1].failed_items == ["TTFT p95 <= 500 ms"]
    assert checks[2].failed_items == ["TPOT p95 <= 40 ms"]
    # No requests in a step: its percentiles are unknown, which does not meet anything.
    empty = step(3, 16, 1, 1)
    empty["ttft_ms"] = {"p95": None}
    assert check_steps([empty], slo)[0].meets is False


def test_capacity_is_the_last_of_the_unbroken_passing_steps() -> None:
    slo = parse_slo("ttft_p95_ms=500")
    steps = [
        step(0, 1, 100, 10, rps=1),
        step(1, 4, 300, 10, rps=3.5),
        step(2, 8, 900, 10),
        step(3, 16, 200, 10),
    ]
    cap = find_capacity(steps, slo)
    assert cap is not None and cap.step_index == 1 and cap.load == 4 and cap.requests_per_s == 3.5
    # A pass above a failure is not capacity one can rely on; a failing first step: none.
    assert find_capacity([step(0, 1, 900, 10), step(1, 2, 100, 10)], slo) is None
    assert "at least" not in cap.basis
    # Every step met it: the highest step run is a floor, said as without an SLO.
    every = find_capacity(steps[:2], slo)
    assert every is not None and every.load == 4 and "the real capacity is at least this" in every.basis


def test_capacity_without_slo_is_the_last_unsaturated_step() -> None:
    sat = {"bottleneck": "kv_capacity", "saturated": True}
    steps = [step(0, 1, 1, 1), step(1, 4, 1, 1), step(2, 16, 1, 1, verdict=sat)]
    cap = find_capacity(steps, None)
    assert cap is not None and cap.load == 4 and "before saturation" in cap.basis
    cap = find_capacity(steps[:2], None)
    assert cap is not None and cap.load == 4 and "at least" in cap.basis


def test_good_share_judges_requests_one_by_one() -> None:
    slo = parse_slo("ttft_p95_ms=500,tpot_p95_ms=40,itl_p99_ms=1")
    records = [
        rec(1, 100, 20),  # good
        rec(1, 600, 20),  # TTFT over
        rec(1, 100, 50),  # TPOT over
        rec(1, 100, None, out=1),  # one token: TPOT undefined, cannot break it
        rec(1, 100, 20, status="failed"),  # failed: never good
        rec(1, 100, 20, phase="warmup"),  # not measured
        rec(0, 100, 20),  # another step
    ]
    share = good_share(records, 1, slo)
    # ITL limits judge steps only (a request has many ITLs): the 1 ms ITL limit is not applied.
    assert (share.requests, share.good) == (5, 2)
    assert share.request_share == pytest.approx(0.4)
    assert share.output_tokens == 31 and share.good_output_tokens == 11


def test_goodput_is_the_steps_rate_times_the_good_share() -> None:
    slo = parse_slo("ttft_p95_ms=500")
    steps = [step(0, 4, 300, 10, rps=2.0, tput=200.0)]
    records = [rec(0, 100, 10), rec(0, 100, 10), rec(0, 100, 10), rec(0, 700, 10)]
    cap = find_capacity(steps, slo, records)
    assert cap is not None and cap.share is not None
    assert cap.goodput_requests_per_s == pytest.approx(1.5)
    assert cap.goodput_output_tokens_per_s == pytest.approx(150.0)


def test_replicas_for_a_target_rate_and_for_users() -> None:
    cap = find_capacity([step(0, 8, 100, 10, rps=2.5)], parse_slo("ttft_p95_ms=500"))
    assert cap is not None
    plan = replicas_needed(cap, Target("rps", 10.0))  # 10 / 2.5 x 1.2 = 4.8
    assert plan.replicas == 5 and plan.headroom == 0.2 and "= 5" in plan.formula
    assert replicas_needed(cap, Target("rps", 10.0), headroom=0.0).replicas == 4  # exact: no round-up
    assert replicas_needed(cap, Target("users", 100.0), headroom=0.2).replicas == 15  # 100/8*1.2 = 15
    assert replicas_needed(cap, Target("rps", 0.1)).replicas == 1
    with pytest.raises(ValueError, match="--headroom"):
        replicas_needed(cap, Target("rps", 1.0), headroom=-0.1)
    assert replicas_needed(cap, Target("rps", 10.0), headroom=1.0).replicas == 8  # N+N: the most allowed
    for bad in (1.5, 20.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="--headroom: expected a share from 0 to 1"):
            replicas_needed(cap, Target("rps", 1.0), headroom=bad)


def test_a_fleets_capacity_is_shared_by_the_replicas_scraped() -> None:
    # Walkthrough: a sweep of two emulated replicas behind a router (weighted 9:1) met the SLO at
    # 4 users, and the report planned 30 replicas for 100 users as if one replica had carried 4.
    cap = find_capacity([step(0, 4, 100, 10, rps=2.5)], parse_slo("ttft_p95_ms=500"))
    assert cap is not None
    fleet = [{"index": 0, "server_replicas": {"http://a/metrics": {}, "http://b/metrics": {}}}]
    assert replicas_scraped(fleet) == 2 and replicas_scraped([{"index": 0}]) == 1
    # A scrape that failed at the capacity step leaves the fleet as large (review finding).
    assert replicas_scraped([{"index": 0, "server_replicas": {"http://a/metrics": {}}}, fleet[0]]) == 2
    plan = replicas_needed(cap, Target("users", 100.0), 0.2, replicas_scraped(fleet))
    assert plan.replicas == 60 and plan.per_replica == 2.0  # 100 / (4 / 2) x 1.2
    assert (
        "(4 users / 2 replicas scraped) per replica" in plan.formula
        and plan.to_dict()["replicas_in_run"] == 2
    )
    assert replicas_needed(cap, Target("users", 100.0), 0.2).replicas == 30  # one server: as before


def test_replicas_refuse_what_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match="--target-rps"):
        Target("rps", 0)
    rate_step = step(0, 1, 100, 10)
    rate_step.update(concurrency=None, target_rate_rps=5.0)
    cap = find_capacity([rate_step], parse_slo("ttft_p95_ms=500"))
    assert cap is not None and cap.load_unit.startswith("req/s")
    with pytest.raises(ValueError, match="--target-users"):
        replicas_needed(cap, Target("users", 10))
    idle = find_capacity([step(0, 1, 100, 10, rps=0.0)], SLO((SLOItem("ttft", "p95", 500.0),)))
    assert idle is not None
    with pytest.raises(ValueError, match="no requests"):
        replicas_needed(idle, Target("rps", 1.0))


def test_capacity_reads_steps_in_load_order_after_a_knee_search() -> None:
    # A knee search ran 4, 64, 16, 32 users (bisecting down from 64): 32 was fine, 64 saturated.
    # In run order the old code stopped at 64 and said capacity 4 users.
    sat = {"bottleneck": "compute", "saturated": True}
    steps = [step(0, 4, 1, 1), step(1, 64, 1, 1, verdict=sat), step(2, 16, 1, 1), step(3, 32, 1, 1)]
    cap = find_capacity(steps, None)
    assert cap is not None and cap.load == 32 and cap.step_index == 3
    slo = parse_slo("ttft_p95_ms=500")
    steps = [step(0, 4, 100, 10), step(1, 64, 900, 10), step(2, 16, 200, 10), step(3, 32, 300, 10)]
    cap = find_capacity(steps, slo)
    assert cap is not None and cap.load == 32


def test_an_slo_search_stopped_on_a_screen_says_so() -> None:
    rate = step(3, 1, 100, 10, rps=14.6)
    rate.update(concurrency=None, target_rate_rps=16.0)
    search = {"outcome": "stopped", "slo_capacity_rps": 16.0, "bracket": [16.0, 32.0], "answer_step": 3,
              "determinate": True, "answer_is_screen": True}  # fmt: skip
    cap = search_capacity([rate], search, parse_slo("ttft_p95_ms=500"))
    assert cap is not None and cap.load == 16.0
    assert "not confirmed in full" in cap.basis and "32 req/s" in cap.basis
    search["answer_is_screen"] = False
    assert "not confirmed" not in search_capacity([rate], search, parse_slo("ttft_p95_ms=500")).basis

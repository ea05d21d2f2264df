"""Chart geometry and drawing (pure): ticks, scales, 'no data', point counts, SLO lines, the knee
and step shading, from hand-built steps and scrapes."""

from __future__ import annotations

import math
import re

import pytest

from tokenload.report.capacity import parse_slo
from tokenload.report.charts import (
    CHART_KEYS,
    build_charts,
    cumulative_increase,
    fleet_increase,
    server_series,
)
from tokenload.report.svg import Chart, HLine, Scale, Series, linear_ticks, log_ticks, render_chart

pytestmark = pytest.mark.simulated_time


def test_linear_ticks_are_round_and_cover_the_data() -> None:
    lo, hi, ticks = linear_ticks(0, 449.4)
    assert (lo, hi) == (0, 500) and ticks == [0, 100, 200, 300, 400, 500]
    lo, hi, ticks = linear_ticks(3.2, 3.2)  # one value: widened, not a zero-height axis
    assert lo < 3.2 < hi and len(ticks) >= 2
    lo, hi, ticks = linear_ticks(0, 0.877)
    assert hi >= 0.877 and all(abs(t * 10 - round(t * 10)) < 1e-9 for t in ticks)


def test_log_ticks_span_decades() -> None:
    lo, hi, ticks = log_ticks(29.7, 4843.8)
    assert lo < 29.7 and hi > 4843.8
    assert 100 in ticks and 1000 in ticks and all(29.7 / 1.01 <= t <= 4843.8 * 1.01 for t in ticks)


def test_scale_maps_linear_and_log() -> None:
    s = Scale(0, 10, 100, 200)
    assert s(0) == 100 and s(5) == 150 and s(10) == 200
    lg = Scale(1, 100, 0, 100, log=True)
    assert lg(10) == pytest.approx(50)
    assert Scale(5, 5, 0, 100)(5) == 50  # a zero-width domain centres rather than dividing by zero


def test_a_chart_without_points_says_no_data() -> None:
    html = render_chart(Chart("kv_usage", "KV", "t", "ratio", (Series("kv", ()),)))
    assert 'data-chart="kv_usage"' in html and 'data-points="0"' in html and "no data" in html
    nan = render_chart(Chart("x", "X", "t", "v", (Series("s", ((1.0, math.nan),)),)))
    assert 'data-points="0"' in nan and "no data" in nan


def test_points_lines_and_tooltips_are_drawn() -> None:
    chart = Chart(
        "ttft_percentiles",
        "TTFT",
        "users",
        "ms",
        (Series("p50", ((1, 30.0), (4, 54.0), (16, 4843.0)), ("1 user", "4 users", "16 users")),),
        hlines=(HLine(1000, "SLO TTFT p95 1000 ms"),),
    )
    html = render_chart(chart)
    assert 'data-points="3"' in html and html.count('class="point"') == 3
    assert 'class="slo"' in html and "SLO TTFT p95 1000 ms" in html
    assert "(log scale)" in html  # 30 ms .. 4.8 s: a linear axis would flatten the low steps
    assert "<title>p50: 54 at users 4 (4 users)</title>" in html
    assert "no data" not in html


def _steps() -> list[dict]:
    base = 1000.0
    out = []
    for i, (users, tput, ttft) in enumerate([(1, 100.0, 30.0), (4, 390.0, 50.0), (16, 420.0, 4000.0)]):
        start = base + 10 * i
        out.append(
            {
                "index": i,
                "concurrency": users,
                "target_rate_rps": None,
                "start": start,
                "measure_start": start + 2,
                "end": start + 9,
                "output_tokens_per_s": tput,
                "requests_per_s": tput / 200,
                "ttft_ms": {"p50": ttft, "p90": ttft * 1.1, "p99": ttft * 1.2},
                "tpot_ms": {"p50": 7.5, "p90": 7.8, "p99": 9.0},
                "itl_ms": {"p50": 7.0, "p90": 7.5, "p99": 20.0},
                "e2e_ms": {"p50": 1500.0, "p90": 1600.0, "p99": 1700.0},
                "verdict": {"bottleneck": "kv_capacity" if i == 2 else "none"},
            }
        )
    return out


def _points() -> list[dict]:
    pts = []
    for k in range(30):
        scalars = {
            "kv_cache_usage_ratio": min(1.0, k / 25),
            "requests_running": 4.0,
            "requests_waiting": k % 3,
            "preemptions": float(k // 10),
        }
        pts.append({"t": 1000.0 + k, "target": "http://h/metrics", "ok": True, "scalars": scalars})
    pts.append({"t": 1031.0, "target": "http://h/metrics", "ok": False, "error": "timeout"})
    return pts


def test_build_charts_has_every_chart_with_data_the_knee_and_shaded_steps() -> None:
    summary = {
        "started_at": 1000.0,
        "steps": _steps(),
        "knee": {"step": 2, "concurrency": 16, "bottleneck": "kv_capacity"},
    }
    charts = build_charts(summary, _points(), parse_slo("ttft_p95_ms=1000,tpot_p99_ms=50,e2e_p50_ms=2000"))
    assert [c.key for c in charts] == list(CHART_KEYS)
    by = {c.key: c for c in charts}
    assert all(c.n_points > 0 for c in charts), {c.key: c.n_points for c in charts}
    assert by["throughput"].vmarks[0].x == 16 and "kv_capacity" in by["throughput"].vmarks[0].label
    assert [h.y for h in by["ttft_percentiles"].hlines] == [1000]
    assert [h.y for h in by["tpot_percentiles"].hlines] == [50]
    assert by["itl_percentiles"].hlines == ()
    assert [h.y for h in by["latency_vs_throughput"].hlines] == [1000, 2000]
    # Two bands per step (warm-up, measured), relative to the run's start.
    bands = by["kv_usage"].bands
    assert len(bands) == 6 and (bands[0].x0, bands[0].x1, bands[1].x1) == (0.0, 2.0, 9.0)
    assert bands[1].measured and not bands[0].measured
    html = render_chart(by["throughput"])
    assert 'class="knee"' in html and re.search(r'data-points="3"', html)


def test_a_fleets_counter_rises_by_each_replicas_own_increase() -> None:
    """A replica that vanishes (or restarts) is not the fleet's counter restarting: each
    target's increase is its own, then added up."""

    def pt(t: float, target: str, v: float) -> dict:
        return {"t": t, "target": target, "ok": True, "scalars": {"preemptions": v}}

    pts = [pt(0, "a", 100), pt(0, "b", 5), pt(1, "a", 100), pt(1, "b", 7), pt(2, "a", 103), pt(3, "a", 104)]
    pts += [pt(3, "c", 50), pt(4, "a", 1), pt(4, "c", 52)]  # c appears at 3; a restarts at 4
    assert fleet_increase(pts, "preemptions") == [(0, 0.0), (1, 2.0), (2, 5.0), (3, 6.0), (4, 9.0)]
    # Added up first, the same points read b's end as a fleet-wide restart (+ the whole 103).
    assert cumulative_increase(server_series(pts, "preemptions"))[2] == (2, 105.0)
    assert fleet_increase([], "preemptions") == []


def test_server_series_and_counters() -> None:
    pts = _points()
    kv = server_series(pts, "kv_cache_usage_ratio")
    assert len(kv) == 30 and kv[0] == (1000.0, 0.0)  # the failed scrape is a gap, not a zero
    assert cumulative_increase([(0, 5.0), (1, 7.0), (2, 1.0), (3, 2.0)]) == [
        (0, 0.0),
        (1, 2.0),
        (2, 3.0),
        (3, 4.0),
    ]
    # Two replicas scraped in the same tick: a ratio is averaged, a count summed.
    two = [
        {
            "t": 5.0,
            "target": "a",
            "ok": True,
            "scalars": {"kv_cache_usage_ratio": 0.2, "requests_running": 3},
        },
        {
            "t": 5.01,
            "target": "b",
            "ok": True,
            "scalars": {"kv_cache_usage_ratio": 0.4, "requests_running": 5},
        },
    ]
    assert server_series(two, "kv_cache_usage_ratio")[0][1] == pytest.approx(0.3)
    assert server_series(two, "requests_running")[0][1] == 8
    assert server_series(two, "kv_cache_usage_ratio", "b") == [(5.0, 0.4)]
    # The KV chart draws each replica beside the fleet's mean, where a full one would hide.
    by = {c.key: c for c in build_charts({"started_at": 0.0, "steps": _steps(), "knee": None}, two)}
    assert [x.label for x in by["kv_usage"].series] == [
        "kv_cache_usage_ratio",
        "kv_cache_usage_ratio a",
        "kv_cache_usage_ratio b",
    ]
    one = {c.key: c for c in build_charts({"started_at": 0.0, "steps": _steps()}, _points())}
    assert len(one["kv_usage"].series) == 1  # one server: its own line only
    # Prometheus series without the replica label are the fleet's (target "prometheus"), not a
    # third replica: no line of their own (it was drawn as one, empty, and named a replica).
    fleet = {"t": 5.02, "target": "prometheus", "ok": True, "scalars": {"requests_waiting": 2}}
    by = {c.key: c for c in build_charts({"started_at": 0.0, "steps": _steps(), "knee": None}, [*two, fleet])}
    assert [x.label for x in by["kv_usage"].series][1:] == [
        "kv_cache_usage_ratio a",
        "kv_cache_usage_ratio b",
    ]


def test_build_charts_without_server_metrics_says_no_data() -> None:
    summary = {"started_at": 1000.0, "steps": _steps(), "knee": None}
    by = {c.key: c for c in build_charts(summary, [], None)}
    for key in ("kv_usage", "running_waiting", "preemptions"):
        assert by[key].n_points == 0 and "no data" in render_chart(by[key])
    assert by["throughput"].n_points == 3 and by["throughput"].vmarks == ()
    assert all(c.hlines == () for c in by.values())

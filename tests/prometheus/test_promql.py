"""The PromQL builder and the mapping of Prometheus' JSON answers (recorded from a real
Prometheus scraping the emulator, ``data/sim_step_answers.json``) onto summarize_window's shape."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tokenload.servermetrics.promql import (
    MAX_RANGE_POINTS,
    PromQLError,
    PromQuery,
    check_prometheus_url,
    freshness_query,
    gauge_step_s,
    live_queries,
    parse_selector,
    series_queries,
    window_queries,
)
from tokenload.servermetrics.promql_answers import (
    fleet_answers,
    live_row,
    series_points,
    summarize_answers,
    summarize_by,
)
from tokenload.servermetrics.vocabulary import CANONICAL

DATA = Path(__file__).parent / "data"


# -- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "matchers"),
    [
        ("", ()),
        ("{}", ()),
        ('{namespace="x",job="vllm"}', ('namespace="x"', 'job="vllm"')),
        (' { namespace = "x" , job=~"vllm-.*" , } ', ('namespace="x"', 'job=~"vllm-.*"')),
        ('pod!="a",model_name!~"b|c"', ('pod!="a"', 'model_name!~"b|c"')),
        (r'{path="a\"b"}', (r'path="a\"b"',)),
        ("{job='vllm'}", ("job='vllm'",)),
        ("{job=`v\\d`}", ("job=`v\\d`",)),
    ],
)
def test_selectors_are_parsed_and_normalised(text: str, matchers: tuple[str, ...]) -> None:
    assert parse_selector(text) == matchers


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("namespace=x", "label matchers"),
        ('{job="vllm"', "unbalanced"),
        ('job="vllm"}', "unbalanced"),
        ('{job="vllm" pod="a"}', "label matchers"),
        ('{job=="vllm"}', "label matchers"),
        ('{1job="vllm"}', "label matchers"),
        ('{job="vllm}', "label matchers"),
        ('{__name__="vllm:num_requests_running"}', "__name__"),
        ("{,}", "label matchers"),
    ],
)
def test_malformed_selectors_name_the_option(text: str, why: str) -> None:
    with pytest.raises(PromQLError) as exc:
        parse_selector(text)
    assert str(exc.value).startswith("--prometheus-selector: ") and why in str(exc.value)


def test_prometheus_urls() -> None:
    assert check_prometheus_url("http://prometheus:9090") == "http://prometheus:9090"
    assert check_prometheus_url(" https://host/prom/ ") == "https://host/prom"
    for bad, why in [
        ("ftp://prometheus:9090", "http"),
        ("prometheus:9090", "http"),
        ("http://", "http"),
        ("http://host?x=1", "query"),
        ("http://host:99999", "port"),
    ]:
        with pytest.raises(PromQLError) as exc:
            check_prometheus_url(bad)
        assert str(exc.value).startswith("--prometheus-url: ") and why in str(exc.value), bad
    with pytest.raises(PromQLError) as exc:
        check_prometheus_url("http://admin:hunter2@prometheus:9090")
    assert "credentials" in str(exc.value) and "hunter2" not in str(exc.value)


# -- queries --------------------------------------------------------------------------------------


def _by(queries: list[PromQuery]) -> dict[tuple[str, str], PromQuery]:
    return {(q.quantity, q.part): q for q in queries}


def test_every_canonical_quantity_is_asked_for() -> None:
    qs = _by(window_queries(('job="vllm"',), 100.0, 106.5))
    for q in CANONICAL.values():
        parts = {"gauge": ["gauge"], "counter": ["counter"], "histogram": ["buckets", "sum"]}[q.kind]
        for part in parts:
            expr = qs[(q.name, part)].expr
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            assert qs[(q.name, part)].range == (part == "gauge")


def test_gauges_sum_replicas_and_average_ratios_with_every_generation_as_a_fallback() -> None:
    qs = _by(window_queries(('job="vllm"',), 0.0, 6.0))
    assert qs[("kv_cache_usage_ratio", "gauge")].expr == (
        'avg(vllm:kv_cache_usage_perc{job="vllm"}) or avg(vllm:gpu_cache_usage_perc{job="vllm"})'
        ' or avg(sglang:token_usage{job="vllm"})'
    )
    assert qs[("requests_waiting", "gauge")].expr == (
        'sum(vllm:num_requests_waiting{job="vllm"}) or sum(sglang:num_queue_reqs{job="vllm"})'
    )
    # A required label joins the user's matchers.
    assert qs[("requests_waiting_capacity", "gauge")].expr == (
        'sum(vllm:num_requests_waiting_by_reason{job="vllm",reason="capacity"})'
    )


def test_counters_and_histograms_use_increase_over_the_window() -> None:
    qs = _by(window_queries((), 10.0, 16.5))
    assert qs[("preemptions", "counter")].expr == "sum(increase(vllm:num_preemptions_total[6500ms]))"
    assert qs[("generation_tokens", "counter")].expr == (
        "sum(increase(vllm:generation_tokens_total[6500ms]))"
        " or sum(increase(sglang:generation_tokens_total[6500ms]))"
    )
    a = "sum by (le) (increase(vllm:request_queue_time_seconds_bucket[6500ms]))"
    b = "sum by (le) (increase(sglang:queue_time_seconds_bucket[6500ms]))"
    assert qs[("queue_time_s", "buckets")].expr == f"{a} or ({b} unless on() {a})"
    assert qs[("queue_time_s", "sum")].expr == (
        "sum(increase(vllm:request_queue_time_seconds_sum[6500ms]))"
        " or sum(increase(sglang:queue_time_seconds_sum[6500ms]))"
    )
    # A histogram whose family name ends in _total keeps it once.
    assert "vllm:iteration_tokens_total_bucket[" in qs[("iteration_tokens", "buckets")].expr
    # V1, V0, SGLang and SGLang's older name, in that order, none mixing with another.
    itl = qs[("itl_s", "buckets")].expr
    names = ["vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
             "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"]  # fmt: skip
    assert [itl.index(n + "_bucket") for n in names] == sorted(itl.index(n + "_bucket") for n in names)
    assert itl.count("unless on()") == 1 + 2 + 3


def test_per_replica_queries_group_by_the_replica_label_and_never_mix_generations_within_one() -> None:
    qs = _by(window_queries(('job="vllm"',), 10.0, 16.5, by="pod"))
    assert qs[("requests_waiting", "gauge")].expr == (
        'sum by (pod)(vllm:num_requests_waiting{job="vllm"})'
        ' or sum by (pod)(sglang:num_queue_reqs{job="vllm"})'
    )
    assert qs[("kv_cache_usage_ratio", "gauge")].expr.startswith("avg by (pod)(vllm:kv_cache_usage_perc{")
    assert qs[("preemptions", "counter")].expr == (
        'sum by (pod)(increase(vllm:num_preemptions_total{job="vllm"}[6500ms]))'
    )
    a = 'sum by (le, pod) (increase(vllm:request_queue_time_seconds_bucket{job="vllm"}[6500ms]))'
    b = 'sum by (le, pod) (increase(sglang:queue_time_seconds_bucket{job="vllm"}[6500ms]))'
    # A replica's V1 buckets shut out its own SGLang ones, not another replica's.
    assert qs[("queue_time_s", "buckets")].expr == f"{a} or ({b} unless on(pod) {a})"
    assert set(qs) == set(_by(window_queries(('job="vllm"',), 10.0, 16.5)))


def test_per_replica_answers_are_split_by_the_label() -> None:
    qs = [
        PromQuery("requests_running", "gauge", "g", True),
        PromQuery("preemptions", "counter", "c"),
        PromQuery("ttft_s", "buckets", "b"),
        PromQuery("ttft_s", "sum", "s"),
    ]
    running = {
        "resultType": "matrix",
        "result": [
            {"metric": {"pod": "a"}, "values": [[0, "4"], [2, "4"]]},
            {"metric": {"pod": "b"}, "values": [[0, "1"], [2, "3"]]},
        ],
    }
    preempted = _vector(({"pod": "a"}, "7"), ({"pod": "b"}, "0"), ({}, "99"))
    buckets = _vector(
        ({"pod": "a", "le": "0.5"}, "1"), ({"pod": "a", "le": "+Inf"}, "2"),
        ({"pod": "b", "le": "0.5"}, "3"), ({"pod": "b", "le": "+Inf"}, "3"),
    )  # fmt: skip
    sums = _vector(({"pod": "a"}, "1.5"), ({"pod": "b"}, "0.3"))
    out = summarize_by(qs, [running, preempted, buckets, sums], 0.0, 4.0, "pod")
    assert set(out) == {"pod=a", "pod=b"}  # the series without the label is nobody's
    assert out["pod=a"]["requests_running"]["mean"] == 4.0
    assert out["pod=b"]["requests_running"] == {"mean": 2.0, "max": 3.0, "p95": 3.0}
    assert out["pod=a"]["preemptions"]["increase"] == 7 and out["pod=b"]["preemptions"]["increase"] == 0
    assert out["pod=a"]["ttft_ms"]["count"] == 2 and out["pod=a"]["ttft_ms"]["mean"] == pytest.approx(750.0)
    assert out["pod=b"]["ttft_ms"]["count"] == 3 and out["pod=b"]["ttft_ms"]["mean"] == pytest.approx(100.0)
    assert summarize_by(qs, [None] * 4, 0.0, 4.0, "pod") == {}


def test_the_runs_series_are_one_range_query_per_gauge_and_counter() -> None:
    qs = {q.quantity: q for q in series_queries(('job="x"',), "pod")}
    kinds = {q.name: q.kind for q in CANONICAL.values()}
    assert set(qs) == {n for n, k in kinds.items() if k != "histogram"}
    assert all(q.range and q.part == kinds[n] for n, q in qs.items())
    assert qs["kv_cache_usage_ratio"].expr.startswith('avg by (pod)(vllm:kv_cache_usage_perc{job="x"})')
    # A counter's raw cumulative value, as a scrape reads it (the charts take its increase).
    assert qs["preemptions"].expr.startswith('sum by (pod)(vllm:num_preemptions_total{job="x"})')
    assert "increase" not in qs["preemptions"].expr
    assert series_queries((), "")[0].expr.startswith("avg(vllm:kv_cache_usage_perc)")


def test_series_answers_become_server_metrics_lines_per_replica_and_time() -> None:
    qs = [
        PromQuery("kv_cache_usage_ratio", "gauge", "k", True),
        PromQuery("preemptions", "counter", "p", True),
    ]
    kv = {
        "resultType": "matrix",
        "result": [
            {"metric": {"pod": "a"}, "values": [[10, "0.5"], [11, "0.9"]]},
            {"metric": {"pod": "b"}, "values": [[10, "0.1"], [11, "NaN"]]},
            {"metric": {}, "values": [[10, "0.3"]]},
        ],
    }
    pre = {"resultType": "matrix", "result": [{"metric": {"pod": "a"}, "values": [[11, "2"]]}]}
    lines = series_points(qs, [kv, pre], "pod")
    assert [(x["t"], x["target"]) for x in lines] == [
        (10.0, "pod=a"), (10.0, "pod=b"), (10.0, "prometheus"), (11.0, "pod=a"),
    ]  # fmt: skip
    assert lines[3]["scalars"] == {"kv_cache_usage_ratio": 0.9, "preemptions": 2.0}
    assert all(x["ok"] and x["source"] == "prometheus" for x in lines)
    # A failed query leaves its quantity missing; nothing at all gives no line.
    assert series_points(qs, [None, pre], "pod") == [
        {"t": 11.0, "target": "pod=a", "ok": True, "source": "prometheus", "scalars": {"preemptions": 2.0}}
    ]
    assert series_points(qs, [None, None], "") == []


def test_the_fleets_answer_adds_up_the_replicas_answers() -> None:
    """A replica's figures and the fleet's come from one set of grouped queries: the fleet's
    answer is the replicas' added up, as the query without ``by`` would have given it."""
    matrix = {
        "resultType": "matrix",
        "result": [
            {"metric": {"pod": "a"}, "values": [[0, "4"], [2, "6"]]},
            {"metric": {"pod": "b"}, "values": [[0, "1"], [2, "NaN"], [4, "3"]]},
            {"metric": {}, "values": [[0, "2"]]},  # a series without the label is the fleet's too
        ],
    }
    qs = [
        PromQuery("requests_running", "gauge", "g", True),
        PromQuery("kv_cache_usage_ratio", "gauge", "k", True),
        PromQuery("preemptions", "counter", "c"),
        PromQuery("ttft_s", "buckets", "b"),
        PromQuery("ttft_s", "sum", "s"),
    ]
    buckets = _vector(
        ({"pod": "a", "le": "0.5"}, "1"), ({"pod": "a", "le": "+Inf"}, "2"),
        ({"pod": "b", "le": "0.5"}, "3"), ({"pod": "b", "le": "+Inf"}, "3"),
    )  # fmt: skip
    answers = [
        matrix,
        matrix,
        _vector(({"pod": "a"}, "7"), ({"pod": "b"}, "2.5")),
        buckets,
        _vector(({"pod": "a"}, "1.5"), ({"pod": "b"}, "0.3")),
    ]
    running, kv, counter, merged, _ = fleet_answers(qs, answers, "pod")
    assert running == {
        "resultType": "matrix",
        "result": [{"metric": {}, "values": [[0.0, "7.0"], [2.0, "6.0"], [4.0, "3.0"]]}],
    }
    assert [float(v) for _, v in kv["result"][0]["values"]] == [
        7 / 3,
        6.0,
        3.0,
    ]  # a mean of the replicas present
    assert float(counter["result"][0]["value"][1]) == 9.5 and counter["result"][0]["metric"] == {}
    assert {x["metric"]["le"]: float(x["value"][1]) for x in merged["result"]} == {"0.5": 4.0, "+Inf": 5.0}
    fleet = summarize_answers(qs, fleet_answers(qs, answers, "pod"), 0.0, 4.0)
    assert fleet["ttft_ms"]["count"] == 5 and fleet["ttft_ms"]["mean"] == pytest.approx(360.0)
    assert fleet["preemptions"]["increase"] == 9.5
    assert fleet_answers(qs, [None] * 5, "pod") == [None] * 5


def test_replicas_with_other_bucket_bounds_are_not_added_into_the_fleets_histogram() -> None:
    """Two server generations (or a rolling upgrade) in one fleet: buckets with other bounds
    cannot be added per le; the fleet's histogram keeps the replicas with the commonest bounds,
    its sum too, as direct scraping keeps one layout."""
    qs = [PromQuery("ttft_s", "buckets", "b"), PromQuery("ttft_s", "sum", "s")]
    buckets = _vector(
        ({"pod": "a", "le": "0.1"}, "0"), ({"pod": "a", "le": "1"}, "10"), ({"pod": "a", "le": "+Inf"}, "10"),
        ({"pod": "b", "le": "0.5"}, "90"), ({"pod": "b", "le": "+Inf"}, "90"),
        ({"pod": "c", "le": "0.5"}, "10"), ({"pod": "c", "le": "+Inf"}, "10"),
    )  # fmt: skip
    sums = _vector(({"pod": "a"}, "8.0"), ({"pod": "b"}, "27.0"), ({"pod": "c"}, "3.0"))
    fleet = summarize_answers(qs, fleet_answers(qs, [buckets, sums], "pod"), 0.0, 10.0)["ttft_ms"]
    assert fleet["count"] == 100 and fleet["mean"] == pytest.approx(300.0)  # b and c: 30 s / 100
    assert fleet["p95"] <= 500.0
    # Each replica keeps its own.
    own = summarize_by(qs, [buckets, sums], 0.0, 10.0, "pod")
    assert own["pod=a"]["ttft_ms"]["count"] == 10 and own["pod=b"]["ttft_ms"]["count"] == 90


def test_range_steps_and_freshness() -> None:
    assert gauge_step_s(0, 60, 1.0) == 1.0
    assert gauge_step_s(0, 86_400, 1.0) == 86_400 / MAX_RANGE_POINTS
    assert freshness_query(('job="x"',)) == (
        'max(timestamp(vllm:num_requests_running{job="x"}))'
        ' or max(timestamp(sglang:num_running_reqs{job="x"}))'
    )


# -- answers --------------------------------------------------------------------------------------


def _recorded() -> tuple[list[PromQuery], list[dict | None], float, float]:
    rec = json.loads((DATA / "sim_step_answers.json").read_text())
    t0, t1 = rec["window"]
    queries = [
        PromQuery(a["quantity"], a["part"], a["expr"], a["endpoint"] == "query_range") for a in rec["answers"]
    ]
    return queries, [a["answer"]["data"] for a in rec["answers"]], t0, t1


def test_recorded_answers_map_onto_the_window_summary() -> None:
    queries, answers, t0, t1 = _recorded()
    out = summarize_answers(queries, answers, t0, t1)
    # Recorded at concurrency 8 against a 4-sequence batch: 4 running all along.
    assert out["requests_running"] == {"mean": 4.0, "max": 4.0, "p95": 4.0}
    assert 0 < out["kv_cache_usage_ratio"]["mean"] <= out["kv_cache_usage_ratio"]["max"] < 0.01
    assert out["generation_tokens"]["increase"] == pytest.approx(806.9376)
    assert out["generation_tokens"]["rate_per_s"] == pytest.approx(806.9376 / (t1 - t0))
    q = out["queue_time_ms"]
    assert q["count"] == pytest.approx(14.4096)
    assert q["mean"] == pytest.approx(25.510076982596527 / 14.4096 * 1000)
    assert 1000 < q["p50"] <= q["p90"] <= q["p95"] <= q["p99"] <= 2000
    # An empty answer (the emulator has no swapped requests) leaves the quantity out.
    assert "requests_swapped" not in out
    assert set(out) == {"requests_running", "kv_cache_usage_ratio", "generation_tokens", "queue_time_ms"}


def test_failed_or_empty_answers_leave_quantities_out() -> None:
    queries, answers, t0, t1 = _recorded()
    assert summarize_answers(queries, [None] * len(answers), t0, t1) == {}
    empty_vector = {"resultType": "vector", "result": []}
    empty_matrix = {"resultType": "matrix", "result": []}
    blank = [empty_matrix if q.range else empty_vector for q in queries]
    assert summarize_answers(queries, blank, t0, t1) == {}


def _vector(*items: tuple[dict, str]) -> dict:
    return {"resultType": "vector", "result": [{"metric": m, "value": [1.0, v]} for m, v in items]}


def test_histogram_buckets_are_made_monotonic_and_need_inf() -> None:
    qs = [PromQuery("ttft_s", "buckets", "x"), PromQuery("ttft_s", "sum", "y")]
    buckets = _vector(({"le": "0.1"}, "2"), ({"le": "0.5"}, "1.9"), ({"le": "+Inf"}, "4"), ({"le": "1"}, "3"))
    out = summarize_answers(qs, [buckets, _vector(({}, "2.0"))], 0.0, 10.0)["ttft_ms"]
    assert out["count"] == 4 and out["mean"] == pytest.approx(500.0)
    assert out["p50"] == pytest.approx(100.0)  # rank 2 reached at le=0.1 (2 counts), not after 0.5
    no_inf = _vector(({"le": "0.1"}, "2"), ({"le": "0.5"}, "3"))
    assert summarize_answers(qs, [no_inf, _vector(({}, "1"))], 0.0, 10.0) == {}
    # No sum (NaN): the quantiles stand, the mean is unknown.
    out = summarize_answers(qs, [buckets, _vector(({}, "NaN"))], 0.0, 10.0)["ttft_ms"]
    assert out["mean"] is None and out["count"] == 4


def test_nan_counters_and_gauge_gaps() -> None:
    qs = [PromQuery("preemptions", "counter", "x"), PromQuery("requests_running", "gauge", "y", True)]
    matrix = {"resultType": "matrix", "result": [{"metric": {}, "values": [[0, "1"], [1, "NaN"], [2, "3"]]}]}
    out = summarize_answers(qs, [_vector(({}, "NaN")), matrix], 0.0, 4.0)
    assert "preemptions" not in out
    # Time-weighted: 1 for 2 s (the NaN sample dropped), 3 for 2 s.
    assert out["requests_running"] == {"mean": 2.0, "max": 3.0, "p95": 3.0}
    assert not math.isnan(out["requests_running"]["mean"])


def test_freshness_waits_for_the_replica_whose_newest_sample_is_oldest() -> None:
    assert freshness_query(('job="x"',), by="pod") == (
        'min(max by (pod) (timestamp(vllm:num_requests_running{job="x"}))'
        ' or max by (pod) (timestamp(sglang:num_running_reqs{job="x"})))'
    )


def test_live_queries_and_their_row() -> None:
    q = live_queries(('job="x"',), "pod", 90.0)
    assert (
        q["requests_running"]
        == 'sum(vllm:num_requests_running{job="x"}) or sum(sglang:num_running_reqs{job="x"})'
    )
    assert q["generation_tokens_per_s"].startswith('sum(irate(vllm:generation_tokens_total{job="x"}[2m]))')
    assert q["preemptions_increase"] == 'sum(increase(vllm:num_preemptions_total{job="x"}[90000ms]))'
    assert q["kv_by_replica"].startswith('avg by (pod)(vllm:kv_cache_usage_perc{job="x"})')
    assert "kv_by_replica" not in live_queries((), "", 90.0)
    answers = {k: _vector(({}, "1")) for k in q}
    answers["kv_cache_usage_ratio"] = _vector(({}, "0.5"))
    answers["kv_by_replica"] = _vector(({"pod": "a"}, "0.2"), ({"pod": "b"}, "0.8"))
    answers["preemptions_per_s"] = None  # a failed query: that figure is missing
    row = live_row(answers)
    assert row["ok"] is True and row["kv_cache_usage_ratio"] == 0.5 and row["preemptions_per_s"] is None
    assert row["kv_cache_usage_ratio_fullest"] == 0.8
    # One replica: no fullest line; nothing matched or every query failed: a gap.
    answers["kv_by_replica"] = _vector(({"pod": "a"}, "0.2"))
    assert live_row(answers)["kv_cache_usage_ratio_fullest"] is None
    empty = {k: {"resultType": "vector", "result": []} for k in q}
    assert live_row(empty)["ok"] is False and live_row(empty)["requests_running"] is None
    assert live_row(dict.fromkeys(q))["ok"] is False

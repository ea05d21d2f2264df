"""``--prometheus-url`` against a real Prometheus scraping the emulator every second: a Locust
staircase of two steps takes its server figures from Prometheus, and they agree with direct
scrapes of the same emulator during the same run (a sampler thread here) and with what the
emulator is known to do; a selector that matches nothing, a bad query and a server that is not
Prometheus leave figures missing, counted and warned about, never a crash."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_records, run_locust
from tests.prometheus.conftest import SimUnderPrometheus
from tokenload.servermetrics.parse import HistogramState, parse_page
from tokenload.servermetrics.prometheus_source import PrometheusSource
from tokenload.servermetrics.summary import summarize_window

pytestmark = pytest.mark.slow

SELECTOR = '{job="sim",namespace="tokenload-test"}'


@dataclass
class Point:
    t: float
    target: str
    ok: bool
    scalars: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, HistogramState] = field(default_factory=dict)


class DirectSampler:
    """Scrapes the emulator's /metrics every ``interval_s`` in a thread while the run goes on."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        self.url, self.interval_s = url + "/metrics", interval_s
        self.points: list[Point] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    values = parse_page(r.read().decode())
            except OSError:
                self.points.append(Point(t, self.url, False))
            else:
                self.points.append(Point(t, self.url, True, values.scalars, values.histograms))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> DirectSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class PromRun:
    sim: SimUnderPrometheus
    run_dir: Path
    output: str
    summary: dict[str, Any]
    llm_stats: dict[str, Any]
    direct: list[Point]


@pytest.fixture(scope="module")
def prom_run(sim_under_prometheus: SimUnderPrometheus, tmp_path_factory: pytest.TempPathFactory) -> PromRun:
    run_dir = tmp_path_factory.mktemp("prom_run") / "run"
    with DirectSampler(sim_under_prometheus.sim_url) as sampler:
        run = run_locust(
            "locustfiles/chat.py,locustfiles/staircase.py", sim_under_prometheus.sim_url, run_dir,
            "--concurrency", "2,8", "--step-duration", "9", "--warmup", "2", "--output-tokens", "48",
            "--prompt-tokens", "256", "--prometheus-url", sim_under_prometheus.prometheus.url,
            "--prometheus-selector", SELECTOR,
        )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    return PromRun(
        sim_under_prometheus,
        run_dir,
        run.output,
        json.loads((run_dir / "summary.json").read_text()),
        json.loads((run_dir / "llm_stats.json").read_text()),
        sampler.points,
    )


def _close(a: float, b: float, rel: float, abs_: float = 0.0) -> bool:
    return abs(a - b) <= abs_ + rel * max(abs(a), abs(b))


def test_step_figures_from_prometheus_agree_with_direct_scrapes(prom_run: PromRun) -> None:
    steps = prom_run.summary["steps"]
    assert [s["concurrency"] for s in steps] == [2, 8]
    for step in steps:
        a, b = step["measure_start"], step["end"]
        prom, direct = step["server"], summarize_window(prom_run.direct, a, b)
        assert direct["scrapes"] >= 8, direct
        ctx = f"step {step['index']}: prometheus {json.dumps(prom)}\ndirect {json.dumps(direct)}"
        # Gauges: two samplings (every 1 s there, 0.5 s here) of a batch that empties for a
        # moment when synchronised requests end together: one sample in a dip moves a mean by 1/7.
        for gauge, floor in (
            ("requests_running", 0.4),
            ("requests_waiting", 0.4),
            ("kv_cache_usage_ratio", 0.03),
        ):
            assert _close(prom[gauge]["mean"], direct[gauge]["mean"], 0.3, floor), ctx
            assert _close(prom[gauge]["max"], direct[gauge]["max"], 0.2, floor), ctx
        # Counters: Prometheus extrapolates to the window's edges, direct scraping does not;
        # prompt tokens move in steps of a whole prompt.
        assert _close(
            prom["generation_tokens"]["rate_per_s"], direct["generation_tokens"]["rate_per_s"], 0.25
        ), ctx
        assert _close(prom["prompt_tokens"]["rate_per_s"], direct["prompt_tokens"]["rate_per_s"], 0.4), ctx
        assert prom["preemptions"]["increase"] == pytest.approx(0, abs=1e-9)
        for hist in ("queue_time_ms", "ttft_ms", "itl_ms", "decode_time_ms"):
            assert _close(prom[hist]["count"], direct[hist]["count"], 0.35, 2), ctx
            assert _close(prom[hist]["mean"], direct[hist]["mean"], 0.3, 30.0), ctx
    # What the emulator does: 2 users fit its 4-sequence batch; 8 users fill it and 4 wait.
    low, high = steps[0]["server"], steps[1]["server"]
    assert 1 <= low["requests_running"]["mean"] <= low["requests_running"]["max"] == 2
    assert low["requests_waiting"]["mean"] <= 0.5
    assert high["requests_running"]["max"] == 4
    assert high["requests_waiting"]["mean"] >= 3
    assert high["queue_time_ms"]["mean"] > 5 * max(low["queue_time_ms"]["mean"] or 0.0, 1.0)
    assert 0 < low["kv_cache_usage_ratio"]["mean"] < high["kv_cache_usage_ratio"]["mean"] <= 1


def test_the_runs_series_are_read_back_from_prometheus_for_the_reports_charts(prom_run: PromRun) -> None:
    lines = [json.loads(x) for x in (prom_run.run_dir / "server_metrics.jsonl").read_text().splitlines()]
    # Read from Prometheus (the pod is not scraped): one replica, its instance the emulator's.
    assert lines and all(x["source"] == "prometheus" and x["ok"] for x in lines)
    netloc = prom_run.sim.sim_url.split("//", 1)[1]
    assert {x["target"] for x in lines} == {f"instance={netloc}"}
    ts = [x["t"] for x in lines]
    assert ts == sorted(ts) and min(ts) <= prom_run.summary["steps"][0]["measure_start"]
    for step in prom_run.summary["steps"]:
        a, b = step["measure_start"], step["end"]
        inside = [x["scalars"] for x in lines if a <= x["t"] <= b]
        assert len(inside) >= 6, (a, b, ts)
        # The same gauge sampled on another grid than the step's own query: means agree as the
        # direct scrapes' do above; a counter's rise inside the step is the step's increase.
        running = sum(x["requests_running"] for x in inside) / len(inside)
        assert _close(running, step["server"]["requests_running"]["mean"], 0.3, 0.4), (running, step)
        rise = inside[-1]["generation_tokens"] - inside[0]["generation_tokens"]
        assert _close(rise, step["server"]["generation_tokens"]["increase"], 0.3), (rise, step)
    # The report draws them: KV usage, running and waiting, preemptions over time.
    html = (prom_run.run_dir / "report.html").read_text()
    for key in ("kv_usage", "running_waiting", "preemptions"):
        m = re.search(rf'data-chart="{key}" data-points="(\d+)"', html)
        assert m is not None and int(m.group(1)) >= 12, key


def test_run_summary_from_prometheus_matches_the_emulator(prom_run: PromRun) -> None:
    server = prom_run.llm_stats["server"]
    assert server["source"] == "prometheus" and server["failed_queries"] == 0
    assert server["query_failures"] == {} and server["prometheus_url"] == prom_run.sim.prometheus.url
    records = read_records(prom_run.run_dir)
    traces = prom_run.sim.traces()
    assert records and all(r["status"] == "ok" for r in records)
    assert _close(server["generation_tokens"]["increase"], sum(t["tokens_sent"] for t in traces), 0.15)
    assert _close(server["request_success"]["increase"], len(records), 0.15, 1)
    assert server["ttft_ms"]["count"] == pytest.approx(len(records), rel=0.15, abs=1)
    run_json = json.loads((prom_run.run_dir / "run.json").read_text())
    assert run_json["config"]["prometheus_url"] == prom_run.sim.prometheus.url
    assert run_json["config"]["prometheus_selector"] == ['job="sim"', 'namespace="tokenload-test"']


def test_a_selector_that_matches_nothing_gives_no_figures_and_one_warning(
    prom_run: PromRun, caplog: pytest.LogCaptureFixture
) -> None:
    step = prom_run.summary["steps"][1]
    source = PrometheusSource(prom_run.sim.prometheus.url, ('job="no-such-job"',))
    with caplog.at_level(logging.WARNING, logger="tokenload.prometheus"):
        first = source.window(step["measure_start"], step["end"])
        second = source.window(step["start"], step["end"])
    assert first == {"source": "prometheus", "queries": first["queries"], "failed_queries": 0}
    assert second == {"source": "prometheus", "queries": second["queries"], "failed_queries": 0}
    assert first["queries"] > 20
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and 'job="no-such-job"' in warnings[0], warnings
    assert source.failures == {"no_match": 2}
    # The same window with the run's selector, asked again here, equals the run's summary.json.
    again = PrometheusSource(prom_run.sim.prometheus.url, ('job="sim"',)).window(
        step["measure_start"], step["end"]
    )
    for key in ("requests_running", "generation_tokens", "queue_time_ms"):
        assert again[key] == pytest.approx(step["server"][key]), key


def test_errors_are_counted_and_warned_about_once(
    prom_run: PromRun, caplog: pytest.LogCaptureFixture
) -> None:
    step = prom_run.summary["steps"][0]
    with caplog.at_level(logging.WARNING, logger="tokenload.prometheus"):
        source = PrometheusSource(prom_run.sim.prometheus.url)
        assert source._get("query", {"query": "sum(("}) is None  # a query Prometheus refuses
        assert source._get("query", {"query": "sum(("}) is None
        assert source.failures == {"http_error": 2}
        # The emulator is no Prometheus: its answers are errors, every figure is missing.
        wrong = PrometheusSource(prom_run.sim.sim_url)
        out = wrong.window(step["measure_start"], step["end"])
        assert set(out) == {"source", "queries", "failed_queries"} and out["failed_queries"] == out["queries"]
        assert set(wrong.failures) <= {"http_error", "bad_answer"} and sum(wrong.failures.values()) > 20
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 + len(wrong.failures), messages
    assert any("bad_data" in m for m in messages), messages


def test_no_match_in_a_real_run_is_not_a_crash(
    sim_under_prometheus: SimUnderPrometheus, tmp_path: Path
) -> None:
    run = run_locust(
        "locustfiles/chat.py,locustfiles/staircase.py", sim_under_prometheus.sim_url, tmp_path / "run",
        "--concurrency", "2", "--step-duration", "4", "--warmup", "1", "--output-tokens", "16",
        "--prometheus-url", sim_under_prometheus.prometheus.url, "--prometheus-selector", 'job="elsewhere"',
    )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    assert "no vLLM/SGLang series match" in run.output
    [step] = json.loads((run.run_dir / "summary.json").read_text())["steps"]
    assert step["server"] is not None and all(v is None for v in step["server"].values()), step["server"]
    assert step["requests"]["ok"] > 0

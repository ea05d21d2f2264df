"""The live page's data and routes, without processes: the sampler's maths, the blueprint, and
how ``extend_web_ui`` hooks into a real Locust web UI app."""

from __future__ import annotations

import locust  # noqa: F401  (gevent patches before anything else)

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from flask import Flask

from tokenload.loadgen.fleet import Fleet
from tokenload.loadgen.phases import StepTracker
from tokenload.loadgen.step_plan import StepPlan
from tokenload.loadgen.steps import Step
from tokenload.metrics.aggregate import LLMStats
from tokenload.metrics.histogram import LogHistogram
from tokenload.results.run_inputs import StepSources
from tokenload.servermetrics.scraper import ScrapePoint
from tokenload.web.blueprint import CSP, STATIC_DIR, make_blueprint, public_url
from tokenload.web.live import LiveSeries
from tokenload.web.series import Ring, window_histogram

SECRET = "sk-tokenload-web-secret-77a1"


def _rec(ttft: float, tpot: float, out: int = 10, failure: str | None = None) -> dict[str, Any]:
    return {
        "name": "/v1/chat/completions",
        "failure_class": failure,
        "input_tokens": 100,
        "output_tokens": out,
        "token_count_diff": 0,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2e_ms": ttft + tpot * (out - 1),
    }


class _Scraper:
    def __init__(self, interval_s: float = 1.0) -> None:
        self.points: list[ScrapePoint] = []
        self.interval_s = interval_s
        self.targets = [SimpleNamespace(url="http://u:pw@127.0.0.1:1/metrics")]
        self.failures = {"http://u:pw@127.0.0.1:1/metrics": {}}


class _Ctx:
    """What LiveSeries reads of plugin.RunContext."""

    def __init__(self, state: str = "running") -> None:
        self.stats = LLMStats()
        self.fleet = Fleet()
        self.steps = StepTracker()
        self.plan = StepPlan()
        self.scraper: _Scraper | None = _Scraper()
        self.prometheus: Any = None
        self.start_time: float | None = 1000.0
        self.model = "m"
        self.finished = False
        self.results_written_at: float | None = None
        self.run_dir = None
        self.runner = SimpleNamespace(state=state, user_count=4)
        self.environment = SimpleNamespace(runner=self.runner, host="http://user:hunter2@127.0.0.1:9")

    def elapsed_s(self) -> float:
        return 5.0

    def rows(self) -> list[dict[str, Any]]:
        from tokenload.metrics.table import stats_rows

        return stats_rows(self.stats, self.elapsed_s())

    def step_sources(self) -> StepSources:
        return StepSources(tracker=self.steps)


def test_window_histogram_is_the_histogram_of_the_new_values() -> None:
    cumulative, only_new = LogHistogram(), LogHistogram()
    for v in (5.0, 6.0, 7.0, 500.0):
        cumulative.add(v)
    before = (dict(cumulative.buckets), cumulative.zero_count, cumulative.count)
    for v in (100.0, 110.0, 120.0, 130.0, 900.0, 0.0):
        cumulative.add(v)
        only_new.add(v)
    after = (dict(cumulative.buckets), cumulative.zero_count, cumulative.count)
    w = window_histogram(after, before, cumulative.relative_error)
    assert w.count == only_new.count == 6
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        bucketed = only_new.quantile(q)
        got = w.quantile(q)
        # same buckets; only_new also clamps to its exact min/max, the window cannot
        assert got == pytest.approx(bucketed, rel=0.011), q


class _Stream:
    """A stream in progress as the fleet reads it (client.openai_stream.StreamState's count)."""

    def __init__(self) -> None:
        self.chunk_tokens = 0


def _finish(ctx: _Ctx, rec: dict[str, Any]) -> None:
    """One request, start to end, as LLMUser.send counts it: the fleet, then the stats."""
    stream = _Stream()
    ctx.fleet.started(None, stream)
    stream.chunk_tokens = rec["output_tokens"]
    ctx.fleet.ended(None, stream)
    ctx.stats.record(rec, [])


def test_client_points_cover_the_last_window_and_survive_a_reset() -> None:
    ctx = _Ctx()
    live = LiveSeries(ctx, window_s=5.0)
    live.tick(0.0)  # the baseline
    assert len(live.client) == 0
    for _ in range(10):
        _finish(ctx, _rec(100.0, 20.0))
    live.tick(1.0)
    for _ in range(10):
        _finish(ctx, _rec(400.0, 50.0))
    _finish(ctx, _rec(1.0, 1.0, failure="http_5xx"))
    live.tick(2.0)
    cols = live.client.since(None)
    assert cols["t"] == [1.0, 2.0]
    assert cols["ttft_p50"][0] == pytest.approx(100.0, rel=0.011)
    assert cols["ttft_p99"][1] == pytest.approx(400.0, rel=0.011)
    assert cols["output_tokens_per_s"] == [pytest.approx(100.0), pytest.approx(105.0)]  # 210 tokens / 2 s
    assert cols["failures_per_s"][1] == pytest.approx(0.5)
    assert cols["users"] == [4, 4]
    # 6 s later the window holds only the slow requests' successors: none, so no percentile
    for t in range(3, 9):
        live.tick(float(t))
    cols = live.client.since(None)
    assert cols["ttft_p50"][-1] is None and cols["output_tokens_per_s"][-1] == 0.0
    # stats replaced (a reset): a new baseline, never a negative rate
    ctx.stats = LLMStats()
    _finish(ctx, _rec(50.0, 5.0))
    live.tick(9.0)
    live.tick(10.0)
    assert min(v for v in live.client.cols["output_tokens_per_s"] if v is not None) >= 0
    assert live.client.since(8.5)["t"] == [10.0]


def test_output_tokens_per_s_counts_a_long_stream_while_it_runs() -> None:
    """A 12 s stream at 50 tokens/s, sampled each second with a 5 s window: the rate is its
    50 tokens/s from the first full window on, not 0 while it runs and 120 when it ends (the
    count at completion)."""
    ctx = _Ctx()
    live = LiveSeries(ctx, window_s=5.0)
    stream = _Stream()
    live.tick(0.0)
    ctx.fleet.started(3, stream)
    for t in range(1, 13):
        stream.chunk_tokens += 50
        live.tick(float(t))
    ctx.fleet.ended(3, stream)
    ctx.stats.record(_rec(20.0, 20.0, out=600), [])
    live.tick(13.0)
    rates = live.client.since(None)["output_tokens_per_s"]
    assert rates[4:12] == [pytest.approx(50.0)] * 8, rates  # t = 5..12 s: full 5 s windows
    assert rates[12] == pytest.approx(40.0)  # t = 13 s: the last 50 tokens left the window
    assert ctx.fleet.arrived_tokens() == 600 and ctx.fleet.streams == set()


def test_a_masters_output_rate_sums_its_workers_reports() -> None:
    ctx, worker = _Ctx(), Fleet()
    live = LiveSeries(ctx, window_s=4.0)
    stream = _Stream()
    worker.started(None, stream)
    live.tick(0.0)
    for t in (3.0, 6.0):  # a worker reports every 3 s; each report carries its tokens so far
        stream.chunk_tokens += 90
        ctx.fleet.note_report("w0", worker.live_report())
        live.tick(t)
    assert live.client.since(None)["output_tokens_per_s"] == [pytest.approx(30.0)] * 2


def test_no_client_points_while_idle_but_one_after_the_stop() -> None:
    ctx = _Ctx(state="ready")
    live = LiveSeries(ctx, window_s=5.0)
    live.tick(0.0)
    live.tick(1.0)
    assert len(live.client) == 0
    ctx.runner.state = "running"
    live.tick(2.0)
    live.tick(3.0)
    ctx.runner.state = "stopped"
    live.tick(4.0)  # the last sample after the stop
    live.tick(5.0)
    assert live.client.since(None)["t"] == [3.0, 4.0]


def _point(t: float, target: str, ok: bool = True, **scalars: float) -> ScrapePoint:
    return ScrapePoint(t=t, target=target, ok=ok, scalars=dict(scalars))


def test_server_series_combines_replicas_counts_restarts_and_marks_gaps() -> None:
    ctx = _Ctx()
    assert ctx.scraper is not None
    pts = ctx.scraper.points
    a, b = "http://a/metrics", "http://b/metrics"
    pts += [
        _point(10.0, a, kv_cache_usage_ratio=0.2, requests_running=3, preemptions=5, generation_tokens=1000),
        _point(10.0, b, kv_cache_usage_ratio=0.4, requests_running=4, preemptions=0, generation_tokens=0),
    ]
    live = LiveSeries(ctx)
    live.tick(10.5)
    pts += [
        _point(11.0, a, kv_cache_usage_ratio=0.3, requests_running=5, preemptions=7, generation_tokens=1100),
        _point(11.0, b, kv_cache_usage_ratio=0.5, requests_running=1, preemptions=1, generation_tokens=50),
    ]
    live.tick(11.5)
    pts += [_point(12.0, a, ok=False), _point(12.0, b, ok=False)]
    # replica a restarted: its counters start again from zero
    pts += [
        _point(13.0, a, kv_cache_usage_ratio=0.0, requests_running=0, preemptions=2, generation_tokens=40),
        _point(13.0, b, kv_cache_usage_ratio=0.1, requests_running=0, preemptions=1, generation_tokens=60),
    ]
    live.tick(13.5)
    s = live.server.since(None)
    assert s["t"] == [10.0, 11.0, 12.0, 13.0]
    assert s["ok"] == [True, True, False, True]
    assert s["kv_cache_usage_ratio"] == [pytest.approx(0.3), pytest.approx(0.4), None, pytest.approx(0.05)]
    # The fullest replica's, which the mean hides.
    assert s["kv_cache_usage_ratio_fullest"] == [0.4, 0.5, None, 0.1]
    assert s["requests_running"] == [7, 6, None, 0]
    assert s["preemptions_increase"] == [0, 3, None, 3 + 2]
    assert s["generation_tokens_per_s"][1] == pytest.approx(100 + 50)
    assert s["generation_tokens_per_s"][3] == pytest.approx(40 / 2 + 10 / 2)  # a restarted: from zero
    assert live.server.since(11.0)["t"] == [12.0, 13.0]
    # nothing new: nothing appended
    live.tick(14.0)
    assert len(live.server) == 4


def test_ring_thins_the_old_half_and_keeps_order() -> None:
    ring = Ring(("v",), capacity=10)
    for i in range(40):
        ring.append({"t": float(i), "v": i})
    t = ring.cols["t"]
    assert len(t) <= 10 and t == sorted(t) and t[-1] == 39.0
    assert ring.since(t[-3])["t"] == t[-2:]


def _write(path: Path, *ends_tokens: tuple[float, int], status: str = "ok") -> None:
    with open(path, "a") as fh:
        for end, out in ends_tokens:
            rec = {"status": status, "wall_start": end - 1.0, "e2e_ms": 1000.0, "input_tokens": 7}
            fh.write(json.dumps({**rec, "output_tokens": out}) + "\n")


def _write_kept(ctx: _Ctx, *ends_tokens: tuple[float, int], status: str = "ok", now: float) -> None:
    """As the run keeps records: appended to requests.jsonl and tallied into the step windows
    (``now`` is the master's clock when they arrive)."""
    _write(ctx.records.path, *ends_tokens, status=status)
    for end, out in ends_tokens:
        rec = {"status": status, "wall_start": end - 1.0, "e2e_ms": 1000.0, "input_tokens": 7}
        ctx.steps.note_completion({**rec, "output_tokens": out}, now=now)


def _step_ctx(tmp_path: Path) -> _Ctx:
    ctx = _Ctx()
    ctx.records = SimpleNamespace(path=tmp_path / "requests.jsonl")
    ctx.records.path.write_text("")
    ctx.config = SimpleNamespace(gpu_peaks=None, public_dict=lambda: {})
    ctx.run_dir = tmp_path
    ctx.end_time = None
    ctx.plan.planned = [Step(0, 2, 10.0, 2.0), Step(1, 4, 10.0, 2.0)]
    return ctx


def test_steps_get_the_verdicts_of_summary_json_once_settled(tmp_path: Path) -> None:
    from tokenload.results.summary import step_summaries

    ctx = _step_ctx(tmp_path)
    live = LiveSeries(ctx)
    ctx.steps.begin(0, 2, None, 100.0)
    ctx.steps.measure(0, 102.0)
    for ttft in (80.0, 90.0):
        ctx.steps.record({**_rec(ttft, 10.0), "step": 0, "phase": "measure"}, [])
    _write_kept(ctx, (101.0, 50), (105.0, 10), (108.5, 20), now=109.0)  # warm-up, measured, measured
    _write_kept(ctx, (106.0, 999), status="failed", now=109.0)
    status = live.to_json(now=103.0)["status"]["step"]
    assert (status["index"], status["phase"], status["of"], status["users"]) == (0, "measure", 2, 2)
    live.tick(103.0)
    ctx.steps.end(0, 110.0)
    _write_kept(ctx, (111.0, 40), now=111.0)  # between the steps: no step's
    live.tick(111.0)
    rows = live.steps(111.0)
    assert rows[0]["state"] == "done" and rows[0]["verdict"] is None and rows[0]["verdict_pending"]
    assert rows[0]["ttft_p50"] == pytest.approx(80.0, rel=0.011) and rows[0]["ok"] == 2
    assert live.status(111.0)["step"]["phase"] == "ramp"
    rows = live.steps(114.5)
    assert rows[0]["verdict"]["bottleneck"] == "none"
    assert rows[0]["output_tokens_per_s"] == pytest.approx(30 / 8)
    ctx.steps.begin(1, 4, None, 112.0)
    ctx.steps.measure(1, 114.0)
    _write_kept(ctx, (115.0, 100), (121.0, 100), (123.0, 100), now=121.0)  # the last: a skewed clock
    live.tick(116.0)
    ctx.steps.end(1, 122.0)
    live.tick(123.0)
    rows = live.steps(127.0)
    # the same figures and verdicts as summary.json, which reads the whole file
    ref = {s["index"]: s for s in step_summaries(ctx.step_sources())}
    for row in rows:
        r = ref[row["index"]]
        assert row["output_tokens_per_s"] == pytest.approx(r["output_tokens_per_s"])
        assert row["verdict"] == r["verdict"]
    assert rows[1]["output_tokens_per_s"] == pytest.approx(200 / 8)


def test_a_failing_summary_leaves_the_step_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _step_ctx(tmp_path)
    ctx.steps.begin(0, 2, None, 100.0)
    ctx.steps.end(0, 110.0)

    def boom(src: Any) -> list[dict[str, Any]]:
        raise RuntimeError("no records")

    monkeypatch.setattr("tokenload.results.summary.step_summaries", boom)
    live = LiveSeries(ctx)
    live.to_json(now=120.0)
    live.tick(120.0)
    body = live.to_json(now=120.0)
    assert body["steps"][0]["verdict"] is None and "no records" in body["verdict_error"]


def _app(ctx: _Ctx) -> tuple[Flask, LiveSeries]:
    app = Flask(__name__)
    live = LiveSeries(ctx)
    app.register_blueprint(make_blueprint(ctx, live))
    return app, live


def test_blueprint_page_api_and_csv() -> None:
    ctx = _Ctx()
    ctx.stats.record(_rec(100.0, 20.0), [])
    app, live = _app(ctx)
    live.tick(1.0)
    live.tick(2.0)
    client = app.test_client()
    page = client.get("/tokenload/llm")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"] == CSP
    assert b'src="static/llm.js"' in page.data
    r = client.get("/tokenload/api/series")
    assert r.status_code == 200
    body = r.get_json()
    assert set(body) >= {"client", "server", "status", "steps", "window_s", "series_id"}
    assert body["status"]["host"] == "http://127.0.0.1:9"  # no user:password
    assert "hunter2" not in r.get_data(as_text=True) and "pw@" not in r.get_data(as_text=True)
    assert client.get("/tokenload/api/series?client_since=abc").status_code == 400
    r2 = client.get(f"/tokenload/api/series?client_since={body['client']['t'][-1]}")
    assert r2.get_json()["client"]["t"] == []
    assert client.get("/tokenload/static/llm.js").status_code == 200
    csv = client.get("/tokenload/llm_stats.csv")
    assert csv.status_code == 200 and csv.mimetype == "text/csv"


def test_public_url_drops_credentials() -> None:
    assert public_url("http://user:pw@host:8000/metrics?x=1") == "http://host:8000/metrics?x=1"
    assert public_url("http://host:8000") == "http://host:8000"
    assert public_url(None) is None


def test_static_files_load_nothing_from_elsewhere() -> None:
    files = sorted(STATIC_DIR.iterdir())
    assert {f.name for f in files} >= {"llm.html", "llm.js", "llm.css", "locust_tab.js"}
    for f in files:
        text = f.read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), f
        assert "@import" not in text and "url(" not in text, f


def test_extend_web_ui_on_a_real_locust_app(monkeypatch: pytest.MonkeyPatch) -> None:
    from locust import HttpUser, task
    from locust.env import Environment

    from tokenload.loadgen import plugin
    from tokenload.loadgen.webui import CHARTS_TAB_KEY, STEPS_TAB_KEY, TAB_KEY, extend_web_ui

    class U(HttpUser):
        host = "http://127.0.0.1:9"

        @task
        def t(self) -> None:
            pass

    monkeypatch.setattr("sys.argv", ["locust"])  # Locust's index page parses the command line
    env = Environment(user_classes=[U])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    ctx = plugin.context_of(env)
    extend_web_ui(env, ctx)
    live = env.web_ui.app.extensions["tokenload"]
    try:
        client = env.web_ui.app.test_client()
        index = client.get("/").get_data(as_text=True)
        assert "tokenload/static/locust_tab.js" in index and f'data-key="{CHARTS_TAB_KEY}"' in index
        args = json.loads(re.search(r"window.templateArgs = (.*)\n", index).group(1))
        assert [t["key"] for t in args["extended_tabs"]] == [TAB_KEY, STEPS_TAB_KEY, CHARTS_TAB_KEY]
        tables = {t["key"]: t["structure"] for t in args["extended_tables"]}
        keys = [c["key"] for c in tables[STEPS_TAB_KEY]]
        assert len(set(keys)) == len(keys) and keys[-2:] == ["verdict", "decided_by"]
        stats = client.get("/stats/requests").get_json()
        ext = {e["key"]: e["data"] for e in stats["extended_stats"]}
        assert ext[TAB_KEY][-1]["name"] == "Aggregated"
        assert ext[STEPS_TAB_KEY] == []  # no step yet
        assert "/tokenload/llm" in ext[CHARTS_TAB_KEY][0]["page"]
        assert client.get("/tokenload/api/series").status_code == 200
        assert client.get("/tokenload/llm").status_code == 200
    finally:
        live.stop()
        env.runner.quit()


def test_with_web_login_the_page_and_its_data_need_a_login(monkeypatch: pytest.MonkeyPatch) -> None:
    from locust import HttpUser, task
    from locust.env import Environment

    from tokenload.loadgen import plugin
    from tokenload.loadgen.webui import extend_web_ui

    class U(HttpUser):
        host = "http://127.0.0.1:9"

        @task
        def t(self) -> None:
            pass

    monkeypatch.setattr("sys.argv", ["locust"])
    env = Environment(user_classes=[U])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, web_login=True, delayed_start=True)
    env.web_ui.app.secret_key = "test"
    env.web_ui._login_manager.user_loader(lambda user_id: None)
    extend_web_ui(env, plugin.context_of(env))
    try:
        client = env.web_ui.app.test_client()
        for path in ("/tokenload/llm", "/tokenload/api/series", "/tokenload/llm_stats.csv"):
            r = client.get(path)
            assert r.status_code == 302 and "/login" in r.headers["Location"], path
        assert client.get("/tokenload/static/llm.js").status_code == 200  # code, no data
    finally:
        env.web_ui.app.extensions["tokenload"].stop()
        env.runner.quit()


def test_the_steps_tab_shows_settled_steps_as_the_report_and_the_running_one_by_its_state() -> None:
    from tokenload.loadgen.webui import step_tab_rows
    from tokenload.report.tables import step_cells

    settled = {
        0: {
            "index": 0,
            "concurrency": 2,
            "requests_per_s": 3.25,
            "output_tokens_per_s": 104.0,
            "ttft_ms": {"p50": 21.5, "p99": 40.0},
            "tpot_ms": {"p50": 5.25, "p99": 7.5},
            "server": {"kv_cache_usage_ratio": {"mean": 0.1, "max": 0.2}},
            "flags": ["client_bound"],
            "verdict": {"bottleneck": "client", "decided_by": "send lag p99"},
        }
    }
    live_rows = [
        {"index": 0, "concurrency": 2, "target_rate_rps": None, "state": "done"},
        {"index": 1, "concurrency": 8, "target_rate_rps": None, "state": "measure", "ttft_p50": 30.0,
         "ttft_p99": 55.5, "tpot_p50": 6.0, "tpot_p99": 9.0},
        {"index": 2, "concurrency": 16, "target_rate_rps": None, "state": "done"},
    ]  # fmt: skip
    rows = step_tab_rows(live_rows, settled)
    assert list(rows[0].values()) == [*step_cells(settled[0]), "send lag p99"]
    assert rows[1]["load"] == "8 users" and rows[1]["ttft_p50"] == "30.0" and rows[1]["ttft_p99"] == "55.5"
    assert rows[1]["verdict"] == "measuring" and rows[1]["out_tok_s"] == "-" and rows[1]["decided_by"] == "-"
    assert rows[2]["verdict"] == "settling"
    # Judging failed: the finished step says so and why, never "settling" for ever.
    failed = step_tab_rows(live_rows, settled, "KeyError: 'server'")
    assert failed[0] == rows[0] and failed[1] == rows[1]
    assert failed[2]["verdict"] == "not judged" and failed[2]["decided_by"] == "KeyError: 'server'"


def test_the_live_page_says_a_close_call_and_a_thin_step_in_the_reports_words() -> None:
    # The live page's step table shows what the server words (llm.js keeps no text of its own):
    # the step's flags, a step too thin to judge, and a close call as the reports say it.
    from tokenload.analysis.thresholds import CLOSE_CALL
    from tokenload.report.tables import verdict_notes, verdict_sentence

    close = {"bottleneck": "memory_bandwidth", "saturated": True, "close_call": True}
    notes = verdict_notes(["drifting"], close)
    assert notes == ["drifting", f"close call: {CLOSE_CALL}"]
    assert CLOSE_CALL in verdict_sentence({"index": 2, "concurrency": 4, "verdict": close})
    assert verdict_notes([], {"bottleneck": "none", "low_sample": True}) == [
        "few requests: throughput not judged"
    ]
    assert verdict_notes(["client_bound"], None) == ["client_bound"]
    assert verdict_notes([], {"bottleneck": "none"}) == []

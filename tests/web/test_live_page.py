"""The live LLM page during a real run: the emulator, Locust with its web UI and a staircase of two
steps (loopback only, bounded in time, stopped by PID), its JSON endpoint, and the page itself in
headless Chromium (charts drawn, no console message, no request leaving 127.0.0.1, a screenshot).

Chromium is found as ``$CHROMIUM`` or ``chromium``/``chromium-browser``/``google-chrome`` on the
PATH; without it the browser test is skipped, unless ``$CI`` is set, where it fails.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser import console_lines, page_requests, run_chromium
from tests.conftest import BIN, ROOT
from tokenload.analysis.diagnosis import BOTTLENECKS
from tokenload.serving.process import ServerProcess

pytestmark = pytest.mark.slow

SECRET = "sk-tokenload-live-page-secret-5e0d"
CHART_IDS = ("ttft", "tpot", "tokens", "kv", "queue", "preempt")


@dataclass
class LiveRun:
    base: str  # the Locust web UI, http://127.0.0.1:PORT
    run_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stop this Locust process (by its PID): it writes summary.json as it quits."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, dict(r.headers), r.read()


def _series(base: str, query: str = "") -> dict[str, Any]:
    return json.loads(_get(f"{base}/tokenload/api/series{query}")[2])


def _filled(values: list[Any]) -> list[Any]:
    return [v for v in values if v is not None]


def _ready(body: dict[str, Any]) -> bool:
    c, s = body["client"], body["server"] or {}
    steps = body["steps"]
    return (
        len(_filled(c["ttft_p50"])) >= 5
        and len(_filled(s.get("kv_cache_usage_ratio", []))) >= 5
        and bool(steps)
        and steps[0]["verdict"] is not None
    )


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    tmp = tmp_path_factory.mktemp("llm_web")
    run_dir = tmp / "run"
    log = tmp / "locust.log"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=tmp / "sim.log") as sim:
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    str(BIN / "locust"), "-f", "locustfiles/chat.py,locustfiles/staircase.py",
                    "--host", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                    "--concurrency", "2,8", "--step-duration", "8", "--warmup", "0.25",
                    "--autoquit", "60", "--stop-timeout", "5",
                    "--run-dir", str(run_dir), "--metrics-interval", "0.5",
                ],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            body: dict[str, Any] | None = None
            while time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.5)
                try:
                    body = _series(base)
                except OSError:
                    continue
                if _ready(body):
                    break
            else:
                pytest.fail(f"no live data within 60 s: {json.dumps(body)[:2000]}\n{log.read_text()[-3000:]}")
            run = LiveRun(base, run_dir, log, proc)
            yield run
        finally:
            LiveRun(base, run_dir, log, proc).stop()


def test_series_endpoint_has_data_during_the_run(live_run: LiveRun) -> None:
    body = _series(live_run.base)
    assert body["status"]["state"] in ("spawning", "running", "stopping", "stopped")
    c, s = body["client"], body["server"]
    assert len(c["t"]) >= 5 and c["t"] == sorted(c["t"])
    assert all(v > 0 for v in _filled(c["ttft_p50"])) and _filled(c["tpot_p99"])
    assert max(_filled(c["output_tokens_per_s"])) > 0 and max(_filled(c["users"])) >= 2
    for key in ("kv_cache_usage_ratio", "requests_running", "requests_waiting", "preemptions_increase"):
        assert _filled(s[key]), key
    assert max(_filled(s["generation_tokens_per_s"])) > 0
    step0 = body["steps"][0]
    assert step0["index"] == 0 and step0["concurrency"] == 2 and step0["state"] == "done"
    assert step0["ok"] > 0 and step0["ttft_p50"] > 0
    assert step0["verdict"]["bottleneck"] in BOTTLENECKS
    # What the page says next to the verdict comes worded from the server.
    from tokenload.report.tables import verdict_notes

    assert step0["verdict_notes"] == verdict_notes(step0["flags"], step0["verdict"])
    # incremental: only rows after the given time
    later = _series(live_run.base, f"?client_since={c['t'][-1]}&server_since={s['t'][-1]}")
    assert len(later["client"]["t"]) <= 3 and all(t > c["t"][-1] for t in later["client"]["t"])
    # the page, its JSON and Locust's pages with the tab hold no secret
    for path in ("/tokenload/api/series", "/tokenload/llm", "/", "/stats/requests"):
        assert SECRET.encode() not in _get(live_run.base + path)[2], path
    status, headers, _ = _get(live_run.base + "/tokenload/llm")
    assert status == 200 and "default-src 'none'" in headers["Content-Security-Policy"]
    index = _get(live_run.base + "/")[2].decode()
    assert "/tokenload/static/locust_tab.js" in index


# -- the browser -------------------------------------------------------------------------------------


def test_page_draws_its_charts_in_headless_chromium(chromium: str, live_run: LiveRun, tmp_path: Path) -> None:
    url = live_run.base + "/tokenload/llm"
    net_log = tmp_path / "net.json"
    dom, err = run_chromium(
        chromium, tmp_path / "p1", f"--log-net-log={net_log}", "--window-size=1400,1000",
        "--virtual-time-budget=6000", "--dump-dom", url,
    )  # fmt: skip
    # every chart drew points, and says how many
    canvases = re.findall(r'<canvas[^>]*aria-label="([^"]+)"[^>]*data-points="(\d+)"', dom)
    assert len(canvases) == len(CHART_IDS), dom[:3000]
    assert all(int(n) > 0 for _, n in canvases), canvases
    for cid in CHART_IDS:
        assert f'id="chart-{cid}"' in dom
    assert "data-errors" not in dom and 'id="error-banner" hidden' in dom, dom[:3000]
    assert re.search(r'class="verdict (saturated|ok)"', dom), "no step verdict shown"
    # One server: no fullest replica's line, and its legend item is not displayed.
    assert re.search(
        r'<span class="item" style="display: none;"><span [^>]*></span><span>fullest replica<', dom
    )
    assert SECRET not in dom
    # no console message at all from the page (errors, CSP violations, logs)
    assert not console_lines(err), console_lines(err)
    # every request the page made stayed on 127.0.0.1
    requests = page_requests(net_log)
    assert any(u.endswith("/tokenload/llm") for u in requests) and any("/api/series" in u for u in requests)
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in requests), requests

    shot = live_run.run_dir / "llm_charts.png"
    run_chromium(
        chromium, tmp_path / "p2", "--window-size=1400,1000", "--hide-scrollbars",
        "--virtual-time-budget=6000", f"--screenshot={shot}", url,
    )  # fmt: skip
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    print(f"\nscreenshot: {shot}")


def test_locust_ui_shows_the_charts_tab(chromium: str, live_run: LiveRun, tmp_path: Path) -> None:
    url = live_run.base + "/?tab=llm_charts"
    net_log = tmp_path / "net.json"
    dom, err = run_chromium(
        chromium, tmp_path / "p1", f"--log-net-log={net_log}", "--window-size=1400,1000",
        "--virtual-time-budget=8000", "--dump-dom", url,
    )  # fmt: skip
    assert 'data-tokenload-tab="shown"' in dom and 'id="tokenload-llm-frame"' in dom, dom[-3000:]
    assert ">LLM charts<" in dom and ">LLM<" in dom
    assert not [line for line in console_lines(err) if "tokenload" in line], console_lines(err)
    requests = page_requests(net_log)
    assert any("/tokenload/api/series" in u for u in requests)  # the framed page polls
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in requests), requests
    shot = live_run.run_dir / "locust_llm_charts_tab.png"
    run_chromium(
        chromium, tmp_path / "p2", "--window-size=1400,1000", "--virtual-time-budget=8000",
        f"--screenshot={shot}", url,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshot: {shot}")


def _both_verdicts(base: str) -> dict[str, Any]:
    deadline = time.monotonic() + 45
    body = _series(base)
    while time.monotonic() < deadline and not (
        len(body["steps"]) == 2 and all(s["verdict"] is not None for s in body["steps"])
    ):
        time.sleep(0.5)
        body = _series(base)
    assert [s["verdict"] is not None for s in body["steps"]] == [True, True], body["steps"]
    return body


def test_locust_ui_shows_each_steps_verdict_in_its_own_tab(
    chromium: str, live_run: LiveRun, tmp_path: Path
) -> None:
    """The "LLM steps" tab (Locust's documented extended tabs): each settled step's row with its
    verdict and the signal that decided it, as the live page has them, drawn by Locust's UI."""
    body = _both_verdicts(live_run.base)
    stats = json.loads(_get(f"{live_run.base}/stats/requests")[2])
    rows = next(e["data"] for e in stats["extended_stats"] if e["key"] == "llm_steps")
    assert [r["step"] for r in rows] == [str(s["index"]) for s in body["steps"]]
    for row, step in zip(rows, body["steps"], strict=True):
        assert row["load"] == f"{step['concurrency']} users"
        assert row["verdict"].split(" ")[0] == step["verdict"]["bottleneck"]
        assert row["decided_by"] == step["verdict"]["decided_by"]
    dom, err = run_chromium(
        chromium, tmp_path / "p1", "--window-size=1400,1000", "--virtual-time-budget=8000", "--dump-dom",
        live_run.base + "/?tab=llm_steps",
    )  # fmt: skip
    assert ">LLM steps<" in dom and ">decided by<" in dom, dom[-3000:]
    for row in rows:
        assert f">{row['verdict']}<" in dom and f">{row['decided_by']}<" in dom, (row, dom[-3000:])
    assert SECRET not in dom
    assert not [line for line in console_lines(err) if "tokenload" in line], console_lines(err)
    shot = live_run.run_dir / "locust_llm_steps_tab.png"
    run_chromium(
        chromium, tmp_path / "p2", "--window-size=1400,700", "--virtual-time-budget=8000",
        f"--screenshot={shot}", live_run.base + "/?tab=llm_steps",
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshot: {shot}")


def test_live_step_verdicts_match_summary_json(live_run: LiveRun) -> None:
    """Last (it stops the run): what the page showed for the finished steps is what summary.json says."""
    body = _both_verdicts(live_run.base)
    live_run.stop()
    summary = json.loads((live_run.run_dir / "summary.json").read_text())
    assert len(summary["steps"]) == 2
    for live, ref in zip(body["steps"], summary["steps"], strict=True):
        assert live["index"] == ref["index"] and live["concurrency"] == ref["concurrency"]
        assert live["verdict"] == ref["verdict"]
        assert live["output_tokens_per_s"] == pytest.approx(ref["output_tokens_per_s"], abs=0.01)
        assert live["ok"] == ref["requests"]["ok"]
        assert live["ttft_p50"] == pytest.approx(ref["ttft_ms"]["p50"], abs=0.01)


def test_a_fleets_kv_chart_shows_the_fullest_replica(chromium: str, tmp_path: Path) -> None:
    """Two replicas routed 3:1 (tests/sweep/test_replicas.py's KV-tight H100 pair), each scraped:
    the KV chart draws the fullest replica's usage next to the fleet's mean, which hides it."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    sim_args = ["-m", "tokenload.sim", "--port", "0", "--replicas", "2", "--routing", "weighted:3,1",
                "--profile", "h100-llama3.1-8b", "--num-gpu-blocks", "300",
                "--max-model-len", "4096"]  # fmt: skip
    with ServerProcess(sim_args, log_path=tmp_path / "sim.log") as sim:
        replicas = json.loads(_get(sim.url + "/sim/replicas")[2])["replicas"]
        with open(tmp_path / "locust.log", "wb") as out:
            proc = subprocess.Popen(
                [
                    str(BIN / "locust"), "-f", "locustfiles/chat.py,locustfiles/staircase.py",
                    "--host", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                    "--concurrency", "16", "--step-duration", "20", "--warmup", "0.25",
                    "--prompt-tokens", "512", "--output-tokens", "64", "--autoquit", "30",
                    "--stop-timeout", "5", "--run-dir", str(tmp_path / "run"), "--metrics-interval", "0.5",
                    *(a for r in replicas for a in ("--metrics-url", r["metrics_url"])),
                ],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        run = LiveRun(base, tmp_path / "run", tmp_path / "locust.log", proc)
        try:
            deadline = time.monotonic() + 60
            server: dict[str, Any] = {}

            def overfilled() -> bool:  # 8 points, and the first replica's cache full at one
                fullest = _filled(server.get("kv_cache_usage_ratio_fullest", []))
                return len(fullest) >= 8 and max(fullest) >= 0.9

            while time.monotonic() < deadline and not overfilled():
                assert proc.poll() is None, run.log.read_text()[-3000:]
                time.sleep(0.5)
                try:
                    server = _series(base)["server"] or {}
                except OSError:
                    continue
            pairs = [
                (m, f)
                for m, f in zip(
                    server["kv_cache_usage_ratio"], server["kv_cache_usage_ratio_fullest"], strict=True
                )
                if m is not None and f is not None
            ]
            assert len(pairs) >= 8, server
            assert all(f >= m for m, f in pairs)
            # The first replica fills its cache while the fleet's mean stays well below full.
            assert max(f for _, f in pairs) >= 0.9 and min(m for m, _ in pairs[-4:]) < 0.85, pairs
            dom, err = run_chromium(
                chromium, tmp_path / "p1", "--window-size=1400,1000", "--virtual-time-budget=6000",
                "--dump-dom", base + "/tokenload/llm",
            )  # fmt: skip
        finally:
            run.stop()
    kv = re.search(r'<section class="chart" id="chart-kv">.*?</section>', dom, re.S)
    assert kv is not None, dom[:3000]
    assert re.search(
        r'<span class="item"(?: style="")?><span [^>]*></span><span>fullest replica<', kv.group(0)
    ), kv.group(0)
    drawn = json.loads(re.search(r'data-series="([^"]*)"', kv.group(0)).group(1).replace("&quot;", '"'))
    assert drawn["kv_cache_usage_ratio_fullest"] >= 5 and drawn["kv_cache_usage_ratio"] >= 5, drawn
    assert not console_lines(err), console_lines(err)

"""A fleet read through Prometheus (issue #15 item 5, ``--prometheus-url``): two emulated
replicas behind the emulator's router (`tokenload sim --replicas 2 --routing weighted:3,1`), each
scraped by a real Prometheus as a target of its own, loaded by Locust with its web UI. The run
reads the fleet's figures from Prometheus, asks the same queries again grouped by
``--prometheus-replica-label`` (``instance`` by default), keeps each replica's figures and
verdict, and names the overloaded one an imbalance, as when it scrapes each replica itself
(tests/sweep/test_replicas.py); the live page's server series comes from Prometheus too, with
the fullest replica's KV usage."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT
from tests.prometheus.conftest import free_port, start_prometheus
from tokenload.servermetrics.prometheus_source import PrometheusSource
from tokenload.serving.process import ServerProcess

pytestmark = pytest.mark.slow

#: Two H100 replicas whose 300-block KV caches (4,800 tokens) hold about 8 of these 576-token
#: requests each: 16 users split 3:1 overfill the first while the second holds 4 with room.
SIM = ["-m", "tokenload.sim", "--port", "0", "--replicas", "2", "--profile", "h100-llama3.1-8b",
       "--num-gpu-blocks", "300", "--max-model-len", "4096", "--routing", "weighted:3,1"]  # fmt: skip
SELECTOR = '{namespace="tokenload-test"}'


def test_an_overloaded_replica_behind_prometheus_is_named_an_imbalance(
    prometheus_bin: str, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    out = tmp_path / "run"
    live: list[dict] = []
    with ServerProcess(SIM, log_path=tmp_path / "sim.log") as sim:
        with urllib.request.urlopen(sim.url + "/sim/replicas", timeout=10) as r:
            netlocs = [urllib.parse.urlsplit(x["url"]).netloc for x in json.load(r)["replicas"]]
        prom = start_prometheus(prometheus_bin, tmp_path, {f"sim{i}": n for i, n in enumerate(netlocs)})
        try:
            with open(tmp_path / "locust.log", "wb") as log:
                proc = subprocess.Popen(
                    [str(BIN / "locust"), "-f", "locustfiles/chat.py,locustfiles/staircase.py",
                     "--host", sim.url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                     "--autoquit", "5", "--concurrency", "4,16", "--step-duration", "16", "--warmup", "2",
                     "--prompt-tokens", "512", "--output-tokens", "64", "--metrics-interval", "1",
                     "--run-dir", str(out), "--prometheus-url", prom.url,
                     "--prometheus-selector", SELECTOR],
                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
            try:
                deadline = time.monotonic() + 120
                while proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(2.0)
                    try:
                        with urllib.request.urlopen(base + "/tokenload/api/series", timeout=5) as r:
                            live.append(json.load(r))
                    except OSError:
                        continue
                proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
            assert proc.returncode == 0, (tmp_path / "locust.log").read_text()[-3000:]
            summary = json.loads((out / "summary.json").read_text())
            top = summary["steps"][-1]
            # The same window asked again by another label that tells the replicas apart (the
            # job), and by none (an empty label: the fleet as one server).
            by_job = PrometheusSource(prom.url, ('namespace="tokenload-test"',), replica_label="job")
            jobs = by_job.replicas(top["measure_start"], top["end"])
            fleet_only = PrometheusSource(prom.url, ('namespace="tokenload-test"',), replica_label="")
            assert fleet_only.replicas(top["measure_start"], top["end"]) is None
            ungrouped = fleet_only.window(top["measure_start"], top["end"])
            # Each replica's figures come from the fleet's answers: no query more.
            src = PrometheusSource(prom.url, ('namespace="tokenload-test"',))
            src.window(top["measure_start"], top["end"])
            asked = src.queries
            assert src.replicas(top["measure_start"], top["end"]) is not None and src.queries == asked
        finally:
            prom.stop()
    # The live page: its server series from Prometheus, the fullest replica's KV usage above the
    # fleet's mean while the first replica is overfilled. The page asks Prometheus every 5 s: with
    # 10 s steps, the two samples of the top step both fell while the first replica's cache was
    # still filling (0.59 and 0.79, 0.94 in the run's files) in 1 of 3 clean-clone CI runs; 16 s
    # steps give the full cache two samples or more.
    server = live[-1]["server"]
    assert server is not None, live[-1]
    rows = [dict(zip(server, col, strict=True)) for col in zip(*server.values(), strict=True)]
    assert len(rows) >= 5 and all(r["ok"] for r in rows), rows
    assert max(r["requests_running"] or 0 for r in rows) >= 8
    assert max(r["generation_tokens_per_s"] or 0 for r in rows) > 0
    pairs = [(r["kv_cache_usage_ratio"], r["kv_cache_usage_ratio_fullest"]) for r in rows]
    assert any(f is not None and f >= 0.9 and m < f for m, f in pairs), pairs
    status = live[-1]["status"]["server_metrics"]
    # Prometheus is the one target; its failures (none expected on loopback) are counted there.
    assert status["targets"] == [f"Prometheus {prom.url}"] and isinstance(status["failures"][prom.url], dict)
    assert not {"down", "http_error", "bad_answer", "no_match"} & set(status["failures"][prom.url]), status
    heavy, light = (f"instance={n}" for n in netlocs)
    # The run's series, read back from Prometheus (the replicas are not scraped directly), each
    # replica's own: the report draws the heavy one's full cache beside the light one's.
    lines = [json.loads(x) for x in (out / "server_metrics.jsonl").read_text().splitlines()]
    assert lines and all(x["source"] == "prometheus" for x in lines)
    assert {x["target"] for x in lines} == {heavy, light}
    top_kv = {
        r: max(x["scalars"]["kv_cache_usage_ratio"] for x in lines
               if x["target"] == r and top["measure_start"] <= x["t"] <= top["end"])
        for r in (heavy, light)
    }  # fmt: skip
    assert top_kv[heavy] >= 0.9 > top_kv[light], top_kv
    html = (out / "report.html").read_text()
    kv_chart = html[html.index('data-chart="kv_usage"') :].split("</figure>", 1)[0]
    assert f"kv_cache_usage_ratio {heavy}" in kv_chart and f"kv_cache_usage_ratio {light}" in kv_chart
    assert set(top["server_replicas"]) == {heavy, light}
    mine = top["server_replicas"]
    assert mine[heavy]["kv_cache_usage_ratio"]["max"] >= 0.9
    assert mine[light]["kv_cache_usage_ratio"]["max"] < 0.9
    # Three requests in four went to the first replica: its share of the fleet's tokens.
    tokens = {k: v["generation_tokens"]["increase"] for k, v in mine.items()}
    assert tokens[heavy] > 1.5 * tokens[light], tokens
    fleet = top["server"]["generation_tokens"]["increase"]
    assert tokens[heavy] + tokens[light] == pytest.approx(fleet, rel=1e-6)
    # The fleet's figures are the replicas' added up (one set of grouped queries), and equal
    # those of the queries without grouping.
    for key in ("generation_tokens", "prompt_tokens", "preemptions"):
        assert top["server"][key]["increase"] == pytest.approx(ungrouped[key]["increase"], rel=1e-6, abs=1e-9)
    for key in ("requests_running", "requests_waiting", "kv_cache_usage_ratio"):
        assert top["server"][key]["mean"] == pytest.approx(ungrouped[key]["mean"], rel=1e-6), key
    assert top["server"]["ttft_ms"]["count"] == pytest.approx(ungrouped["ttft_ms"]["count"], rel=1e-6)
    assert top["server"]["ttft_ms"]["p50"] == pytest.approx(ungrouped["ttft_ms"]["p50"], rel=1e-6)
    verdict = top["verdict"]
    assert verdict["bottleneck"] == "imbalance", verdict["evidence"]
    assert verdict["imbalance"]["with_room"] == [light]
    assert set(verdict["imbalance"]["saturated"]) == {heavy}
    # Which resource ran out on the heavy replica is a near tie (tests/sweep/test_replicas.py).
    assert verdict["imbalance"]["saturated"][heavy] in ("kv_capacity", "memory_bandwidth")
    assert verdict["decided_by"] == f"replica {heavy}"
    assert all(e["value"] is not None for e in verdict["evidence"])
    assert jobs is not None and set(jobs) == {"job=sim0", "job=sim1"}
    assert jobs["job=sim0"]["generation_tokens"]["increase"] == pytest.approx(tokens[heavy], rel=1e-6)
    report = (out / "report.md").read_text()
    assert "imbalance" in report and heavy in report

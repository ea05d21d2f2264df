"""A fleet read through Prometheus (issue #15 item 5, ``--prometheus-url``): two emulated
replicas behind the emulator's router (`tokenload sim --replicas 2 --routing weighted:3,1`), each
scraped by a real Prometheus as a target of its own. The sweep reads the fleet's figures from
Prometheus, asks the same queries again grouped by ``--prometheus-replica-label`` (``instance``
by default), keeps each replica's figures and verdict, and names the overloaded one an
imbalance, as it does when it scrapes each replica itself (tests/sweep/test_replicas.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.prometheus.conftest import start_prometheus
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
    with ServerProcess(SIM, log_path=tmp_path / "sim.log") as sim:
        with urllib.request.urlopen(sim.url + "/sim/replicas", timeout=10) as r:
            netlocs = [urllib.parse.urlsplit(x["url"]).netloc for x in json.load(r)["replicas"]]
        prom = start_prometheus(prometheus_bin, tmp_path, {f"sim{i}": n for i, n in enumerate(netlocs)})
        try:
            out = tmp_path / "run"
            cmd = [sys.executable, "-m", "tokenload", "sweep", "--host", sim.url, "--workers", "0",
                   "--out", str(out), "--concurrency", "4,16", "--step-duration", "8", "--warmup", "2",
                   "--prompt-tokens", "512", "--output-tokens", "64", "--metrics-interval", "1",
                   "--prometheus-url", prom.url, "--prometheus-selector", SELECTOR]  # fmt: skip
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            summary = json.loads((out / "summary.json").read_text())
            top = summary["steps"][-1]
            # The same window asked again by another label that tells the replicas apart (the
            # job), and by none (an empty label: the fleet as one server).
            by_job = PrometheusSource(prom.url, ('namespace="tokenload-test"',), replica_label="job")
            jobs = by_job.replicas(top["measure_start"], top["end"])
            fleet_only = PrometheusSource(prom.url, ('namespace="tokenload-test"',), replica_label="")
            assert fleet_only.replicas(top["measure_start"], top["end"]) is None
        finally:
            prom.stop()
    assert not (out / "server_metrics.jsonl").exists(), "the replicas must not be scraped directly"
    heavy, light = (f"instance={n}" for n in netlocs)
    assert set(top["server_replicas"]) == {heavy, light}
    mine = top["server_replicas"]
    assert mine[heavy]["kv_cache_usage_ratio"]["max"] >= 0.9
    assert mine[light]["kv_cache_usage_ratio"]["max"] < 0.9
    # Three requests in four went to the first replica: its share of the fleet's tokens.
    tokens = {k: v["generation_tokens"]["increase"] for k, v in mine.items()}
    assert tokens[heavy] > 1.5 * tokens[light], tokens
    fleet = top["server"]["generation_tokens"]["increase"]
    assert tokens[heavy] + tokens[light] == pytest.approx(fleet, rel=1e-6)
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

"""The Grafana dashboard (k8s/grafana) asks a real Prometheus only valid PromQL, and the tokenload
series it draws are the ones tokenload's /metrics exports."""

from __future__ import annotations

import json
import re
import urllib.parse
from types import SimpleNamespace

from tests.k8s.manifests import K8S
from tests.prometheus.conftest import SimUnderPrometheus, get_json
from tokenload.loadgen.exporter import Exporter
from tokenload.loadgen.fleet import Fleet
from tokenload.loadgen.phases import StepTracker
from tokenload.metrics.aggregate import LLMStats

DASHBOARD = K8S / "grafana" / "tokenload-dashboard.json"


def _exprs() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]


def test_every_dashboard_query_is_valid_promql(sim_under_prometheus: SimUnderPrometheus) -> None:
    for expr in _exprs():
        concrete = expr.replace("$__rate_interval", "1m").replace("$model_name", ".*")
        query = urllib.parse.urlencode({"query": concrete})
        status, body = get_json(f"{sim_under_prometheus.prometheus.url}/api/v1/query?{query}")
        assert status == 200 and body["status"] == "success", (expr, body)


def _exported(rate: float | None) -> set[str]:
    ctx = SimpleNamespace(
        stats=LLMStats(),
        steps=StepTracker(),
        environment=SimpleNamespace(runner=None),
        run_dir=None,
        fleet=Fleet(),
    )
    ctx.steps.begin(0, None if rate else 4, rate, 0.0)
    text = Exporter(ctx, SimpleNamespace(cpu_percent=0.0, loop_lag_s=0.0)).text().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}


def test_the_dashboard_draws_series_tokenload_exports() -> None:
    exported = _exported(None) | _exported(2.0)  # a concurrency step and a rate step
    used = {name for expr in _exprs() for name in re.findall(r"\btokenload_\w+", expr)}
    assert used and used <= exported, sorted(used - exported)
    assert {f"tokenload_{f}_seconds_bucket" for f in ("ttft", "tpot", "itl", "e2e")} <= used

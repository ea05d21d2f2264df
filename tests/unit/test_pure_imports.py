"""The pure modules (parsing, metric maths, diagnosis, capacity, comparison, reports' text) import
with pandas, pyarrow, Locust, gevent and prometheus_client made unimportable (issue #20)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PURE = [
    "tokenload.analysis.diagnosis",
    "tokenload.analysis.headroom",
    "tokenload.analysis.run_rules",
    "tokenload.analysis.signals",
    "tokenload.analysis.stepmodel",
    "tokenload.analysis.slo_search",
    "tokenload.analysis.judge",
    "tokenload.analysis.thresholds",
    "tokenload.analysis.oversaturation",
    "tokenload.metrics.aggregate",
    "tokenload.metrics.definitions",
    "tokenload.metrics.failures",
    "tokenload.metrics.histogram",
    "tokenload.metrics.intervals",
    "tokenload.metrics.records",
    "tokenload.loadgen.fleet",
    "tokenload.loadgen.phases",
    "tokenload.loadgen.steps",
    "tokenload.loadgen.step_plan",
    "tokenload.web.live_source",
    "tokenload.report.capacity",
    "tokenload.report.charts",
    "tokenload.report.compare_math",
    "tokenload.report.compare_text",
    "tokenload.report.draws",
    "tokenload.report.html",
    "tokenload.report.markdown",
    "tokenload.report.model",
    "tokenload.report.noise",
    "tokenload.report.search_text",
    "tokenload.report.svg",
    "tokenload.report.tables",
    "tokenload.report.trace_text",
    "tokenload.report.workload_text",
    "tokenload.results.run_inputs",
    "tokenload.results.summary",
    "tokenload.servermetrics.parse",
    "tokenload.servermetrics.promql",
    "tokenload.servermetrics.promql_answers",
    "tokenload.servermetrics.summary",
    "tokenload.servermetrics.vocabulary",
    "tokenload.servermetrics.window",
    "tokenload.sim.costmodel",
    "tokenload.sim.draws",
    "tokenload.sim.metric_catalog",
    "tokenload.workload.lengths",
    "tokenload.workload.trace",
    "tokenload.workload.trace_prompts",
]

_PROBE = """
import importlib, importlib.abc, sys
HEAVY = {"pandas", "pyarrow", "locust", "gevent", "geventhttpclient", "prometheus_client"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError("heavy import: " + name)
sys.meta_path.insert(0, Block())
bad = []
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except ImportError as exc:
        bad.append(m + ": " + str(exc))
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_pure_modules_import_without_heavy_packages() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *PURE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_probe_can_fail() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "tokenload.report.frames"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "heavy import: pandas" in out.stdout

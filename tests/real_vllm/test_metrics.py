"""The real ``/metrics`` page: the golden file the emulator is held to matches it (names, types,
HELP, labels, buckets), and the scraper finds every quantity of tokenload's vocabulary on it."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.real_vllm.server import MODEL_NAME, VllmServer, post_json
from tokenload.servermetrics.parse import parse_page
from tokenload.servermetrics.vocabulary import CANONICAL

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).resolve().parents[1] / "goldens" / "vllm-0.32-cpu-metrics.txt"


def _page(server: VllmServer) -> str:
    # One streamed request first, so the HTTP and per-request histograms carry samples.
    body = {"model": MODEL_NAME, "prompt": "the school", "max_tokens": 4, "stream": True, "ignore_eos": True}
    post_json(server.url, "/v1/completions", body)
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        return r.read().decode()


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _shape(family: object) -> dict[str, object]:
    """What a golden pins: type, HELP, label names (vLLM's and the HTTP instrumentator's
    families) and histogram bucket bounds; never values."""
    samples = family.samples  # type: ignore[attr-defined]
    name: str = family.name  # type: ignore[attr-defined]
    bounds: list[str] = []
    for s in samples:
        if s.name.endswith("_bucket") and s.labels["le"] not in bounds:
            bounds.append(s.labels["le"])
    labels = sorted({k for s in samples for k in s.labels if k not in ("le", "quantile")})
    return {
        "type": family.type,  # type: ignore[attr-defined]
        "help": family.documentation,  # type: ignore[attr-defined]
        "labels": labels if name.startswith(("vllm:", "http_")) else None,
        "buckets": bounds,
    }


def test_the_golden_matches_the_real_page(roomy: VllmServer) -> None:
    real = _families(_page(roomy))
    golden = _families(GOLDEN.read_text())
    assert sorted(set(golden) - set(real)) == [], "golden families the real server does not export"
    assert sorted(set(real) - set(golden)) == [], "real families missing from the golden"
    differ = {
        name: {"golden": _shape(golden[name]), "real": _shape(real[name])}
        for name in golden
        if _shape(golden[name]) != _shape(real[name])
    }
    assert differ == {}


def test_the_scraper_reads_every_quantity_of_the_vocabulary(roomy: VllmServer) -> None:
    values = parse_page(_page(roomy))
    wanted = {q.name for q in CANONICAL.values() if q.vllm_v1}
    found = set(values.scalars) | set(values.histograms)
    assert sorted(wanted - found) == []
    # Same answer as prometheus_client's own parser on the real page.
    assert parse_page(_page(roomy), reference=True).histograms.keys() == values.histograms.keys()
    for name, h in values.histograms.items():
        assert h.count > 0, name
        assert h.buckets[-1][1] == h.count, name  # +Inf holds every observation
    assert values.scalars["generation_tokens"] >= 4
    assert values.scalars["requests_waiting_capacity"] == 0
    # vLLM counts FLOPs and bytes only with --enable-mfu-metrics (the roomy server has it).
    assert values.scalars["estimated_flops"] > 0 and values.scalars["estimated_read_bytes"] > 0

"""The master-side scraper during a real Locust run against the emulator: the scraped series and
the run's server summary track the emulator's own state."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import read_records, run_locust


def test_scraped_series_track_the_engine(start_sim, tmp_path: Path) -> None:
    sim = start_sim(
        "--profile",
        "h100-llama3.1-8b",
        "--num-gpu-blocks",
        "400",
        "--max-num-seqs",
        "12",
        "--max-model-len",
        "4096",
    )
    run = run_locust(
        "locustfiles/completions.py", sim.url, tmp_path / "run", "-u", "16", "-r", "16", "-t", "6s",
        "--prompt-tokens", "1000", "--output-tokens", "150", "--metrics-interval", "0.25",
        "--stop-timeout", "60",
    )  # fmt: skip
    assert run.returncode == 0, run.output[-2000:]
    records = read_records(run.run_dir)
    assert records and all(r["status"] == "ok" for r in records)
    server = json.loads((run.run_dir / "llm_stats.json").read_text())["server"]
    points = [json.loads(x) for x in (run.run_dir / "server_metrics.jsonl").read_text().splitlines()]
    assert len(points) >= 20 and all(p["ok"] for p in points)
    # Gauges: the cache filled up, the batch never exceeded max_num_seqs, requests waited.
    assert server["kv_cache_usage_ratio"]["max"] >= 0.9
    assert 0 < server["requests_running"]["max"] <= 12
    assert server["requests_waiting"]["max"] > 0
    # Counters over the run window equal what the engine did, request by request.
    traces = sim.traces()
    assert server["preemptions"]["increase"] == sum(t["preemptions"] for t in traces) > 0
    assert server["generation_tokens"]["increase"] == sum(t["tokens_sent"] for t in traces)
    assert server["request_success"]["increase"] == len(records)
    # Histograms: the server's queue time and TTFT over the window, in ms.
    assert server["queue_time_ms"]["count"] == len(records)
    assert server["ttft_ms"]["p50"] > 0
    assert server["scrape_failures"] == {sim.url + "/metrics": {}}

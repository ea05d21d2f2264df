"""A profile's frontend_request_s over HTTP: each request reaches the engine that much later,
which the server's TTFT counts and its queue time does not."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from tests.sim_http.conftest import http_json
from tokenload.sim.profile import load_profile


def test_frontend_request_time_delays_every_request(start_sim, tmp_path: Path) -> None:
    base = load_profile("h100-llama3.1-8b")
    slow = tmp_path / "slow-frontend.yaml"
    slow.write_text(
        yaml.safe_dump(base.model_copy(update={"frontend_request_s": 0.3}).model_dump(mode="json"))
    )
    times = {}
    for name, profile in (("plain", "h100-llama3.1-8b"), ("slow", str(slow))):
        sim = start_sim("--profile", profile)
        body = {"prompt": "hello there", "max_tokens": 1}
        http_json(sim.url + "/v1/completions", body)  # the first request pays for imports
        t0 = time.perf_counter()
        status, _ = http_json(sim.url + "/v1/completions", body)
        times[name] = time.perf_counter() - t0
        assert status == 200
        if name == "slow":
            # The server's own figures: its TTFT counts the API server's time, its queue time
            # does not (vLLM's queue clock starts when the engine gets the request).
            ttft = sim.get("vllm:time_to_first_token_seconds_sum")
            queue = sim.get("vllm:request_queue_time_seconds_sum")
            assert sim.get("vllm:request_queue_time_seconds_count") == 2
    # The API server's time delays every request: no request to it ends sooner. (Its gap over
    # the plain server's one request is not checked: a single stall of the plain request, a
    # host's doing, moves it; a clean CI run of 2026-12-02 read 0.3120 - 0.0121 = 0.29994.)
    assert times["slow"] >= 0.3, times
    assert ttft >= 2 * 0.3 and queue < 0.3, (ttft, queue)

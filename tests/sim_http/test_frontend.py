"""A profile's frontend_request_s over HTTP: each request reaches the engine that much later,
which the server's TTFT counts and its queue time does not."""

from __future__ import annotations

import threading
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


def _together(url: str, n: int) -> None:
    """``n`` one-token requests sent at the same moment (threads behind a barrier)."""
    barrier = threading.Barrier(n)
    statuses: list[int] = []

    def one() -> None:
        barrier.wait(timeout=10)
        statuses.append(http_json(url + "/v1/completions", {"prompt": "hi", "max_tokens": 1})[0])

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert statuses == [200] * n


def test_api_server_processes_serve_requests_one_at_a_time(start_sim, tmp_path: Path) -> None:
    # 400 ms of an API process per request (api_request_cpu_s): six requests sent at once reach
    # the engine one at a time through one process, two at a time through two.
    cost = 0.4  # long enough that six threads' requests, sent together, are all in line
    base = load_profile("h100-llama3.1-8b")
    busy = tmp_path / "busy-api.yaml"
    busy.write_text(
        yaml.safe_dump(base.model_copy(update={"api_request_cpu_s": cost}).model_dump(mode="json"))
    )
    for processes in (1, 2):
        sim = start_sim("--profile", str(busy), "--api-server-count", str(processes))
        _together(sim.url, 6)
        traces = sim.traces()
        scheduled = sorted(t["first_scheduled_s"] for t in traces)
        arrived = max(t["arrival_s"] for t in traces) - min(t["arrival_s"] for t in traces)
        assert len(scheduled) == 6 and arrived < cost, arrived  # all six were in line together
        # A process takes the next request only when done with the last: 400 ms apart.
        apart = [b - a for a, b in zip(scheduled, scheduled[processes:], strict=False)]
        assert min(apart) >= cost * 0.98, apart
        span = scheduled[-1] - scheduled[0]
        if processes == 1:
            assert span >= 5 * cost * 0.98, span
        else:  # two at a time: two rounds fewer than one process needs
            assert span < 5 * cost - cost, span
        # The server's TTFT counts that wait from each arrival; the engine's queue time does not.
        assert sim.get("vllm:time_to_first_token_seconds_sum") >= cost * 6
        assert sim.get("vllm:request_queue_time_seconds_sum") < cost


def test_an_idle_engine_starts_a_prefill_when_the_api_server_hands_it_over(start_sim, tmp_path: Path) -> None:
    """One request alone behind an API process busy 200 ms with it: the engine, idle, starts
    its prefill when it gets the request, not when the request reached the server, so the
    request takes the API server's time *plus* the prefill, as in simulated time. (Until
    2026-12-04 the HTTP loop dated an idle engine's step from the arrival: the prefill ran
    under the API server's time, and a 10 ms API cost on a 128-token prompt read 11.4 ms of
    TTFT over HTTP against 18.0 ms in simulated time.)"""
    from tokenload.sim.engine import EngineConfig
    from tokenload.sim.replay import Observation, predict

    # Under the loop's 250 ms catch-up bound (a clock further behind restarts from now).
    cost, prompt = 0.2, 8192
    base = load_profile("h100-llama3.1-8b")
    prefill_s = (
        predict(base, EngineConfig(), Observation("alone", 1, prompt, 1, None, None, None)).ttft_ms_p50 / 1e3
    )
    assert prefill_s > 0.2  # long enough to tell the two apart on a busy host
    busy = tmp_path / "busy-api.yaml"
    busy.write_text(
        yaml.safe_dump(base.model_copy(update={"api_request_cpu_s": cost}).model_dump(mode="json"))
    )
    sim = start_sim("--profile", str(busy))
    body = {"prompt": [100] * prompt, "max_tokens": 1, "ignore_eos": True}
    http_json(sim.url + "/v1/completions", body)  # the first request pays for imports
    t0 = time.perf_counter()
    status, _ = http_json(sim.url + "/v1/completions", body)
    took = time.perf_counter() - t0
    assert status == 200
    # A host's stalls only lengthen it; the old dating gave about max(cost, prefill).
    assert took >= (cost + prefill_s) * 0.97, (took, cost, prefill_s)


def test_an_api_server_on_the_engines_core_stalls_the_engine_over_http(start_sim, tmp_path: Path) -> None:
    """api_shares_engine_cpu over HTTP, as in simulated time: a request that reaches the server
    while the engine decodes another takes its API time twice over (half the core), and the
    decoding request's steps lose that CPU time."""
    from tokenload.sim.engine import EngineConfig
    from tokenload.sim.replay import Observation, predict

    cost, output = 0.3, 120
    base = load_profile("h100-llama3.1-8b")
    alone = predict(base, EngineConfig(), Observation("alone", 1, 16, output, None, None, None))
    alone_s = (alone.ttft_ms_p50 + (output - 1) * alone.tpot_ms_p50) / 1e3
    assert alone_s > 2 * cost  # the second request arrives and is read while the first decodes
    shared = tmp_path / "shared-core.yaml"
    update = {"api_request_cpu_s": cost, "api_shares_engine_cpu": True}
    shared.write_text(yaml.safe_dump(base.model_copy(update=update).model_dump(mode="json")))
    sim = start_sim("--profile", str(shared))
    body = {"prompt": [100] * 16, "max_tokens": output, "ignore_eos": True}
    http_json(sim.url + "/v1/completions", body)  # the first request pays for imports
    took: dict[str, float] = {}

    def send(name: str, req: dict) -> None:
        t0 = time.perf_counter()
        assert http_json(sim.url + "/v1/completions", req)[0] == 200
        took[name] = time.perf_counter() - t0

    first = threading.Thread(target=send, args=("long", body))
    first.start()
    time.sleep(cost + 0.05)  # past the first request's own API time, with the engine decoding
    send("short", {"prompt": [100] * 16, "max_tokens": 1})
    first.join(timeout=30)
    # A host's stalls only lengthen both; without the shared core the long request takes about
    # its own time (plus a step or two batched with the short one) and the short one its cost.
    assert took["short"] >= 2 * cost * 0.97, took
    assert took["long"] >= cost + alone_s + cost * 0.97, (took, alone_s)

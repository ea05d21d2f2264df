"""The API server in front of the emulated engine as CPU that requests queue for
(tokenload/sim/apiserver.py): its queue, and what it does to the engine in simulated time."""

from __future__ import annotations

import pytest

from tokenload.sim.apiserver import APIServer
from tokenload.sim.engine import EngineConfig
from tokenload.sim.profile import load_profile
from tokenload.sim.virtual_sweep import VirtualSchedule, VirtualWorkload, virtual_sweep

pytestmark = pytest.mark.simulated_time


def test_each_process_serves_its_requests_one_at_a_time_in_arrival_order() -> None:
    one = APIServer(1, request_s=0.010)
    assert [one.admit(0.0, 100) for _ in range(3)] == pytest.approx([0.010, 0.020, 0.030])
    assert one.admit(1.0, 100) == pytest.approx(1.010)  # idle again: no wait
    two = APIServer(2, request_s=0.010, prompt_token_s=1e-5)  # 10 ms + 1,000 tokens x 10 us
    assert [two.admit(0.0, 1000) for _ in range(4)] == pytest.approx([0.02, 0.02, 0.04, 0.04])
    assert two.capacity_rps(1000) == pytest.approx(100.0)
    free = APIServer(4)
    assert not free.active and free.admit(2.5, 10_000) == 2.5 and free.capacity_rps(1) == float("inf")
    with pytest.raises(ValueError, match="api_server_count"):
        APIServer(0)


def _sweep(processes: int, levels: tuple[int, ...] = (16, 32, 64)) -> list[dict]:
    profile = load_profile("h100-llama3.1-8b").model_copy(update={"api_request_cpu_s": 0.02})
    workload = VirtualWorkload("lognormal:mean=128,sigma=0.6", "lognormal:mean=32,sigma=0.6", seed=4)
    schedule = VirtualSchedule(concurrency=levels, step_duration_s=20.0, warmup=0.25)
    return virtual_sweep(profile, EngineConfig(api_server_count=processes), workload, schedule).steps


def test_a_busy_api_server_caps_requests_before_the_engine_sees_them() -> None:
    # 20 ms of one process per request: 50 requests/s at most, however many users; the engine,
    # which serves far more of these short requests, holds a small batch and queues nothing.
    one, two = _sweep(1), _sweep(2)
    for s in one[1:]:
        assert s["requests_per_s"] == pytest.approx(50.0, rel=0.05), s["requests_per_s"]
        assert s["server"]["requests_waiting"]["max"] == 0
        # The server's TTFT counts the API server's queue, its queue time does not (vLLM's).
        assert s["server"]["ttft_ms"]["mean"] > 10 * s["server"]["queue_time_ms"]["mean"]
    # Four times the users, about the same batch (Little: 50/s x the engine's time per
    # request, 10-13 here): the extra users wait in front of the engine.
    running = [s["server"]["requests_running"]["mean"] for s in one]
    assert running[2] < 1.5 * running[0] and running[2] < 0.3 * 64, running
    # Twice the processes: twice the capacity, reached once 64 users offer it.
    assert two[-1]["requests_per_s"] == pytest.approx(100.0, rel=0.05), two[-1]["requests_per_s"]

"""The API server in front of the emulated engine as CPU that requests queue for
(tokenload/sim/apiserver.py): its queue, and what it does to the engine in simulated time."""

from __future__ import annotations

import pytest

from tokenload.sim.apiserver import APIServer
from tokenload.sim.engine import EngineConfig, SimEngine
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


def test_an_api_server_on_the_engines_core_takes_turns_with_it() -> None:
    shared = APIServer(1, request_s=0.010, shares_engine_cpu=True)
    # The engine idle: the request's CPU time is all the API server's, nothing is owed.
    assert shared.admit(0.0, 100, engine_busy=False) == pytest.approx(0.010)
    assert shared.take_engine_cpu_s() == 0.0
    # The engine busy: each gets half the core, so 10 ms of work takes 20 and the engine loses 10.
    assert shared.admit(1.0, 100, engine_busy=True) == pytest.approx(1.020)
    assert shared.admit(1.0, 100, engine_busy=True) == pytest.approx(1.040)  # behind the first
    assert shared.take_engine_cpu_s() == pytest.approx(0.020)
    assert shared.take_engine_cpu_s() == 0.0  # taken once
    # On its own cores the API server owes the engine nothing, busy or not.
    own = APIServer(1, request_s=0.010)
    assert own.admit(0.0, 100, engine_busy=True) == pytest.approx(0.010)
    assert own.take_engine_cpu_s() == 0.0


class _Engine:
    """What :meth:`APIServer.admit_to` uses of an engine."""

    def __init__(self, has_work: bool) -> None:
        self.has_work = has_work
        self.stalls: list[float] = []

    def add_stall(self, seconds: float) -> None:
        self.stalls.append(seconds)


def test_the_api_server_in_front_of_an_engine_hands_it_the_cpu_time_it_took() -> None:
    profile = load_profile("h100-llama3.1-8b").model_copy(
        update={"api_request_cpu_s": 0.010, "api_prompt_token_cpu_s": 1e-5, "api_shares_engine_cpu": True}
    )
    api = APIServer.for_engine(SimEngine(profile, EngineConfig(api_server_count=3)))
    assert (api.count, api.request_s, api.prompt_token_s, api.shares_engine_cpu) == (3, 0.010, 1e-5, True)
    idle, busy = _Engine(False), _Engine(True)
    assert api.admit_to(idle, 0.0, 1000) == pytest.approx(0.020) and idle.stalls == [0.0]
    # Busy: twice as long, and the engine is owed the request's CPU time at once.
    assert api.admit_to(busy, 0.0, 1000) == pytest.approx(0.040) and busy.stalls == [pytest.approx(0.020)]
    assert api.take_engine_cpu_s() == 0.0


def test_the_fixed_frontend_latency_comes_after_the_api_servers_queue_and_queues_nothing() -> None:
    profile = load_profile("h100-llama3.1-8b").model_copy(
        update={"api_request_cpu_s": 0.010, "frontend_request_s": 0.005}
    )
    api = APIServer.for_engine(SimEngine(profile, EngineConfig()))
    assert api.fixed_s == 0.005
    idle = _Engine(False)
    # One process, 10 ms a request: the second waits for the first; each then has 5 ms more,
    # in parallel (a latency, not a server the requests queue for).
    assert [api.admit_to(idle, 0.0, 100) for _ in range(2)] == pytest.approx([0.015, 0.025])
    fixed_only = APIServer(1, fixed_s=0.005)
    assert [fixed_only.admit_to(idle, 1.0, 100) for _ in range(3)] == pytest.approx([1.005] * 3)
    with pytest.raises(ValueError, match="must not be negative"):
        APIServer(1, fixed_s=-0.001)


def _shared_sweep(shares: bool, levels: tuple[int, ...]) -> list[dict]:
    profile = load_profile("h100-llama3.1-8b").model_copy(
        update={"api_request_cpu_s": 0.002, "api_prompt_token_cpu_s": 2e-5, "api_shares_engine_cpu": shares}
    )
    workload = VirtualWorkload("lognormal:mean=512,sigma=0.6", "lognormal:mean=32,sigma=0.6", seed=4)
    schedule = VirtualSchedule(concurrency=levels, step_duration_s=20.0, warmup=0.25)
    return virtual_sweep(profile, EngineConfig(), workload, schedule).steps


def test_an_api_server_sharing_the_engines_core_slows_its_steps_as_the_request_rate_grows() -> None:
    # 2 ms + 20 us a prompt token (about 12 ms a request here) on the engine's core. At one
    # user the engine is idle while its next request is read: the same run either way. Under
    # load the engine's steps carry the API server's CPU time: TPOT grows by about the share of
    # the core that requests/s x CPU a request takes (the steps' own time is what is left).
    own, shared = _shared_sweep(False, (1, 32)), _shared_sweep(True, (1, 32))
    assert shared[0]["tpot_ms"]["p50"] == pytest.approx(own[0]["tpot_ms"]["p50"], rel=1e-6)
    assert shared[0]["ttft_ms"]["p50"] == pytest.approx(own[0]["ttft_ms"]["p50"], rel=1e-6)
    load = shared[1]["requests_per_s"] * (
        0.002 + 2e-5 * shared[1]["input_tokens_per_s"] / shared[1]["requests_per_s"]
    )
    slower = shared[1]["tpot_ms"]["mean"] / own[1]["tpot_ms"]["mean"]
    assert 0.1 < load < 0.9, load  # the workload loads the core enough to tell
    assert slower == pytest.approx(1 / (1 - load), rel=0.25), (slower, load)
    assert shared[1]["output_tokens_per_s"] < own[1]["output_tokens_per_s"]

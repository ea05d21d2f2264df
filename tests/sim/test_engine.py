"""Engine behaviour: request lifecycle, prefix caching, V0 vs V1 scheduling, timestamps."""

from __future__ import annotations

import pytest

from tokenload.sim.engine import EngineConfig, OutputLenConfig, SimEngine
from tokenload.sim.profile import list_profiles
from tokenload.sim.tokenizer import EOS_TOKEN_ID, decode
from tokenload.sim.virtual import RequestSpec, run_arrivals, run_closed_loop

pytestmark = pytest.mark.simulated_time


def run_to_end(engine: SimEngine, now_s: float = 0.0) -> tuple[dict[str, list], float]:
    outputs: dict[str, list] = {}
    while engine.has_work:
        plan = engine.schedule(now_s)
        assert plan is not None
        now_s += plan.duration_s
        for out in engine.complete(plan, now_s):
            outputs.setdefault(out.request_id, []).append(out)
    return outputs, now_s


def test_request_outputs_carry_tokens_text_and_a_final_timeline() -> None:
    engine = SimEngine(config=EngineConfig(preset="v0"))
    engine.add_request("a", [1, 2, 3], max_tokens=5, ignore_eos=True, arrival_time_s=0.0)
    outputs, _ = run_to_end(engine)
    outs = outputs["a"]
    assert [o.num_output_tokens for o in outs] == [1, 2, 3, 4, 5]
    assert [o.finished for o in outs] == [False] * 4 + [True]
    assert outs[-1].finish_reason == "length" and outs[-1].times is not None
    assert all(o.num_prompt_tokens == 3 and o.num_cached_tokens == 0 for o in outs)
    ids = [t for o in outs for t in o.new_token_ids]
    assert "".join(o.new_text for o in outs) == decode(ids)
    times = outs[-1].times
    assert times.queue_time_s == 0.0
    assert times.ttft_s == pytest.approx(times.prefill_time_s)
    assert times.e2e_s == pytest.approx(times.ttft_s + times.decode_time_s)
    assert not engine.has_work


def test_eos_ends_a_request_with_stop_and_respects_min_tokens() -> None:
    config = EngineConfig(output_len=OutputLenConfig(distribution="fixed", mean_tokens=4))
    engine = SimEngine(config=config)
    engine.add_request("short", [5] * 10, max_tokens=100, arrival_time_s=0.0)
    engine.add_request("min", [5] * 10, max_tokens=100, min_tokens=9, arrival_time_s=0.0)
    engine.add_request("capped", [5] * 10, max_tokens=3, arrival_time_s=0.0)
    outputs, _ = run_to_end(engine)
    short, at_least, capped = outputs["short"], outputs["min"], outputs["capped"]
    assert len(short) == 4 and short[-1].finish_reason == "stop"
    assert short[-1].new_token_ids == [EOS_TOKEN_ID] and short[-1].new_text == ""
    assert len(at_least) == 10 and at_least[-1].finish_reason == "stop"  # 9 tokens, then EOS
    assert len(capped) == 3 and capped[-1].finish_reason == "length"


def test_output_lengths_follow_the_configured_distribution_and_seed() -> None:
    def lengths(seed: int) -> list[int]:
        config = EngineConfig(seed=seed, output_len=OutputLenConfig(distribution="lognormal", mean_tokens=50))
        engine = SimEngine(config=config)
        for i in range(200):
            engine.add_request(f"r{i}", [1] * 8, max_tokens=10_000, arrival_time_s=0.0)
        outputs, _ = run_to_end(engine)
        return [len(outputs[f"r{i}"]) for i in range(200)]

    first = lengths(1)
    assert first == lengths(1)
    assert first != lengths(2)
    assert 35 < sum(first) / len(first) < 65
    assert len(set(first)) > 20


def test_generation_stops_at_max_model_len() -> None:
    engine = SimEngine(config=EngineConfig(max_model_len=100))
    engine.add_request("a", [1] * 90, max_tokens=1000, ignore_eos=True, arrival_time_s=0.0)
    outputs, _ = run_to_end(engine)
    assert len(outputs["a"]) == 10 and outputs["a"][-1].finish_reason == "length"


def test_add_request_validation() -> None:
    engine = SimEngine(config=EngineConfig(max_model_len=100))
    assert engine.max_model_len == 100
    with pytest.raises(ValueError, match="max_model_len"):
        engine.add_request("a", [1] * 100, max_tokens=1, arrival_time_s=0.0)
    with pytest.raises(ValueError, match="empty"):
        engine.add_request("a", [], max_tokens=1, arrival_time_s=0.0)
    engine.add_request("a", [1], max_tokens=1, arrival_time_s=0.0)
    with pytest.raises(ValueError, match="already"):
        engine.add_request("a", [1], max_tokens=1, arrival_time_s=0.0)


def test_engine_refuses_a_cache_smaller_than_max_model_len() -> None:
    with pytest.raises(ValueError, match="larger than the KV cache can hold"):
        SimEngine(config=EngineConfig(num_gpu_blocks=10, max_model_len=1000))


def test_abort_waiting_running_and_in_flight_requests() -> None:
    engine = SimEngine(config=EngineConfig(max_num_seqs=1))
    engine.add_request("run", [1] * 10, max_tokens=50, ignore_eos=True, arrival_time_s=0.0)
    engine.add_request("wait", [1] * 10, max_tokens=50, ignore_eos=True, arrival_time_s=0.0)
    plan = engine.schedule(0.0)
    assert plan is not None and plan.request_ids == ["run"]
    assert engine.current_waiting_cause == "max_num_seqs"
    assert engine.abort("wait") and engine.num_waiting == 0
    assert engine.abort("run")  # while its step is in flight
    assert engine.kv_cache_usage_ratio == 0.0
    assert engine.complete(plan, plan.duration_s) == []
    assert not engine.has_work and not engine.abort("run")
    assert engine.counters.num_aborted == 2


def test_schedule_and_complete_must_alternate() -> None:
    engine = SimEngine()
    assert engine.schedule(0.0) is None
    engine.add_request("a", [1], max_tokens=2, arrival_time_s=0.0)
    plan = engine.schedule(0.0)
    assert plan is not None
    with pytest.raises(RuntimeError):
        engine.schedule(0.0)
    engine.complete(plan, plan.duration_s)
    with pytest.raises(RuntimeError):
        engine.complete(plan, plan.duration_s)


def test_prefix_caching_hits_shared_prefixes_in_full_blocks() -> None:
    system = [(3 * k) % 256 for k in range(500)]  # 31 full blocks + 4 tokens

    def spec(client: int, i: int) -> RequestSpec:
        return RequestSpec([*system, client, i, 7, 7], max_tokens=8)

    for enabled in (True, False):
        engine = SimEngine(config=EngineConfig(enable_prefix_caching=enabled))
        run = run_closed_loop(engine, 1, 5, spec)
        cached = [r.num_cached_tokens for r in run.requests]
        if enabled:
            assert cached == [0, 496, 496, 496, 496]
            assert engine.kv.hit_tokens == 4 * 496
            assert engine.kv.query_tokens == 5 * 504
            # A cache hit skips most of the prefill.
            assert run.requests[1].ttft_s < 0.7 * run.requests[0].ttft_s
        else:
            assert cached == [0] * 5
            assert engine.kv.hit_tokens == 0


def test_identical_prompt_never_hits_its_last_token() -> None:
    prompt = [9] * 64  # exactly 4 blocks
    engine = SimEngine(config=EngineConfig(enable_prefix_caching=True))
    run = run_closed_loop(engine, 1, 2, lambda c, i: RequestSpec(prompt, max_tokens=2))
    assert [r.num_cached_tokens for r in run.requests] == [0, 48]  # vLLM recomputes at least one token


def _decode_stall(preset: str) -> tuple[float, int]:
    """A stream decoding when an 8k-token prompt arrives: its longest gap, and how many tokens it
    got while the long prompt was being prefilled."""
    engine = SimEngine(config=EngineConfig(preset=preset))
    long_prompt = [(5 * k) % 256 for k in range(8000)]
    run = run_arrivals(
        engine,
        [(0.0, RequestSpec([1] * 100, max_tokens=200)), (0.5, RequestSpec(long_prompt, max_tokens=10))],
    )
    stream, long = run.requests
    first_long_token = long.token_times_s[0]
    during = sum(1 for t in stream.token_times_s if long.arrival_s < t < first_long_token)
    return max(stream.itls_s), during


def test_chunked_prefill_keeps_decodes_going_during_a_long_prefill() -> None:
    v0_gap_s, v0_tokens_during = _decode_stall("v0")
    v1_gap_s, v1_tokens_during = _decode_stall("v1")
    # V0 runs the 8k prefill as one step and no decode in it: the stream stalls for the whole prefill.
    assert v0_gap_s > 1.5
    assert v0_tokens_during <= 1  # only the decode step already running when the prompt arrived
    # V1 splits it into 2048-token chunks and decodes the stream in every one of those steps.
    assert v1_tokens_during >= 3
    assert v1_gap_s < 0.5 * v0_gap_s


def test_token_budget_is_a_waiting_cause_under_chunked_prefill() -> None:
    engine = SimEngine(config=EngineConfig(max_num_batched_tokens=512))
    for i in range(4):
        engine.add_request(f"r{i}", [i] * 600, max_tokens=4, arrival_time_s=0.0)
    plan = engine.schedule(0.0)
    assert plan is not None and plan.num_prefill_tokens == 512
    assert engine.current_waiting_cause == "token_budget"
    engine.complete(plan, plan.duration_s)
    engine.add_request("late", [1] * 10, max_tokens=4, arrival_time_s=plan.duration_s)
    assert engine.current_waiting_cause == "token_budget"  # behind the same queue head


@pytest.mark.parametrize("preset", ["v1", "v0"])
def test_a_request_that_arrives_mid_step_waits_for_it_in_ttft_and_in_v0s_queue_time(preset: str) -> None:
    """V1's engine core stamps a request QUEUED when it takes it in, between steps (vLLM
    v1/core/sched/scheduler.py add_request): the rest of the running step is in its TTFT, not
    in its queue time. V0 counts queue time from the request's arrival."""
    engine = SimEngine(config=EngineConfig(preset=preset))
    engine.add_request("running", [1] * 64, max_tokens=8, ignore_eos=True, arrival_time_s=0.0)
    plan = engine.schedule(0.0)
    assert plan is not None and plan.duration_s > 0
    arrived_s = plan.duration_s / 3  # a third of the way through the first step
    engine.add_request("late", [2] * 64, max_tokens=8, ignore_eos=True, arrival_time_s=arrived_s)
    engine.complete(plan, plan.duration_s)
    outputs, _ = run_to_end(engine, plan.duration_s)
    times = outputs["late"][-1].times
    assert times.first_scheduled_s == pytest.approx(plan.duration_s)  # the next step
    assert times.ttft_s == pytest.approx(plan.duration_s - arrived_s + times.prefill_time_s)
    assert times.queue_time_s == pytest.approx(0.0 if preset == "v1" else plan.duration_s - arrived_s)


def test_queue_time_counts_until_first_scheduled() -> None:
    engine = SimEngine(config=EngineConfig(preset="v0", max_num_seqs=1))
    run = run_closed_loop(engine, 2, 1, lambda c, i: RequestSpec([c] * 50, max_tokens=10))
    first, second = sorted(run.requests, key=lambda r: r.times.first_scheduled_s)  # type: ignore[union-attr]
    assert first.times.queue_time_s == 0.0  # type: ignore[union-attr]
    assert second.times.queue_time_s == pytest.approx(first.e2e_s)  # type: ignore[union-attr]
    assert second.ttft_s == pytest.approx(second.times.queue_time_s + second.times.prefill_time_s)  # type: ignore[union-attr]


@pytest.mark.parametrize("profile", list_profiles())
def test_every_shipped_profile_serves_requests(profile: str) -> None:
    engine = SimEngine(profile)
    assert engine.num_gpu_blocks * engine.config.block_size >= engine.max_model_len
    run = run_closed_loop(engine, 4, 2, lambda c, i: RequestSpec([c] * 1000, max_tokens=32))
    assert all(r.num_output_tokens == 32 for r in run.requests)
    # Plausible single-GPU numbers: TTFT under a second for 1k tokens, TPOT between 3 and 100 ms.
    assert all(0 < r.ttft_s < 1.0 and 0.003 < r.tpot_s < 0.1 for r in run.requests)

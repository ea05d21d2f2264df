"""find_knee's rule on noisy steps, and the frontend verdict, on synthetic steps."""

from __future__ import annotations

import pytest

from tokenload.analysis.diagnosis import diagnose_steps, find_knee

pytestmark = pytest.mark.simulated_time


def _v(name: str) -> dict:
    return {"bottleneck": name}


@pytest.mark.parametrize(
    ("verdicts", "knee", "last_good"),
    [
        (["none", "compute", "none", "compute"], 8, 4),  # 2 was one noisy step: 4 scaled again
        (["none", "none", "compute", "compute"], 4, 2),
        (["none", "none", "none", "compute"], 8, 4),  # the top step has nothing above to contradict it
        (["none", "compute", "client", "kv_capacity"], 2, 1),  # client-bound steps say nothing
    ],
)
def test_the_knee_is_the_first_saturated_step_the_next_load_confirms(verdicts, knee, last_good) -> None:
    steps = [{"concurrency": c} for c in (1, 2, 4, 8)]
    k = find_knee(steps, [_v(v) for v in verdicts])
    assert k is not None and (k["concurrency"], k["last_unsaturated_concurrency"]) == (knee, last_good)


def _step(conc: int, out_tps: float, ttft: float, running: float, server_ttft: float) -> dict:
    return {
        "index": 0,
        "concurrency": conc,
        "measured_s": 10.0,
        "requests": {"ok": 100, "failed": 0, "by_failure_class": {}},
        "requests_per_s": 10.0,
        "output_tokens_per_s": out_tps,
        "ttft_ms": {"p50": ttft},
        "tpot_ms": {"p50": 20.0},
        "flags": [],
        "server": {
            "requests_waiting": {"mean": 0.0},
            "requests_running": {"mean": running, "max": running + 2},
            "kv_cache_usage_ratio": {"mean": 0.05, "max": 0.06},
            "ttft_ms": {"mean": server_ttft},
            "queue_time_ms": {"mean": 0.1},
            "prefill_time_ms": {"mean": 10.0},
            "decode_time_ms": {"mean": 500.0},
        },
    }


def test_time_before_the_engine_queue_is_the_frontend() -> None:
    # 64 users, the engine runs ~35 and nothing waits; 85 of the server's 95 ms TTFT pass before
    # its queue (what the real vLLM CPU server showed, tests/real_vllm).
    steps = [_step(8, 400.0, 30.0, 8.0, 22.0), _step(64, 600.0, 300.0, 35.0, 95.0)]
    verdicts = diagnose_steps(steps)
    assert verdicts[1]["bottleneck"] == "frontend"
    (outside,) = [
        e for e in verdicts[1]["evidence"] if e["metric"] == "outside queue, prefill and one engine step"
    ]
    # No server ITL here: the step is the client's TPOT p50 (20 ms), (95 - 0.1 - 10 - 20) / 95.
    assert outside["value"] == pytest.approx(0.683, abs=0.001) and "TPOT p50" in outside["rule"]
    # The same step with the server's TTFT spent in prefill is not the frontend (and, with no
    # step times to model, no resource is named).
    steps[1]["server"]["prefill_time_ms"]["mean"] = 80.0
    assert diagnose_steps(steps)[1]["bottleneck"] == "unknown"

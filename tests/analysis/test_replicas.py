"""Per-replica verdicts and the fleet's imbalance (tokenload.analysis.replicas), on hand-built
steps: pure and fast. The over-HTTP case is tests/sweep/test_replicas.py."""

from __future__ import annotations

import pytest

from tests.analysis.test_diagnosis import step
from tokenload.analysis.judge import judge_steps
from tokenload.analysis.replicas import replica_steps

pytestmark = pytest.mark.simulated_time


def _fleet(users: int, tput: float, a: dict, b: dict, **fleet) -> dict:
    """A fleet's step and its two replicas' own figures; ``tok`` is a replica's output tokens/s
    (its generation counter)."""
    s = step(users, tput, **fleet)
    s["server_replicas"] = {}
    for url, own in (("http://a/metrics", a), ("http://b/metrics", b)):
        srv = step(users, tput, **own)["server"]
        srv["generation_tokens"] = {"rate_per_s": own.get("tok", tput / 2)}
        s["server_replicas"][url] = srv
    return s


def test_one_replica_full_while_the_other_has_room_is_an_imbalance() -> None:
    steps = [
        _fleet(4, 100, {"run": 3, "kv": 0.3, "tok": 75}, {"run": 1, "kv": 0.1, "tok": 25}, run=4, kv=0.2),
        # The first replica's throughput barely grew; the second's tripled with its users.
        _fleet(16, 150, {"run": 8, "kv": 0.9, "kv_max": 1.0, "wait": 5, "preempt": 12, "tok": 75},
               {"run": 3, "kv": 0.3, "tok": 75}, run=11, kv=0.6, kv_max=1.0, wait=5, preempt=12),
    ]  # fmt: skip
    judged, knee = judge_steps(steps)
    top = judged[1]["verdict"]
    assert top["bottleneck"] == "imbalance", top["evidence"]
    assert top["imbalance"] == {
        "saturated": {"http://a/metrics": "kv_capacity"},
        "with_room": ["http://b/metrics"],
    }
    assert top["decided_by"] == "replica http://a/metrics"
    assert any("router" in a for a in top["advice"]) and any("KV cache" in a for a in top["advice"])
    assert judged[0]["verdict"]["replicas"]["http://b/metrics"]["bottleneck"] == "none"
    assert knee is not None and knee["bottleneck"] == "imbalance"
    # A replica that came or went mid-step has a part of the window: no imbalance called there.
    steps[1]["flags"] = ["replicas_changed"]
    assert judge_steps(steps)[0][1]["verdict"]["bottleneck"] == "kv_capacity"


def test_a_closed_loops_users_split_as_the_replicas_hold_requests() -> None:
    steps = [_fleet(16, 150, {"run": 8, "wait": 4}, {"run": 4}, run=12, wait=4)]
    a, b = (replica_steps(steps, u)[0] for u in ("http://a/metrics", "http://b/metrics"))
    assert (a["concurrency"], b["concurrency"]) == (12, 4)
    assert a["server"]["requests_waiting"]["mean"] == 4 and "server_replicas" not in a


def test_an_open_loops_rate_splits_as_the_replicas_took_in_prompts() -> None:
    # Three prompt tokens in four went to the first replica: it saw three quarters of the
    # arrivals, which sizes the noise of its own throughput (the arrivals-noise rule).
    steps = [_fleet(16, 150, {"run": 8}, {"run": 4}, run=12)]
    steps[0]["target_rate_rps"] = 8.0
    for url, tokens in (("http://a/metrics", 3000.0), ("http://b/metrics", 1000.0)):
        steps[0]["server_replicas"][url]["prompt_tokens"] = {"increase": tokens}
    a, b = (replica_steps(steps, u)[0] for u in ("http://a/metrics", "http://b/metrics"))
    assert (a["target_rate_rps"], b["target_rate_rps"]) == (6.0, 2.0)
    assert a["concurrency"] == b["concurrency"] == steps[0]["concurrency"]


def test_one_replica_or_replicas_alike_keep_the_fleets_verdict() -> None:
    steps = [step(4, 100), step(16, 150, kv=0.9, kv_max=1.0, wait=5, preempt=12)]
    assert judge_steps(steps)[0][1]["verdict"]["bottleneck"] == "kv_capacity"
    both_full = {"run": 6, "kv": 0.9, "kv_max": 1.0, "wait": 3, "preempt": 6}
    steps = [
        _fleet(4, 100, {"run": 2, "kv": 0.2}, {"run": 2, "kv": 0.2}, run=4, kv=0.2),
        _fleet(16, 150, both_full, both_full, run=12, kv=0.9, kv_max=1.0, wait=6, preempt=12),
    ]
    top = judge_steps(steps)[0][1]["verdict"]
    assert top["bottleneck"] == "kv_capacity" and "imbalance" not in top
    assert {r["bottleneck"] for r in top["replicas"].values()} == {"kv_capacity"}


def test_a_first_steps_absence_of_signs_is_not_room() -> None:
    # One step only: the second replica's "none" says nothing showed yet, not that it has room.
    full = {"run": 8, "kv": 0.9, "kv_max": 1.0, "wait": 5, "preempt": 12}
    steps = [_fleet(16, 150, full, {"run": 3, "kv": 0.3}, run=11, kv=0.6, kv_max=1.0, wait=5, preempt=12)]
    top = judge_steps(steps)[0][0]["verdict"]
    assert top["replicas"]["http://b/metrics"]["bottleneck"] == "none"
    assert top["bottleneck"] != "imbalance" and "imbalance" not in top


def test_replica_windows_are_keyed_without_credentials() -> None:
    from types import SimpleNamespace

    from tokenload.results.summary import replica_windows

    def point(t: float, target: str, running: float) -> SimpleNamespace:
        scalars = {"requests_running": running}
        return SimpleNamespace(t=t, target=target, ok=True, scalars=scalars, histograms={})

    a, b = "http://user:secret@10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics"
    pts = [point(t, u, r) for t in (1.0, 2.0, 3.0) for u, r in ((a, 4.0), (b, 2.0))]
    windows = replica_windows(pts, 1.0, 3.0)
    assert set(windows) == {"http://***@10.0.0.1:8000/metrics", b}
    assert windows[b]["requests_running"]["mean"] == 2.0
    assert replica_windows([p for p in pts if p.target == b], 1.0, 3.0) is None  # one replica


def test_a_replica_with_a_small_share_still_has_a_step_below() -> None:
    # Walkthrough (weighted:9,1 behind Prometheus): the light replica held ~0.4 of 4 users and
    # ~1.3 of 16; both rounded to 1 user, so its top step had "no step below" and no measured
    # room, and the fleet's verdict was the summed series' kv_capacity (KV max 0.53 quoted).
    steps = [
        _fleet(4, 100, {"run": 3.6, "kv": 0.3, "tok": 90}, {"run": 0.4, "kv": 0.02, "tok": 10},
               run=4, kv=0.16),
        _fleet(16, 130, {"run": 8, "kv": 0.95, "kv_max": 1.0, "wait": 6.7, "preempt": 12, "tok": 95},
               {"run": 1.3, "kv": 0.06, "tok": 35}, run=9.3, wait=6.7, kv=0.5, kv_max=1.0, preempt=12),
    ]  # fmt: skip
    b = replica_steps(steps, "http://b/metrics")
    assert b[0]["concurrency"] < b[1]["concurrency"]
    top = judge_steps(steps)[0][1]["verdict"]
    assert top["bottleneck"] == "imbalance", top["evidence"]
    assert top["imbalance"]["with_room"] == ["http://b/metrics"]


def test_a_cache_bound_by_preemptions_is_not_quoted_as_full() -> None:
    # Walkthrough: "kv_cache_usage_ratio max = 0.532 (full for admission (>= 0.9 ...))", a
    # fleet's average over a full replica and an empty one quoted against its own rule.
    from tokenload.analysis.diagnosis import diagnose_steps

    steps = [step(4, 100, run=4, kv=0.16), step(16, 130, run=9.3, wait=6.7, kv=0.5, kv_max=0.53, preempt=12)]
    v = diagnose_steps(steps)[1]
    kv = [e for e in v["evidence"] if e["metric"] == "kv_cache_usage_ratio max"]
    assert all(("full for admission" not in e["rule"]) for e in kv if e["value"] < 0.9), v["evidence"]
    assert v["bottleneck"] == "kv_capacity" and kv and "yet requests were preempted" in kv[0]["rule"]

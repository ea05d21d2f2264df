"""A fleet's steps judged replica by replica, and an imbalance named as such. Pure.

With several replicas scraped (``--metrics-url`` once per replica), each step keeps every
replica's own server figures (``server_replicas``: url -> the same fields as ``server``). Each
replica's series is judged by the same rules as the fleet's (tokenload.analysis.diagnosis), with
the replica's share of a closed loop's users: its requests in the system (running + waiting,
means over the step) over the fleet's, since in a closed loop every user's request is at some
replica. An open loop's rate is split by each replica's share of the prompt tokens taken in (a
router's split is a share of every rate, so the load grows by about the same factor at each
replica; the arrivals a replica saw size the noise of its own throughput). A
``--server-max-num-seqs`` given for the fleet (the replicas' sum) is split evenly.

The fleet's verdict is ``imbalance`` when at least one replica is saturated (a resource named)
while at least one other is not (``none``, measured: not a first step's absence of signs): the
router sends the saturated ones more than they serve while the others have room, whatever the
summed series say (not on a step flagged ``replicas_changed``: a replica that came or went has
a part of the window). It names the replicas and what saturated each; every step with replicas
carries ``verdict["replicas"]`` (url -> bottleneck, saturated, decided_by).
"""

from __future__ import annotations

import copy
from typing import Any

from tokenload.analysis.advice import ADVICE
from tokenload.analysis.signals import FIRST_STEP_SIGNAL, NOISE_SIGNAL
from tokenload.analysis.thresholds import Thresholds

__all__ = ["judge_replicas", "replica_steps"]

#: Replica verdicts that name a saturated resource (an imbalance needs one of these).
_RESOURCES = ("compute", "memory_bandwidth", "kv_capacity", "scheduler_limit", "frontend")


def _in_system(server: dict[str, Any] | None) -> float:
    s = server or {}
    return ((s.get("requests_running") or {}).get("mean") or 0.0) + (
        (s.get("requests_waiting") or {}).get("mean") or 0.0
    )


def _prompted(server: dict[str, Any] | None) -> float:
    """Prompt tokens a replica took in over the step (0 when it did not say)."""
    return ((server or {}).get("prompt_tokens") or {}).get("increase") or 0.0


def replica_steps(steps: list[dict[str, Any]], url: str) -> list[dict[str, Any]]:
    """The steps as one replica saw them: its own server figures and its share of the load: of
    a closed loop's users (module doc), of an open loop's arrival rate (its share of the prompt
    tokens). Steps without that replica's figures keep none."""
    out = []
    for step in steps:
        own = (step.get("server_replicas") or {}).get(url)
        mine = copy.copy(step)
        mine["server"] = own
        mine.pop("server_replicas", None)
        mine.pop("verdict", None)
        if own is not None and step.get("target_rate_rps") is None and step.get("concurrency"):
            total = sum(_in_system(s) for s in step["server_replicas"].values())
            share = _in_system(own) / total if total else 1.0 / len(step["server_replicas"])
            # Not rounded: a light replica's 0.4 and 1.3 users would both read 1, and its top
            # step would have no step below (no room measured) however its load grew.
            mine["concurrency"] = max(0.01, round(step["concurrency"] * share, 2))
        elif own is not None and step.get("target_rate_rps"):
            # An open loop: the replica's own arrival rate, its share of the prompt tokens the
            # fleet took in (a prompt is counted as it is admitted, about when it arrived).
            total = sum(_prompted(s) for s in step["server_replicas"].values())
            share = _prompted(own) / total if total else 1.0 / len(step["server_replicas"])
            mine["target_rate_rps"] = step["target_rate_rps"] * share
        out.append(mine)
    return out


def judge_replicas(
    steps: list[dict[str, Any]],
    thresholds: Thresholds | None = None,
    peaks: dict[str, float] | None = None,
    max_num_seqs: int | None = None,
) -> None:
    """Give each judged step with several replicas' figures ``verdict["replicas"]``, and the
    fleet's verdict ``imbalance`` where some replicas saturated while others had room."""
    from tokenload.analysis.diagnosis import diagnose_steps

    urls = sorted({u for s in steps for u in (s.get("server_replicas") or {})})
    if len(urls) < 2:
        return
    cap = max(1, max_num_seqs // len(urls)) if max_num_seqs else None
    per = {u: diagnose_steps(replica_steps(steps, u), thresholds, peaks, max_num_seqs=cap) for u in urls}
    for i, step in enumerate(steps):
        here = [u for u in urls if u in (step.get("server_replicas") or {})]
        if len(here) < 2 or "verdict" not in step:
            continue
        mine = {u: per[u][i] for u in here}
        fleet = step["verdict"]
        fleet["replicas"] = {
            u: {"bottleneck": v["bottleneck"], "saturated": v["saturated"], "decided_by": v["decided_by"]}
            for u, v in mine.items()
        }
        hot = [u for u in here if mine[u]["bottleneck"] in _RESOURCES]
        # Room measured, not assumed: a first step's "none" says only that nothing showed yet,
        # and a step's within its arrivals' noise says no more.
        room = [
            u
            for u in here
            if mine[u]["bottleneck"] == "none"
            and mine[u]["decided_by"] not in (FIRST_STEP_SIGNAL, NOISE_SIGNAL)
        ]
        if not hot or not room or fleet["bottleneck"] in ("client", "errors", "unknown"):
            continue
        if "replicas_changed" in (step.get("flags") or []):
            continue  # a replica came or went mid-step: its window is part of one; no call
        evidence = [
            {
                "metric": f"replica {u}",
                "value": mine[u]["bottleneck"],
                "rule": f"saturated: decided by {mine[u]['decided_by']}",
            }
            for u in hot
        ] + [{"metric": f"replica {u}", "value": "none", "rule": "not saturated: has room"} for u in room]
        evidence.append(
            {
                "metric": "fleet verdict from the summed figures",
                "value": fleet["bottleneck"],
                "rule": "the replicas' series summed (ratios averaged) hide which replica ran out",
            }
        )
        advice = list(ADVICE["imbalance"])
        for label in dict.fromkeys(mine[u]["bottleneck"] for u in hot):
            advice.append(f"On the saturated replicas ({label}): " + ADVICE[label][0])
        step["verdict"] = {
            "bottleneck": "imbalance",
            "saturated": True,
            "decided_by": evidence[0]["metric"],
            "evidence": evidence,
            "advice": advice,
            "secondary": None,
            "replicas": fleet["replicas"],
            "imbalance": {"saturated": {u: mine[u]["bottleneck"] for u in hot}, "with_room": room},
        }

"""The knee of a series of judged steps: where saturation starts, and what ran out there. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenload.analysis.signals import load_of

__all__ = ["by_load", "find_knee", "judged_as_server"]


def by_load(steps: list[dict[str, Any]]) -> list[int]:
    """Step positions in order of load; a stable sort keeps equal loads in run order."""
    return sorted(range(len(steps)), key=lambda i: load_of(steps[i]))


def judged_as_server(verdict: Mapping[str, Any] | None) -> bool:
    """Whether a step's verdict judges the server: not when the client could not keep up
    (``client``, a lost worker included), nor when it was left ``unknown`` without being found
    saturated (it says nothing either way). Only these steps bracket a knee. A step with no
    verdict recorded counts as judged: nothing says it was not."""
    if not verdict:
        return True
    name = verdict.get("bottleneck")
    return name != "client" and not (name == "unknown" and not verdict.get("saturated"))


def find_knee(steps: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The saturation point: the lowest-load saturated step whose next higher load is saturated
    too (one noisy step that the next load contradicts is not the knee), the highest-load
    unsaturated step below it, and what ran out."""
    last_good = None
    # Steps not judged as the server's (the client could not keep up, a worker was lost) are skipped.
    order = [i for i in by_load(steps) if judged_as_server(verdicts[i])]
    for pos, i in enumerate(order):
        v = verdicts[i]
        nxt = verdicts[order[pos + 1]]["bottleneck"] if pos + 1 < len(order) else None
        if v["bottleneck"] == "none":
            last_good = steps[i]
        elif nxt is None or nxt != "none":
            return {
                "step": i,
                "concurrency": steps[i].get("concurrency"),
                "target_rate_rps": steps[i].get("target_rate_rps"),
                "bottleneck": v["bottleneck"],
                # Its saturation was a close call (Thresholds.saturation_margin).
                "close_call": bool(v.get("close_call")),
                "last_unsaturated_concurrency": last_good.get("concurrency") if last_good else None,
                "last_unsaturated_rate_rps": last_good.get("target_rate_rps") if last_good else None,
                "output_tokens_per_s_at_knee": steps[i].get("output_tokens_per_s"),
            }
    return None

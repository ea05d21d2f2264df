"""The one function that turns steps into judged steps: every step gets its verdict, the run its
knee. ``summary.json``, the reports, the live page and the virtual sweep all call it, so they
cannot disagree."""

from __future__ import annotations

from typing import Any

from tokenload.analysis.diagnosis import diagnose_steps
from tokenload.analysis.knee import find_knee
from tokenload.analysis.replicas import judge_replicas
from tokenload.analysis.thresholds import Thresholds

__all__ = ["judge_steps"]


def judge_steps(
    steps: list[dict[str, Any]],
    thresholds: Thresholds | None = None,
    peaks: dict[str, float] | None = None,
    max_num_seqs: int | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Set ``step["verdict"]`` on each of ``steps`` (in place) and return them with the knee.
    ``peaks`` are the GPU's datasheet peaks and ``max_num_seqs`` the engine's cap on running
    requests, each only when the user gave it (``--gpu-peaks``, ``--server-max-num-seqs``)."""
    verdicts = diagnose_steps(steps, thresholds=thresholds, peaks=peaks, max_num_seqs=max_num_seqs)
    for step, verdict in zip(steps, verdicts, strict=True):
        step["verdict"] = verdict
    # Several replicas scraped: each replica's verdict, and an imbalance named as such.
    judge_replicas(steps, thresholds, peaks, max_num_seqs)
    return steps, find_knee(steps, [s["verdict"] for s in steps])

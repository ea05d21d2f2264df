"""What a searching load shape found and why the run ended, in sentences: summary.json's
``search`` (a knee search's bracket, an SLO search's answer, a stop rule that ended a staircase
early). The console, report.md and report.html print the same lines. Pure, no I/O."""

from __future__ import annotations

from typing import Any

from tokenload.report.tables import users

__all__ = ["search_lines"]


def search_lines(summary: dict[str, Any]) -> list[str]:
    """Sentences about the run's search and stop, empty when it had neither."""
    search = summary.get("search") or {}
    lines: list[str] = []
    if search.get("shape") == "knee":
        lo, hi = search.get("last_unsaturated_concurrency"), search.get("first_saturated_concurrency")
        where = (
            f"between {lo} and {users(hi)}"
            if lo is not None and hi is not None
            else f"saturated from {users(hi)}"
            if hi is not None
            else f"not saturated up to {users(lo)}"
            if lo is not None
            else "no bracket"
        )
        # The search steers by each step's verdict as it ends; the summary judges the complete
        # steps again (every request of the step, the steps beside it), and may differ.
        again = (
            "; judged again on the complete steps, no step is saturated (the step table)"
            if hi is not None and not summary.get("knee")
            else ""
        )
        probes = search.get("probes") or []
        n = len(probes)
        lines.append(f"knee search: {search.get('outcome')}, {where} ({n} step{'s' * (n != 1)}){again}")
        drifting = [
            str(p.get("concurrency"))
            for p in probes
            if isinstance(p, dict) and "drifting" in (p.get("flags") or [])
        ]
        if drifting:
            lines.append(
                f"the search steered by step(s) still drifting when judged ({', '.join(drifting)} users; "
                "flagged drifting): their verdicts depend on how long they ran, so the bracket may move "
                "with a longer --probe-duration or --step-duration"
            )
    if search.get("shape") == "slo":
        cap, hi = search.get("slo_capacity_rps"), (search.get("bracket") or [None, None])[1]
        top = f"; the lowest rate above it that did not: {hi:g} req/s" if hi is not None else ""
        found = f"{cap:g} req/s meets the SLO{top}" if cap is not None else "no probed rate met the SLO"
        n = len(search.get("probes") or [])
        lines.append(f"slo search: {search.get('outcome')}; {found} ({n} probe{'s' * (n != 1)})")
    if search.get("stop_reason"):
        lines.append(f"stopped: {search['stop_reason']}")
    return lines

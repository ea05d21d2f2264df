"""A plan's draws in words and a table (``tokenload plan --draws``, kept in a plan directory's
summary.json as ``draws``): per step each figure's least-most over the draws and the count of each
verdict, the knee's count, and the capacity and replicas' least-most. Shared by plan's text, the
Markdown report and the HTML report. Pure."""

from __future__ import annotations

from typing import Any

from tokenload.report.tables import load_label
from tokenload.sim.draws import range_text

__all__ = ["draws_heading", "draws_lines", "draws_table"]


def draws_heading(spread: dict[str, Any]) -> str:
    seeds = spread["seeds"]
    return (
        f"Over {spread['count']} draws (seeds {seeds[0]}-{seeds[-1]}: other lengths, arrivals and "
        "turnarounds), what a sweep of these steps could measure, least-most:"
    )


def draws_table(spread: dict[str, Any], steps: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per step: its load, each figure's least-most and the verdicts' counts."""
    header = ["step", "load", "out tok/s", "TTFT p50", "TTFT p95", "TPOT p50", "verdicts"]
    rows = [
        [
            str(d["index"]),
            load_label(s),
            range_text(d["output_tokens_per_s"]),
            range_text(d["ttft_ms_p50"]),
            range_text(d["ttft_ms_p95"]),
            range_text(d["tpot_ms_p50"], 2),
            ", ".join(f"{k} {v}" for k, v in sorted(d["bottleneck"].items(), key=lambda kv: -kv[1])),
        ]
        for d, s in zip(spread["steps"], steps, strict=True)
    ]
    return header, rows


def draws_lines(spread: dict[str, Any]) -> list[str]:
    """The knee's count over the draws, and (when plan judged capacity) the capacity and the
    replicas over the draws, with the count that carries the target in every draw."""
    n = spread["count"]
    knees = "; ".join(
        f"{'none' if k == 'none' else 'step ' + k} in {v} of {n} draws"
        for k, v in spread["knee_step"].items()
    )
    lines = [f"Knee over the draws: {knees}."]
    cap = spread.get("capacity")
    if cap is None:
        return lines
    n = cap["count"]
    # Judged when plan ran, by its own options (prediction.report_args), not this report's.
    judged = " ".join(cap.get("judged_with") or []) or "plan's options"
    if cap["load"] is None:
        lines.append(f"Capacity over the draws ({judged}): none in any of the {n} draws.")
        return lines
    unit = cap["load_unit"] or "(load)"
    missing = f"; in {cap['no_capacity']} of {n} draws none" if cap["no_capacity"] else ""
    lines.append(
        f"Capacity per replica over the draws ({judged}): {range_text(cap['load'], None)} {unit}, serving "
        f"{range_text(cap['requests_per_s'], 2)} req/s{missing}."
    )
    reps = cap.get("replicas")
    if reps is not None:
        if cap["no_replicas"]:
            lines.append(
                f"Replicas over the draws: {range_text(reps, None)} where one could be planned; in "
                f"{cap['no_replicas']} of {n} draws no capacity to plan with, so no replica count "
                "covers every draw at these loads."
            )
        else:
            lines.append(
                f"Replicas over the draws: {range_text(reps, None)}; {reps[2]:g} carry the target in "
                "every draw (the figures given without a range are the --seed draw's)."
            )
    return lines

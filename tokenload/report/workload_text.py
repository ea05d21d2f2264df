"""What the workload planners did to the lengths they drew, in sentences: summary.json's
``workload_fit``. A draw that did not fit was drawn again, so the lengths sent are the asked
distribution cut where the server (or the shared prefix) stops it; said wherever it happened.
And, apart (:func:`one_length_line`: not a load other than the one asked for), a closed loop
whose requests all asked for one output length: its users keep the places they started in, so
its TTFT depends on how they lined up (bench/RESULTS.md, "One output length: users that keep
their places"); said with the spec that would draw the lengths.
The console, report.md and report.html print the same lines. Pure, no I/O."""

from __future__ import annotations

from typing import Any

__all__ = ["fit_lines", "one_length_line"]


def _share(n: int, of: int) -> str:
    return f"{n:,}" + (f" ({100 * n / of:.1f} %)" if of else "")


def one_length_line(summary: dict[str, Any]) -> str | None:
    """The sentence for a run with closed-loop steps of more than one user whose requests all
    asked for one output length (no workload file, no natural stop), else None."""
    from tokenload.workload.errors import WorkloadError
    from tokenload.workload.lengths import parse_length_spec

    config = summary.get("config") or {}
    closed = any(
        (s.get("concurrency") or 0) > 1 and s.get("target_rate_rps") is None
        for s in summary.get("steps") or []
    )
    if not closed or config.get("workload_file") or config.get("natural_stop"):
        return None
    try:
        out = parse_length_spec(config.get("output_tokens", ""), "output_tokens")
    except WorkloadError:
        return None
    if out.least() != out.most():
        return None
    n = out.least()
    return (
        f"One output length: every request asked for {n} tokens out, so a closed loop's users keep "
        "the order and spacing they had when each step started, and its TTFT percentiles depend on how "
        "they lined up (on real vLLM, two runs of a step were up to 43 % apart in TTFT p50, 0-8 % with "
        f"drawn lengths: tokenload's bench/RESULTS.md). To compare runs, draw them: --output-tokens "
        f"lognormal:mean={n},sigma=0.5."
    )


def fit_lines(summary: dict[str, Any]) -> list[str]:
    """A sentence per way the lengths sent differ from the workload's draws; empty when none."""
    d = summary.get("workload_fit") or {}
    planned = int(d.get("planned") or 0)
    limit = d.get("max_model_len")
    over = f"the server's max_model_len of {limit}" if limit is not None else "the server's max_model_len"
    lines = []
    if redrawn := int(d.get("redrawn_lengths") or 0):
        lines.append(
            f"Lengths drawn again: {_share(redrawn, planned + redrawn)} of the workload's (input, output) "
            f"draws did not fit (prompt + output over {over}, or a prompt no longer than the shared "
            "prefix) and were drawn again: the lengths sent are the asked distribution cut there, with "
            "less of its tail."
        )
    if clamped := int(d.get("clamped_output") or 0):
        lines.append(
            f"Outputs cut: {_share(clamped, planned)} dataset requests asked for fewer output tokens than "
            f"drawn, so that prompt + output fit {over}."
        )
    long_, empty = int(d.get("dataset_skipped_too_long") or 0), int(d.get("dataset_skipped_empty") or 0)
    if long_ or empty:
        why = []
        if long_:
            why.append(f"{long_:,} too long for {over} (with room for an output)")
        if empty:
            why.append(f"{empty:,} empty")
        lines.append(f"Dataset items left out: {' and '.join(why)} (the run sent the others).")
    return lines

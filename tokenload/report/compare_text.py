"""``tokenload compare``'s Markdown: per matched step, each metric's change, its noise interval,
the run-to-run interval and the flag (tokenload.report.compare_math judges; this says it). Pure."""

from __future__ import annotations

from tokenload.report.compare_math import Comparison
from tokenload.report.noise import run_to_run_sentence

__all__ = ["render_markdown"]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.1f}"


def render_markdown(c: Comparison) -> str:
    """The comparison as markdown: per step, each metric's change, its noise interval and flag."""
    out = [f"# tokenload compare: A = {c.run_a}, B = {c.run_b}", ""]
    out.append(
        f"Change = B / A - 1. Noise: {100 * c.confidence:g} % interval of the change (bootstrap of "
        f"per-request samples for latencies, seed {c.seed}, widened where a run's requests move "
        "together; completion counts for rates). "
        + run_to_run_sentence(c.baseline_runs + 1)
        + f"A regression is worse by more than {100 * c.tolerance:g} % and beyond noise "
        "(the rule: tokenload/report/compare_math.py)."
    )
    out.append("")
    for name, label in (("A", c.prediction_a), ("B", c.prediction_b)):
        if label:
            out += [f"{name} is a prediction, not a measurement ({label}).", ""]
    if c.config_diff:
        out.append(
            "Configurations differ: "
            + "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in c.config_diff.items())
        )
        out.append("")
    for s in c.steps:
        verdict = f"{s.verdict_a} -> {s.verdict_b}" if s.verdict_changed else f"{s.verdict_a} (unchanged)"
        out += [f"## {s.label} (step {s.index_a} in A, {s.index_b} in B): verdict {verdict}", ""]
        out += [f"Note: {n}." for n in s.notes] + ([""] if s.notes else [])
        out.append(
            "| metric | A | B | change | noise interval of the change | per-request P90-P10 (wider run) "
            "| run-to-run (A's runs, metric's unit) | samples A/B | flag |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|")
        for m in s.changes:
            iv = "-" if m.interval is None else f"{_pct(m.interval[0])} .. {_pct(m.interval[1])}"
            rr = "-" if m.run_to_run is None else f"{_num(m.run_to_run[0])} .. {_num(m.run_to_run[1])}"
            out.append(
                f"| {m.metric} | {_num(m.a)} | {_num(m.b)} | {_pct(m.change)} | {iv} | {_num(m.spread)} | "
                f"{rr} | {m.samples[0]}/{m.samples[1]} | {m.flag} |"
            )
        out.append("")
    if c.only_a:
        out += [f"Only in A: {', '.join(c.only_a)}", ""]
    if c.only_b:
        out += [f"Only in B: {', '.join(c.only_b)}", ""]
    if not c.steps:
        out += ["No step of A matches a step of B by load: nothing was compared.", ""]
        return "\n".join(out)
    regs = c.regressions
    if regs:
        out.append(f"**{len(regs)} regression(s)** beyond {100 * c.tolerance:g} % and noise:")
        out += [f"- {label}: {m.metric} {_pct(m.change)}" for label, m in regs]
    else:
        out.append(f"No regression beyond {100 * c.tolerance:g} % and noise.")
    out.append("")
    return "\n".join(out)

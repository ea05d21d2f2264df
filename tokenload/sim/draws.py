"""How far a predicted sweep's figures move with the draw: the same plan run again with other
seeds (other prompt lengths and contents, other Poisson arrivals), per step the least, median and
most of each figure, and how many draws gave each verdict and each knee. Pure.

A real sweep is one draw too: an open-loop step of a few seconds at a few requests a second sees
a few dozen arrivals, and its TTFT p50 moves by a factor of two from one run to the next. The
spread of the plan's draws is what a real sweep with those steps could measure, so a single
predicted figure is never read as more exact than the run it predicts.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FIGURES", "Spread", "capacity_spread", "draw_spread", "range_text"]

#: The figures whose spread is reported: name -> how to read it from a step of summary.json.
FIGURES: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "output_tokens_per_s": lambda s: s.get("output_tokens_per_s"),
    "requests_per_s": lambda s: s.get("requests_per_s"),
    "ttft_ms_p50": lambda s: (s.get("ttft_ms") or {}).get("p50"),
    "ttft_ms_p95": lambda s: (s.get("ttft_ms") or {}).get("p95"),
    "tpot_ms_p50": lambda s: (s.get("tpot_ms") or {}).get("p50"),
    "tpot_ms_p95": lambda s: (s.get("tpot_ms") or {}).get("p95"),
}

#: (least, median, most) over the draws that have the figure; None when none has it.
Spread = tuple[float, float, float] | None


def _spread(values: Sequence[float | None]) -> Spread:
    seen = [float(v) for v in values if v is not None]
    return (min(seen), statistics.median(seen), max(seen)) if seen else None


def draw_spread(
    draws: Sequence[tuple[int, Sequence[dict[str, Any]], dict[str, Any] | None]],
) -> dict[str, Any]:
    """Per step, each figure's (least, median, most) over the draws and the count of each verdict;
    and the count of each knee step (None: no knee). ``draws``: (seed, judged steps, knee) per
    draw, all of the same load steps."""
    n_steps = {len(steps) for _, steps, _ in draws}
    if len(n_steps) != 1:
        raise ValueError(f"draws of different sweeps: {sorted(n_steps)} steps")
    per_step = []
    for k in range(n_steps.pop()):
        steps = [steps[k] for _, steps, _ in draws]
        per_step.append(
            {
                "index": steps[0].get("index"),
                **{name: _spread([read(s) for s in steps]) for name, read in FIGURES.items()},
                "bottleneck": dict(Counter(str((s.get("verdict") or {}).get("bottleneck")) for s in steps)),
            }
        )
    knees = Counter(None if knee is None else knee.get("step") for _, _, knee in draws)
    return {
        "count": len(draws),
        "seeds": [seed for seed, _, _ in draws],
        "steps": per_step,
        "knee_step": {("none" if k is None else str(k)): c for k, c in knees.items()},
    }


def capacity_spread(
    per_draw: Sequence[tuple[dict[str, Any] | None, dict[str, Any] | None]],
) -> dict[str, Any]:
    """The capacity and replicas over the draws: per draw its ``slo_capacity`` and ``replicas``
    (``tokenload plan --json``'s forms, None where that draw had none); each figure's (least,
    median, most) over the draws that have it, and how many had no capacity (no step met the SLO,
    or the first step was saturated) or no replica count. The most replicas is what carries the
    target in every draw."""
    caps = [c for c, _ in per_draw if c is not None]
    reps = [r["replicas"] for _, r in per_draw if r is not None and "replicas" in r]
    units = {c["load_unit"] for c in caps}
    return {
        "count": len(per_draw),
        "load": _spread([c["load"] for c in caps]),
        "load_unit": units.pop() if len(units) == 1 else None,
        "requests_per_s": _spread([c["requests_per_s"] for c in caps]),
        "no_capacity": len(per_draw) - len(caps),
        "replicas": _spread(reps),
        "no_replicas": len(per_draw) - len(reps),
    }


def range_text(spread: Spread | list[float], digits: int | None = 1) -> str:
    """``least-most`` (``digits`` decimals, or ``:g`` when None); one value when both ends read
    the same; ``-`` when no draw had the figure."""
    if spread is None:
        return "-"
    lo, _, hi = spread
    text = (lambda v: f"{v:.{digits}f}") if digits is not None else (lambda v: f"{v:g}")
    return text(lo) if text(lo) == text(hi) else f"{text(lo)}-{text(hi)}"

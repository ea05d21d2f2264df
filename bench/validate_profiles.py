"""The built-in emulator profiles against public vLLM measurements at concurrency > 1 (issue #17):
fitted on some load levels, validated on the others. Prints one JSON object: per point its role
(fit / held_out), the published and predicted figures and their error; per profile and role the
median and worst error.

The points, their sources, the split and the bounds live in ``tokenload/sim/published.py``. The
A40 profile was fitted to a concurrency-1 table (bench/RESULTS.md) and its one concurrency > 1
point is held out. ``--fit`` searches each profile's free parameters
(``published.FIT_PARAMETERS``, within ``tokenload.sim.calibrate``'s physical bounds) on its
fitting points only and prints the values found, with the held-out errors they give: what went
into the profile files. Simulated time, so the figures do not depend on the machine.

    .venv/bin/python bench/validate_profiles.py [--json] [--fit]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenload.sim.calibrate import (
    ALL_PARAMETERS,
    FRONTEND_START,
    from_unit,
    nelder_mead,
    to_unit,
    values_of,
    with_values,
)
from tokenload.sim.profile import Profile, load_profile
from tokenload.sim.published import (
    COMPARED,
    FIT_PARAMETERS,
    POINTS,
    SOURCES,
    Point,
    bound_for,
    errors,
    predict,
)

_BOUNDS = {p.name: p for p in ALL_PARAMETERS}


def _rows(profiles: dict[str, Profile]) -> list[dict[str, Any]]:
    rows = []
    for p in POINTS:
        pred = predict(p, profiles.get(p.profile))
        for metric, err in errors(p, pred).items():
            rows.append(
                {
                    "source": p.source,
                    "profile": p.profile,
                    "role": p.role,
                    "load": f"{p.load} {p.level:g}",
                    "metric": metric,
                    "published": round(p.published[metric], 2),
                    "predicted": round(pred[metric], 2),
                    "error": round(err, 3),
                    "bound": bound_for(metric) if p.role == "held_out" else None,
                }
            )
    return rows


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for prof in sorted({r["profile"] for r in rows}):
        for role in ("fit", "held_out"):
            mine = [r for r in rows if r["profile"] == prof and r["role"] == role]
            for metric in sorted({r["metric"] for r in mine}):
                errs = [abs(r["error"]) for r in mine if r["metric"] == metric]
                entry = {
                    "points": len(errs),
                    "median_abs_error": round(statistics.median(errs), 3),
                    "worst_abs_error": round(max(errs), 3),
                }
                if role == "held_out":
                    entry["within_bound"] = max(errs) <= bound_for(metric)
                out.setdefault(prof, {}).setdefault(role, {})[metric] = entry
    return out


def fit(profile_name: str) -> dict[str, Any]:
    """Fit ``FIT_PARAMETERS[profile_name]`` on the profile's fitting points: least squares of
    the log ratios predicted / published over every compared metric."""
    base = load_profile(profile_name)
    names = FIT_PARAMETERS[profile_name]
    points: list[Point] = [p for p in POINTS if p.profile == profile_name and p.role == "fit"]
    start = values_of(base)
    # A frontend term at 0 sits on its bound: start where calibrate starts it.
    start.update({n: v for n, v in FRONTEND_START.items() if n in names and start[n] <= 0})
    start = {n: start[n] for n in names}

    def profile_at(u: list[float]) -> Profile:
        return with_values(base, {n: from_unit(_BOUNDS[n], x) for n, x in zip(names, u, strict=True)})

    def loss(u: list[float]) -> float:
        prof = profile_at(u)
        total = 0.0
        for p in points:
            pred = predict(p, prof)
            total += sum(math.log(pred[m] / p.published[m]) ** 2 for m in COMPARED[p.source])
        return total

    u0 = [to_unit(_BOUNDS[n], start[n]) for n in names]
    u, value, evals = nelder_mead(loss, u0, step=0.5, max_evals=80, tol=1e-6)
    fitted = {n: round(from_unit(_BOUNDS[n], x), 4) for n, x in zip(names, u, strict=True)}
    return {"profile": profile_name, "fitted": fitted, "start": start, "loss": value, "evals": evals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="only the JSON object")
    ap.add_argument(
        "--fit", action="store_true", help="fit each profile's free parameters on its fitting points"
    )
    args = ap.parse_args(argv)
    profiles: dict[str, Profile] = {}
    fits = []
    if args.fit:
        for name in FIT_PARAMETERS:
            f = fit(name)
            fits.append(f)
            profiles[name] = with_values(load_profile(name), f["fitted"])
    rows = _rows(profiles)
    out: dict[str, Any] = {
        "sources": SOURCES,
        "assumptions": {p.source: p.assumed for p in POINTS},
        "fits": fits,
        "by_profile": _summary(rows),
        "points": rows,
    }
    if not args.json:
        for r in rows:
            head = f"{r['source']} {r['profile']:<24} {r['role']:<8} {r['load']:<10} {r['metric']:<20}"
            print(
                f"{head} published {r['published']:>9} predicted {r['predicted']:>9} error {r['error']:+.1%}"
            )
    print(json.dumps(out, indent=1 if not args.json else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A sweep's clock at two revisions: the same short staircase against the built-in emulator, run
alternately at ``--base`` and at this tree (``--head``), with no worker and with one. Per
revision and worker count, the medians over ``--repeats`` runs of: the wall time from start to
end, the time from one step's start to the next's, and each step's measured time against the
``--step-duration`` it asked for (what a ``--warmup 0`` step measured). Prints JSON; with
``--write``, bench/RESULTS.md's section too.

    python bench/step_clock.py --base e485413 [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import machine, write_results_section

ROOT = Path(__file__).resolve().parent.parent
STEP_S = 2.0
SWEEP = [
    "--concurrency", "1,2,4", "--step-duration", str(STEP_S), "--warmup", "0",
    "--prompt-tokens", "20", "--output-tokens", "8",
]  # fmt: skip


def run(tree: Path, out: Path, workers: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "tokenload", "sweep", "--out", str(out), "--workers", str(workers), *SWEEP]
    env = {**os.environ, "PYTHONPATH": str(tree)}  # master, workers and emulator import this tree
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: sweep failed ({proc.returncode}): {proc.stderr[-1500:]}")
    steps = json.loads((out / "summary.json").read_text())["steps"]
    gaps = [b["start"] - a["start"] for a, b in itertools.pairwise(steps)]
    return {
        "wall_s": wall,
        "step_to_step_s": statistics.median(gaps),
        "measured_share": statistics.median(s["measured_s"] / STEP_S for s in steps),
    }


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the revision before (a commit)")
    p.add_argument("--head", default=str(ROOT), help="the tree after (default: this one)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write", action="store_true", help="write bench/RESULTS.md's section")
    args = p.parse_args()
    out: dict[str, Any] = {"bench": "step_clock", "base": args.base, "sweep": SWEEP, "results": {}}
    with tempfile.TemporaryDirectory(prefix="step-clock-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
        trees = {"base": base_tree, "head": Path(args.head)}
        rows: dict[str, list[dict[str, float]]] = {}
        try:
            for i in range(args.repeats):  # alternated, so a noisy spell hits both
                for workers in (0, 1):
                    for name, tree in trees.items():
                        run_dir = Path(tmp) / f"{name}-{workers}-{i}"
                        rows.setdefault(f"{name}/workers={workers}", []).append(run(tree, run_dir, workers))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, capture_output=True
            )
    out["results"] = {k: medians(v) for k, v in rows.items()}
    for workers in (0, 1):
        b, h = out["results"][f"base/workers={workers}"], out["results"][f"head/workers={workers}"]
        out[f"wall_ratio_head_to_base_workers={workers}"] = round(h["wall_s"] / b["wall_s"], 3)
    print(json.dumps(out, indent=2))
    if args.write:
        rev = ["git", "rev-parse", "--short", "HEAD"]
        head = subprocess.run(rev, cwd=args.head, capture_output=True, text=True).stdout.strip() or "head"
        lines = [
            "## A sweep's clock (bench/step_clock.py)",
            "",
            f"`python bench/step_clock.py --base {args.base} --repeats {args.repeats} --write` at "
            f"{head}; {machine()}. "
            f"`tokenload sweep {' '.join(SWEEP)}`, medians of {args.repeats} alternated runs.",
            "",
            "| tree | workers | wall s | step start to next s | measured / asked |",
            "|---|---|---|---|---|",
        ]
        for key, r in out["results"].items():
            name, workers = key.split("/workers=")
            label = args.base if name == "base" else head
            lines.append(
                f"| {label} | {workers} | {r['wall_s']} | {r['step_to_step_s']} | {r['measured_share']} |"
            )
        write_results_section("step_clock", "\n".join(lines))


if __name__ == "__main__":
    main()

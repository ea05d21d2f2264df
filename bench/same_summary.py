"""Behaviour unchanged across a refactor (issue #20): run the same seeded sweep against the
built-in emulator at two git revisions and compare their ``summary.json`` in every field that
does not depend on time. Prints JSON; exits 1 when they differ.

Compared exactly: the whole key structure (every nested key path; list items by their keys),
``schema_version``, ``config``, ``formulas``, ``gpu_peaks``, the number of ``workers`` and, per
step, its index, concurrency, target rate and overrides. Not compared: what depends on time,
scheduling or ports (latencies, counts of requests in a window, rates, the verdicts they feed,
timestamps, run ids, worker ids, scrape target URLs).

    python bench/same_summary.py --base 89414a7 [--head WORKTREE] [-- SWEEP ARGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_SWEEP = [
    "--shape", "rate", "--rate", "4,8", "--step-duration", "5", "--warmup", "1",
    "--arrival", "poisson", "--arrival-seed", "7", "--prompt-tokens", "64", "--output-tokens", "16",
    "--workers", "1",
]  # fmt: skip
EXACT = ("schema_version", "config", "formulas", "gpu_peaks")
STEP_EXACT = ("index", "concurrency", "target_rate_rps", "overrides")
#: Keys whose value is a map from data-dependent names (a histogram's buckets, a metric's labels).
OPAQUE = {"config", "formulas", "buckets", "labels", "scrape_failures"}  # the last: by target URL
VARYING_CONFIG = {"run_dir"}


def key_paths(obj: Any, prefix: str = "") -> set[str]:
    """Every nested key path; list items are merged under ``[]``."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            out.add(p)
            if k not in OPAQUE:
                out |= key_paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= key_paths(v, prefix + "[]")
    return out


def run(cwd: Path, out: Path, sweep: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tokenload", "sweep", "--out", str(out), *sweep]
    # Every process of the run (master, workers, emulator) imports tokenload from this tree.
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{cwd}: sweep failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return json.loads((out / "summary.json").read_text())


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    diffs = []
    ka, kb = key_paths(a), key_paths(b)
    diffs += [f"only in base: {k}" for k in sorted(ka - kb)]
    diffs += [f"only in head: {k}" for k in sorted(kb - ka)]
    for k in EXACT:
        va, vb = a.get(k), b.get(k)
        if k == "config":
            va = {x: y for x, y in (va or {}).items() if x not in VARYING_CONFIG}
            vb = {x: y for x, y in (vb or {}).items() if x not in VARYING_CONFIG}
        if va != vb:
            diffs.append(f"{k}: {va!r} != {vb!r}"[:300])
    if len(a["workers"]) != len(b["workers"]):  # ids are Locust's, new each run
        diffs.append(f"workers: {len(a['workers'])} != {len(b['workers'])}")
    if len(a["steps"]) != len(b["steps"]):
        diffs.append(f"steps: {len(a['steps'])} != {len(b['steps'])}")
    for sa, sb in zip(a["steps"], b["steps"], strict=False):
        for k in STEP_EXACT:
            if sa.get(k) != sb.get(k):
                diffs.append(f"steps[{sa.get('index')}].{k}: {sa.get(k)!r} != {sb.get(k)!r}")
    return diffs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the revision before (a commit)")
    p.add_argument("--head", default=str(ROOT), help="the tree after (default: this one)")
    p.add_argument("sweep", nargs="*", help="tokenload sweep arguments (after --)")
    args = p.parse_args()
    sweep = args.sweep or DEFAULT_SWEEP
    with tempfile.TemporaryDirectory(prefix="same-summary-") as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
        try:
            a = run(base_tree, Path(tmp) / "a", sweep)
            b = run(Path(args.head), Path(tmp) / "b", sweep)
        finally:
            remove = ["git", "worktree", "remove", "--force", str(base_tree)]
            subprocess.run(remove, cwd=ROOT, capture_output=True)
    diffs = compare(a, b)
    print(json.dumps({"bench": "same_summary", "base": args.base, "sweep": sweep, "same": not diffs,
                      "differences": diffs, "key_paths": len(key_paths(b))}, indent=2))  # fmt: skip
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()

"""Can the emulator keep up? Token send lateness and emulator CPU at 64, 256 and 1,000 streams.

For each level a fresh ``tokenload sim`` (pinned to one core; H100 / Llama-3.1-8B profile with
room for every stream: max_num_seqs 1024) is loaded by a headless Locust process (pinned to the
other core). The emulator measures, for every token it sends, the delay between the time the
engine's step model says the token exists and the moment its write starts. Prints JSON:
lateness p50/p99 (target: p99 < 2 ms at 256 streams, < 5 ms at 1,000, on one core) and the
emulator's CPU share over a steady window.

Next to each level runs ``bench/send_floor.py`` (``floor``): a bare sender making the same writes
(one per stream at each step's end, the step period the emulator had), measured the same way.
It is the floor of this machine: the kernel's loopback send path and the host's stalls make any
single-core server this late, so the emulator's own cost is its lateness above the floor.

``--compare DIR`` runs the emulator from another checkout's ``tokenload`` package (only the
server: Locust always runs this tree's) next to this one, alternating, level by level, so two
versions are judged under the same machine load; ``--repeat N`` runs every level N times and
reports each run and the medians.

Run: ``.venv/bin/python bench/sim_capacity.py [--quick] [--compare DIR] [--repeat N] [--no-floor]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _harness import (
    CLIENT_CPU,
    CPUS,
    ROOT,
    SERVER_CPU,
    get_json,
    machine,
    rounded,
    start_locust,
    start_target,
    write_results_section,
)


def level(streams: int, seconds: float, tmp: Path, sim_root: Path = ROOT) -> dict:
    # Only the emulator child sees this tree: ``-m`` puts the working directory first on
    # sys.path, so the child starts from inside it.
    saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = str(sim_root)
    os.chdir(sim_root)
    try:
        srv = start_target(
            [
                "-m",
                "tokenload.sim",
                "--port",
                "0",
                "--profile",
                "h100-llama3.1-8b",
                "--max-num-seqs",
                "1024",
                "--max-model-len",
                "4096",
            ]
        )
    finally:
        os.chdir(cwd)
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        proc = start_locust(
            srv.url,
            tmp / f"run{streams}-{time.monotonic_ns()}",
            streams,
            f"{int(seconds + 8)}s",
            "--prompt-tokens",
            "24",
            "--output-tokens",
            "256",
        )
        sim = psutil.Process(srv.proc.pid)
        time.sleep(5.0)  # spawn every user and let the first prefills pass
        stats0 = get_json(srv.url + "/sim/stats?reset=1")  # lateness from here on
        c0, t0 = sim.cpu_times(), time.perf_counter()
        time.sleep(seconds)
        c1, t1 = sim.cpu_times(), time.perf_counter()
        stats = get_json(srv.url + "/sim/stats")
        proc.wait(timeout=300)
    finally:
        srv.stop()
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    late = stats["token_lateness_ms"]
    return {
        "streams": streams,
        "tokens_sent_in_window": late["count"],
        "tokens_per_s": round(late["count"] / (t1 - t0)),
        "running_at_end_of_window": stats["running"],
        "token_lateness_ms": {
            "p50": rounded(late["p50"]),
            "p99": rounded(late["p99"]),
            "max": rounded(late["max"]),
        },
        "emulator_cpu_share": round(cpu / (t1 - t0), 3),
        "engine_steps": stats["steps"],
        "step_ms": rounded((t1 - t0) * 1000.0 / max(1, stats["steps"] - stats0["steps"])),
        # Real time over modelled step time (a --compare tree may predate the figure).
        "model_pace": rounded((t1 - t0) / (stats["model_s"] - stats0["model_s"]))
        if "model_s" in stats and stats["model_s"] > stats0["model_s"]
        else None,
    }


def floor(streams: int, seconds: float, step_ms: float) -> dict:
    """``bench/send_floor.py`` at this level: bare sends, same streams and step period."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/send_floor.py"), "--streams", str(streams),
         "--seconds", str(seconds), "--step-ms", str(step_ms)],
        capture_output=True, text=True, timeout=seconds + 120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


_FIELDS = (
    ("token_lateness_ms", "p50"),
    ("token_lateness_ms", "p99"),
    ("token_lateness_ms", "max"),
    ("emulator_cpu_share",),
    ("tokens_sent_in_window",),
    ("tokens_per_s",),
    ("step_ms",),
    ("model_pace",),
    ("floor", "lateness_ms", "p50"),
    ("floor", "lateness_ms", "p99"),
    ("floor", "lateness_ms", "max"),
)


def medians(runs: list[dict]) -> dict:
    """The median of every figure over the runs, in the runs' own shape."""

    def get(run: dict, path: tuple[str, ...]) -> float | None:
        for key in path:
            if not isinstance(run, dict) or key not in run:
                return None
            run = run[key]
        return run  # type: ignore[return-value]

    out: dict = {"streams": runs[0]["streams"], "runs": len(runs)}
    for path in _FIELDS:
        vals = [v for v in (get(r, path) for r in runs) if v is not None]
        if not vals:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = rounded(statistics.median(vals))
    return out


def results_markdown(result: dict, argv: str) -> str:
    """bench/RESULTS.md's "Emulator capacity" section, against issue #3's targets."""
    rows = []
    for key, who in (("levels", "this tree"), ("compare_levels", "compare")):
        each = result.get(key + "_runs") or [[r] for r in result.get(key, [])]
        for r, runs in zip(result.get(key, []), each, strict=True):
            late, fl = r["token_lateness_ms"], r.get("floor", {}).get("lateness_ms", {})
            pace = r.get("model_pace")
            per_run = " / ".join(str(x["token_lateness_ms"]["p99"]) for x in runs)
            floor_runs = " / ".join(str(x["floor"]["lateness_ms"]["p99"]) for x in runs if "floor" in x)
            rows.append(
                f"| {who} | {r['streams']:,} | {late['p50']} / {late['p99']} | {per_run} | "
                + (f"{fl['p50']} / {fl['p99']} | {floor_runs}" if fl else " |")
                + f" | {r.get('step_ms')} | {'' if pace is None else pace} | "
                f"{r['emulator_cpu_share']} | {round(r['tokens_per_s']):,} |"
            )
    return (
        "## Emulator capacity (issue #3)\n\n"
        f"`.venv/bin/python bench/sim_capacity.py {argv}` on {machine()}: the emulator (H100 /\n"
        "Llama-3.1-8B, max_num_seqs 1024) on one core, a headless Locust (256 output tokens a\n"
        "stream) on the other; medians of the runs. Lateness: each token's write start against the\n"
        "end of the engine step that made it. Floor: `bench/send_floor.py`, a bare sender making the\n"
        "same writes (one per stream every step, same period) measured the same way: what this\n"
        "machine's kernel and host make any single-core server. Model pace: real time over modelled\n"
        "step time while the engine is busy (1.0: the emulator never stretches the GPU's timeline).\n"
        "Targets: lateness p99 < 2 ms at 256 streams, < 5 ms at 1,000.\n\n"
        "| emulator | streams | lateness p50 / p99 (ms) | p99 of each run | floor p50 / p99 (ms) "
        "| floor p99 of each run | step period (ms) | model pace | emulator CPU (cores) | tokens/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--levels", default="64,256,1000", help="comma-separated stream counts")
    p.add_argument("--repeat", type=int, default=1, help="runs per level (and per version)")
    p.add_argument("--compare", type=Path, help="a directory holding another version's tokenload package")
    p.add_argument("--no-floor", action="store_true", help="skip the bare-send floor next to each level")
    p.add_argument(
        "--write-results",
        choices=("auto", "yes", "no"),
        default="auto",
        help="update bench/RESULTS.md (auto: unless --quick)",
    )
    args = p.parse_args()
    seconds = 4.0 if args.quick else 10.0
    levels = [int(x) for x in args.levels.split(",")]
    versions = {"this": ROOT} | ({"compare": args.compare.resolve()} if args.compare else {})
    runs: dict[str, dict[int, list[dict]]] = {v: {n: [] for n in levels} for v in versions}
    with tempfile.TemporaryDirectory(prefix="tokenload-bench-") as d:
        for rep in range(args.repeat):
            for n in levels:
                # Alternate which version goes first, so a drift in machine load favours neither.
                order = list(versions) if rep % 2 == 0 else list(reversed(versions))
                for v in order:
                    run = level(n, seconds, Path(d), versions[v])
                    if v == "this" and not args.no_floor:
                        run["floor"] = floor(n, seconds, run["step_ms"])
                    runs[v][n].append(run)
    result: dict = {
        "machine": {"cpus": len(CPUS), "client_cpu": CLIENT_CPU, "server_cpu": SERVER_CPU},
        "note": (
            "lateness and CPU over the steady window, after every stream has started; floor: "
            "bench/send_floor.py's bare sends at the same streams and step period, run next to it"
        ),
    }
    for v, root in versions.items():
        key = "levels" if v == "this" else "compare_levels"
        if args.repeat == 1:
            result[key] = [runs[v][n][0] for n in levels]
        else:
            result[key] = [medians(runs[v][n]) for n in levels]
            result[key + "_runs"] = [runs[v][n] for n in levels]
        if v == "compare":
            result["compare_root"] = str(root)
    print(json.dumps(result, indent=2))
    if args.write_results == "yes" or (args.write_results == "auto" and not args.quick):
        write_results_section("sim", results_markdown(result, " ".join(sys.argv[1:])))


if __name__ == "__main__":
    main()

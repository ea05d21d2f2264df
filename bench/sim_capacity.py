"""Can the emulator keep up? Token send lateness and emulator CPU at 64, 256 and 1,000 streams.

For each level a fresh ``tokenload sim`` (pinned to one core; H100 / Llama-3.1-8B profile with
room for every stream: max_num_seqs 1024) is loaded by a headless Locust process (pinned to the
other core). The emulator measures, for every token it sends, the delay between the time the
engine's step model says the token exists and the moment its write starts. Prints JSON:
lateness p50/p99 (target: p99 < 2 ms at 256 streams, < 5 ms at 1,000, on one core) and the
emulator's CPU share over a steady window.

``--compare DIR`` runs the emulator from another checkout's ``tokenload`` package (only the
server: Locust always runs this tree's) next to this one, alternating, level by level, so two
versions are judged under the same machine load; ``--repeat N`` runs every level N times and
reports each run and the medians.

Run: ``.venv/bin/python bench/sim_capacity.py [--quick] [--compare DIR] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from _harness import CLIENT_CPU, CPUS, ROOT, SERVER_CPU, get_json, rounded, start_locust, start_target


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
        get_json(srv.url + "/sim/stats?reset=1")  # lateness from here on: the steady window
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
        "running_at_end_of_window": stats["running"],
        "token_lateness_ms": {
            "p50": rounded(late["p50"]),
            "p99": rounded(late["p99"]),
            "max": rounded(late["max"]),
        },
        "emulator_cpu_share": round(cpu / (t1 - t0), 3),
        "engine_steps": stats["steps"],
    }


def medians(runs: list[dict]) -> dict:
    def med(get) -> float | None:
        vals = [v for v in map(get, runs) if v is not None]
        return rounded(statistics.median(vals)) if vals else None

    return {
        "streams": runs[0]["streams"],
        "runs": len(runs),
        "token_lateness_ms": {
            q: med(lambda r, q=q: r["token_lateness_ms"][q]) for q in ("p50", "p99", "max")
        },
        "emulator_cpu_share": med(lambda r: r["emulator_cpu_share"]),
        "tokens_sent_in_window": med(lambda r: r["tokens_sent_in_window"]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--levels", default="64,256,1000", help="comma-separated stream counts")
    p.add_argument("--repeat", type=int, default=1, help="runs per level (and per version)")
    p.add_argument("--compare", type=Path, help="a directory holding another version's tokenload package")
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
                    runs[v][n].append(level(n, seconds, Path(d), versions[v]))
    result: dict = {
        "machine": {"cpus": len(CPUS), "client_cpu": CLIENT_CPU, "server_cpu": SERVER_CPU},
        "note": "lateness and CPU over the steady window, after every stream has started",
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


if __name__ == "__main__":
    main()

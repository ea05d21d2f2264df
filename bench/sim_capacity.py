"""Can the emulator keep up? Token send lateness and emulator CPU at 64, 256 and 1,000 streams.

For each level a fresh ``tokenload sim`` (pinned to one core; H100 / Llama-3.1-8B profile with
room for every stream: max_num_seqs 1024) is loaded by a headless Locust process (pinned to the
other core). The emulator measures, for every token it sends, the delay between the time the
engine's step model says the token exists and the moment its write starts. Prints JSON:
lateness p50/p99 (target: p99 < 2 ms at 256 streams, < 5 ms at 1,000, on one core) and the
emulator's CPU share over a steady window.

Run: ``.venv/bin/python bench/sim_capacity.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psutil
from _harness import CLIENT_CPU, CPUS, SERVER_CPU, get_json, rounded, start_locust, start_target


def level(streams: int, seconds: float, tmp: Path) -> dict:
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
    try:
        proc = start_locust(
            srv.url,
            tmp / f"run{streams}",
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    seconds = 4.0 if args.quick else 10.0
    with tempfile.TemporaryDirectory(prefix="tokenload-bench-") as d:
        result = {
            "machine": {"cpus": len(CPUS), "client_cpu": CLIENT_CPU, "server_cpu": SERVER_CPU},
            "note": "lateness and CPU over the steady window, after every stream has started",
            "levels": [level(n, seconds, Path(d)) for n in (64, 256, 1000)],
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

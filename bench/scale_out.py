"""Does the load generator scale out? Output tokens/s with 1, 2 and 4 worker processes, side by side.

For each worker count a Locust master and N workers (``locustfiles/completions.py``, the same total
of concurrent streams split over the workers) load an as-fast-as-possible local stream (the mock:
no TTFT, no inter-token gap, 512 tokens), pinned to one core; the master and the workers share the
other cores. Over a steady window it counts the tokens the mock wrote (the server's own count) and
the CPU of the master (psutil on its PID) and of the workers. Prints one JSON object with the
medians over ``--repeats`` runs of each configuration, the configurations interleaved so a noisy
neighbour hurts them alike.

On a machine with one core left for the client, more workers cannot add throughput: the figures to
read are then ``client_bound`` (the workers' CPU share against the cores they have), ``server_bound``
(the mock's core) and the master's CPU, which should stay small as workers are added.

Run: ``.venv/bin/python bench/scale_out.py [--quick]``. Quote medians and ratios; machines are shared.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from _harness import BIN, CPUS, ROOT, SERVER_CPU, get_json, rounded, start_target

CLIENT_CPUS = {c for c in CPUS if c != SERVER_CPU} or set(CPUS)
WORKER_COUNTS = (1, 2, 4)
STREAMS = 64
OUTPUT_TOKENS = 512
#: Every wait below is bounded by these.
START_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "locust"), "-f", str(ROOT / "locustfiles/completions.py"), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, CLIENT_CPUS),
    )


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def one_run(workers: int, window_s: float, tmp: Path) -> dict:
    srv = start_target(
        ["-m", "tokenload.mock", "--port", "0", "--ttft-ms", "0", "--itl-ms", "0", "--tokens", "512"]
    )
    port = _free_port()
    procs: list[subprocess.Popen] = []
    try:
        master = _spawn(
            [
                "--master", "--headless", "--host", srv.url, "--master-bind-host", "127.0.0.1",
                "--master-bind-port", str(port), "--expect-workers", str(workers), "-u", str(STREAMS),
                "-r", str(STREAMS), "-t", f"{int(window_s + 10)}s", "--stop-timeout", "10", "--only-summary",
                "--loglevel", "WARNING", "--no-server-metrics", "--output-tokens", str(OUTPUT_TOKENS),
                "--prompt-tokens", "32", "--run-dir", str(tmp / f"run{workers}_{time.monotonic_ns()}"),
            ]
        )  # fmt: skip
        procs.append(master)
        procs += [
            _spawn(["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)])
            for _ in range(workers)
        ]
        ps_master = psutil.Process(master.pid)
        ps_workers = [psutil.Process(p.pid) for p in procs[1:]]
        server = psutil.Process(srv.proc.pid)
        deadline = time.monotonic() + START_TIMEOUT_S
        while get_json(srv.url + "/mock/stats")["tokens_sent"] == 0:
            if time.monotonic() > deadline or master.poll() is not None:
                raise RuntimeError(f"{workers} worker(s): no tokens streamed within {START_TIMEOUT_S} s")
            time.sleep(0.2)
        time.sleep(2.0)  # every user spawned and streaming: outside the window
        n0, m0, w0, s0, t0 = (
            get_json(srv.url + "/mock/stats")["tokens_sent"],
            _cpu_s([ps_master]),
            _cpu_s(ps_workers),
            _cpu_s([server]),
            time.perf_counter(),
        )
        time.sleep(window_s)
        n1, m1, w1, s1, t1 = (
            get_json(srv.url + "/mock/stats")["tokens_sent"],
            _cpu_s([ps_master]),
            _cpu_s(ps_workers),
            _cpu_s([server]),
            time.perf_counter(),
        )
        master.wait(timeout=EXIT_TIMEOUT_S)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        srv.stop()
    span = t1 - t0
    return {
        "tokens_per_s": (n1 - n0) / span,
        "master_cpu_share": (m1 - m0) / span,
        "workers_cpu_share": (w1 - w0) / span,
        "server_cpu_share": (s1 - s0) / span,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="short windows, two repeats (a smoke run)")
    p.add_argument("--repeats", type=int, default=None, help="runs per worker count (default 3, quick 2)")
    args = p.parse_args()
    window = 4.0 if args.quick else 10.0
    repeats = args.repeats or (2 if args.quick else 3)
    runs: dict[int, list[dict]] = {n: [] for n in WORKER_COUNTS}
    with tempfile.TemporaryDirectory(prefix="tokenload-bench-") as d:
        for _ in range(repeats):
            for n in WORKER_COUNTS:  # interleaved: drift on a shared machine hits all alike
                runs[n].append(one_run(n, window, Path(d)))
    rows = []
    base = statistics.median(r["tokens_per_s"] for r in runs[WORKER_COUNTS[0]])
    for n in WORKER_COUNTS:
        med = {k: statistics.median(r[k] for r in runs[n]) for k in runs[n][0]}
        rows.append(
            {
                "workers": n,
                "output_tokens_per_s": round(med["tokens_per_s"]),
                "speedup_vs_1": rounded(med["tokens_per_s"] / base if base else None, 2),
                "master_cpu_share": rounded(med["master_cpu_share"]),
                "workers_cpu_share": rounded(med["workers_cpu_share"]),
                # The workers used (almost) all the cores they had: the client, not the target, limits.
                "client_bound": med["workers_cpu_share"] > 0.9 * len(CLIENT_CPUS),
                "server_cpu_share": rounded(med["server_cpu_share"]),
                # The target's one core was (almost) full too: then neither side alone is the limit.
                "server_bound": med["server_cpu_share"] > 0.9,
                "runs": [round(r["tokens_per_s"]) for r in runs[n]],
            }
        )
    result = {
        "machine": {"cpus": len(CPUS), "server_cpu": SERVER_CPU, "client_cpus": sorted(CLIENT_CPUS)},
        "target": f"tokenload.mock, no TTFT or inter-token gap, {OUTPUT_TOKENS} tokens per request",
        "concurrent_streams": STREAMS,
        "window_s": window,
        "repeats": repeats,
        "scale_out": rows,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

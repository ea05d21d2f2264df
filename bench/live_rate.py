"""The live page's output tokens/s against the server's own counter, during a real run.

Runs a Locust master with its web UI and one worker (processes, loopback) against ``tokenload
sim`` (the A40 profile): a staircase of 4 and 16 users, 512-token prompts, lognormal outputs
(mean 512 tokens, so streams of several seconds, many outliving the live page's 10 s window's
edges). When it has stopped, it reads the page's JSON (``/tokenload/api/series``) and, for each
client point, compares its ``output_tokens_per_s`` with the mean of the server's
``generation_tokens_per_s`` (``vllm:generation_tokens_total``'s rate, scraped every 0.5 s) over
the same window. Prints the points' relative differences (median and 90th percentile of their
absolute values), as JSON.

    python bench/live_rate.py [--step-duration 20]

Run it with ``PYTHONPATH=<a worktree>`` to measure another version side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def run(step_s: float) -> dict:
    from tokenload.serving.process import ServerProcess

    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess(["-m", "tokenload.sim", "--port", "0"], log_path=Path(tmp) / "sim.log") as sim,
    ):
        web, master_port = _port(), _port()
        files = "locustfiles/chat.py,locustfiles/staircase.py"
        common = ["-f", files]
        master = [
            str(BIN / "locust"), *common, "--master", "--host", sim.url, "--expect-workers", "1",
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
            "--web-host", "127.0.0.1", "--web-port", str(web), "--autostart", "--autoquit", "120",
            "--concurrency", "4,16", "--step-duration", str(step_s), "--warmup", "0.1",
            "--prompt-tokens", "512", "--output-tokens", "lognormal:mean=512,sigma=0.8",
            "--stop-timeout", "5", "--metrics-interval", "0.5", "--run-dir", str(Path(tmp) / "run"),
        ]  # fmt: skip
        worker = [
            str(BIN / "locust"), *common, "--worker", "--master-host", "127.0.0.1",
            "--master-port", str(master_port),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log = open(Path(tmp) / "master.log", "wb")  # noqa: SIM115
        procs = [subprocess.Popen(master, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)]
        procs.append(subprocess.Popen(worker, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env))
        body: dict = {}
        try:
            deadline = time.monotonic() + 2 * step_s + 90
            base = f"http://127.0.0.1:{web}"
            while time.monotonic() < deadline:
                time.sleep(1.0)
                try:
                    body = _get(f"{base}/tokenload/api/series")
                except OSError:
                    continue
                if body["status"]["state"] == "stopped" and len(body["steps"]) >= 2:
                    break
        finally:
            for p in procs:
                _stop(p)
            log.close()
    client, server = body["client"], body["server"]
    window = float(body.get("window_s") or 10.0)
    st, sr = server["t"], server["generation_tokens_per_s"]
    diffs = []
    for t, rate, users in zip(client["t"], client["output_tokens_per_s"], client["users"], strict=True):
        inside = [r for ts, r in zip(st, sr, strict=True) if t - window < ts <= t and r is not None]
        if rate is None or not users or len(inside) < window:  # a full window of scrapes
            continue
        truth = statistics.fmean(inside)
        if truth > 0:
            diffs.append(rate / truth - 1)
    mags = sorted(abs(d) for d in diffs)
    return {
        "points": len(diffs),
        "window_s": window,
        "median_abs_difference_percent": round(100 * statistics.median(mags), 1) if mags else None,
        "p90_abs_difference_percent": round(100 * mags[int(0.9 * (len(mags) - 1))], 1) if mags else None,
        "median_difference_percent": round(100 * statistics.median(diffs), 1) if diffs else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--step-duration", type=float, default=20.0)
    args = p.parse_args()
    print(json.dumps(run(args.step_duration), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
